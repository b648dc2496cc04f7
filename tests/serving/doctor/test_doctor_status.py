"""`dsv4-serve doctor status` on dumps of an installed release, with the statuses KubeRay,
the scheduler, the kubelet and the Job controller set; MTP/TTFT from a Prometheus API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from model_overrides.jit_pool import manifest as cache_manifest
from serving.cli import main
from serving.doctor import prometheus
from serving.monitoring.rules import rule_groups
from tests.support import doctor_cluster as dc
from tests.support import doctor_scenarios as sc

WORKER = "dsv4-dsv4-serve-x7k2p-h200-workers-worker-m2v9c"
WARM_JOB = next(
    j["metadata"]["name"]
    for j in dc.rendered()
    if j["kind"] == "Job" and j["metadata"]["labels"]["app.kubernetes.io/component"] == "jit-warm"
)
CRASH_LOG = "\n".join(
    [
        "INFO 11-30 11:52:10 [__init__.py:239] Automatically detected platform cuda.",
        "(RayWorkerWrapper pid=412) INFO Loading safetensors checkpoint shards: 100% 65/65",
        "ERROR 11-30 11:58:41 [core.py:700] EngineCore failed to start.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 14.00 GiB. GPU 3 has "
        "a total capacity of 139.81 GiB of which 9.44 GiB is free.",
    ]
)


def status(capsys, tmp_path: Path, objects: list, logs: dict | None = None, *extra: str):
    dump = dc.write_dump(tmp_path / "dump", objects, logs=logs)
    code = main(
        [
            "doctor",
            "status",
            dc.RELEASE,
            "-n",
            dc.NAMESPACE,
            "--from-dump",
            str(dump),
            "-o",
            "json",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["exit_code"] == code
    return code, report


def findings(report: dict, check: str) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == check]


def only(report: dict, check: str) -> dict:
    (finding,) = findings(report, check)
    return finding


def cluster(shared_dir: Path, *release_objects) -> list:
    nodes = [*sc.h200_nodes(), *sc.cpu_nodes()]
    return [*dc.cluster_base(shared_dir, nodes, storage=sc.SHARED_STORAGE), *release_objects]


def test_rayservice_stuck_with_a_pending_worker(capsys, tmp_path, shared_dir):
    code, report = status(capsys, tmp_path, sc.stuck_cluster(shared_dir))
    assert code == 1
    assert (
        only(report, "release.rayservice")["title"]
        == "RayService dsv4-dsv4-serve initializing for 45m"
    )
    assert only(report, "release.raycluster")["title"] == (
        "RayCluster dsv4-dsv4-serve-x7k2p (pending): 0/1 worker pods ready, age 44m"
    )
    warm_pod, pending, ready = findings(report, "release.pods")
    assert pending["status"] == "fail"
    assert pending["title"] == f"worker pod {WORKER} Pending for 44m: cannot be scheduled"
    assert pending["details"][0] == "scheduler: " + sc.TAINT_MESSAGE
    assert "  gpu-h200-a: untolerated taint dedicated=inference:NoSchedule" in pending["details"]
    # The taint is the cause; the CPU nodes' "Insufficient nvidia.com/gpu" is not advice.
    assert pending["fix"] == (
        "add to your values: scheduling: {tolerations: [{key: dedicated, value: inference, "
        "operator: Equal, effect: NoSchedule}]}"
    )
    # The warm Job's pod asks for the same GPUs with the same tolerations: the same fix.
    assert (
        warm_pod["title"] == f"jit-warm pod {WARM_JOB}-w8k3n Pending for 44m: cannot be scheduled"
    )
    assert (warm_pod["status"], warm_pod["fix"]) == ("fail", pending["fix"])
    warm = only(report, "release.jit-warm")
    assert (warm["status"], warm["title"]) == (
        "warn",
        f"JIT warm Job {WARM_JOB}: its pod has been Pending for 44m (see Pods above)",
    )
    assert ready["title"] == "1 pod(s) running and ready"
    serve = only(report, "release.serve")
    assert serve["status"] == "warn" and serve["title"].endswith("DEPLOYING")
    assert "Ray waits for GPU workers to join the cluster" in serve["fix"]
    assert (
        only(report, "release.download")["title"]
        == "download Job dsv4-dsv4-serve-download completed (took 40m)"
    )


def test_pending_for_lack_of_free_gpus(capsys, tmp_path, shared_dir):
    message = (
        "0/6 nodes are available: 6 Insufficient nvidia.com/gpu. preemption: 0/6 nodes are "
        "available: 6 No preemption victims found for incoming pod."
    )
    busy = [dc.busy_pod(f"gpu-h200-{i}", 4) for i in "abcd"]
    code, report = status(
        capsys, tmp_path, cluster(shared_dir, *sc.release(pending_message=message), *busy)
    )
    pending = findings(report, "release.pods")[0]
    assert "  gpu-h200-a: 4 of 8 nvidia.com/gpu free" in pending["details"]
    assert pending["fix"].startswith("not enough free nvidia.com/gpu")


def test_healthy_release_is_serving(capsys, tmp_path, shared_dir):
    code, report = status(
        capsys, tmp_path, cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING"))
    )
    assert code == 0, [f for f in report["findings"] if f["status"] != "pass"]
    assert report["summary"] == {"pass": 8, "warn": 0, "fail": 0}
    warm = only(report, "release.jit-warm")
    assert warm["title"] == f"JIT warm Job {WARM_JOB} complete (took 8m)"
    assert warm["details"] == [sc.WARM_FIT]
    assert "fits this node" in sc.WARM_FIT
    assert (
        only(report, "release.rayservice")["title"]
        == "RayService dsv4-dsv4-serve Ready: 2 serve endpoint(s)"
    )
    assert (
        only(report, "release.serve")["title"]
        == "Serve application dsv4 on dsv4-dsv4-serve-x7k2p RUNNING"
    )
    assert report["verdict"] == "the release is serving"


def _crashing(restarts: int = 6, reason: str = "Error", exit_code: int = 1) -> dict:
    return {
        "ready": False,
        "started": False,
        "restartCount": restarts,
        "state": {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off 5m0s restarting failed container=ray-worker "
                f"pod={WORKER}_dsv4(0)",
            }
        },
        "lastState": {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": dc.ts(8),
                "finishedAt": dc.ts(2),
                "containerID": "containerd://" + "ab" * 32,
            }
        },
    }


def test_crash_loop_shows_the_last_log_lines(capsys, tmp_path, shared_dir):
    objects = cluster(
        shared_dir,
        *sc.release(worker_node="gpu-h200-a", worker_status=_crashing(), worker_ready=False),
    )
    logs = {f"{WORKER}/ray-worker.previous.log": "starting\n" * 50 + CRASH_LOG + "\n"}
    code, report = status(capsys, tmp_path, objects, logs, "--log-lines", "4")
    assert code == 1
    (crash,) = [f for f in findings(report, "release.pods") if f["status"] == "fail"]
    assert (
        crash["title"]
        == f"worker pod {WORKER}: container ray-worker CrashLoopBackOff (exit 1, 6 restart(s))"
    )
    assert (
        crash["details"][0]
        == f"last log lines (kubectl -n dsv4 logs {WORKER} -c ray-worker --previous --tail 4):"
    )
    assert crash["details"][-1].startswith("  | torch.OutOfMemoryError: CUDA out of memory")
    assert len(crash["details"]) == 5


def test_crash_loop_without_logs_in_the_dump_says_how_to_get_them(capsys, tmp_path, shared_dir):
    objects = cluster(
        shared_dir,
        *sc.release(worker_node="gpu-h200-a", worker_status=_crashing(), worker_ready=False),
    )
    code, report = status(capsys, tmp_path, objects)
    (crash,) = [f for f in findings(report, "release.pods") if f["status"] == "fail"]
    assert crash["details"] == [
        f"(logs not in the dump: kubectl -n dsv4 logs {WORKER} -c ray-worker --previous --tail 20)"
    ]


def test_oom_killed_worker(capsys, tmp_path, shared_dir):
    objects = cluster(
        shared_dir,
        *sc.release(
            worker_node="gpu-h200-a",
            worker_status=_crashing(2, "OOMKilled", 137),
            worker_ready=False,
        ),
    )
    code, report = status(capsys, tmp_path, objects)
    (oom,) = [f for f in findings(report, "release.pods") if f["status"] == "fail"]
    assert oom["title"] == f"worker pod {WORKER}: container ray-worker was OOMKilled (2 restart(s))"
    assert "raise workers.resources.memory" in oom["fix"]


def test_image_pull_back_off(capsys, tmp_path, shared_dir):
    image = "ghcr.io/dsv4-serve/dsv4-serve-cuda:0.1.0-vllm0.34.0"
    pulling = {
        "ready": False,
        "started": False,
        "imageID": "",
        "state": {
            "waiting": {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}": ErrImagePull: failed to pull and '
                f'unpack image "{image}": failed to resolve reference "{image}": '
                f"{image}: not found",
            }
        },
    }
    pulling.pop("containerID", None)
    objects = cluster(
        shared_dir, *sc.release(worker_node="gpu-h200-a", worker_status=pulling, worker_ready=False)
    )
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"] == WORKER:
            obj["status"]["phase"] = "Pending"
            obj["status"]["containerStatuses"][0].pop("containerID")
    code, report = status(capsys, tmp_path, objects)
    (pull,) = [f for f in findings(report, "release.pods") if f["status"] == "fail"]
    assert pull["title"] == f"worker pod {WORKER}: container ray-worker ImagePullBackOff"
    assert f"check that {image} exists and is pushed" in pull["fix"]
    assert "not found" in pull["details"][0]


def _worker_in_init(objects: list, container: str, minutes: float) -> list:
    """The objects with the worker scheduled and its init container `container` running
    for `minutes` (no scheduling events left)."""
    waiting = [
        {
            "name": container,
            "image": "ghcr.io/dsv4-serve/dsv4-serve-cuda:0.1.0-vllm0.34.0",
            "imageID": "ghcr.io/dsv4-serve/dsv4-serve-cuda@sha256:" + "cd" * 32,
            "containerID": "containerd://" + "ef" * 32,
            "ready": False,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": dc.ts(minutes)}},
            "lastState": {},
        }
    ]
    (rc,) = dc.by_kind(objects, "RayCluster")
    worker = dc.ray_pod(
        rc,
        "worker",
        "m2v9c",
        "gpu-h200-a",
        phase="Pending",
        ready=False,
        init_statuses=waiting,
        container_status={"state": {"waiting": {"reason": "PodInitializing"}}, "started": False},
    )
    objects = [o for o in objects if o["metadata"].get("name") != WORKER and o["kind"] != "Event"]
    return [*objects, worker]


def test_failed_download_job_with_its_log(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release(download="failed"))
    objects = _worker_in_init(objects, "wait-for-weights", 43)
    job_pod = next(o for o in objects if o["kind"] == "Pod" and "download" in o["metadata"]["name"])
    log = (
        "downloading deepseek-ai/DeepSeek-V4-Flash to /models/deepseek-ai/DeepSeek-V4-Flash\n"
        "/bin/sh: 14: huggingface-cli: not found\n"
    )
    code, report = status(
        capsys, tmp_path, objects, {f"{job_pod['metadata']['name']}/download.log": log}
    )
    assert code == 1
    download = only(report, "release.download")
    assert download["title"] == (
        "download Job dsv4-dsv4-serve-download failed: BackoffLimitExceeded Job has reached the "
        "specified backoff limit"
    )
    assert download["details"][-1] == "  | /bin/sh: 14: huggingface-cli: not found"
    waiting_finding = [
        f for f in findings(report, "release.pods") if "waiting for the download Job" in f["title"]
    ]
    assert waiting_finding and waiting_finding[0]["status"] == "warn"


# -- the JIT warm Job ---------------------------------------------------------------------
def test_failed_warm_job_shows_its_pods_termination_message(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING", warm="failed"))
    code, report = status(capsys, tmp_path, objects)
    assert code == 0  # the engines compile their own kernels: degraded, not broken
    warm = only(report, "release.jit-warm")
    assert warm["status"] == "warn"
    assert warm["title"] == (
        f"JIT warm Job {WARM_JOB} failed: BackoffLimitExceeded Job has reached the specified "
        "backoff limit; the engines compile their own kernels at start"
    )
    assert warm["details"][0] == f"earlier attempt: pod {WARM_JOB}-w8k3n, exit 1"
    assert warm["details"][1] == f"pod {WARM_JOB}-r5t2q, exit 1:"
    assert warm["details"][-2].startswith("  | torch.OutOfMemoryError: CUDA out of memory")
    # The message's last line is the fit line `warm --check` printed after the failed warm.
    assert warm["details"][-1] == "  | " + sc.WARM_FAILED_LOG.splitlines()[-1]
    assert "has no manifest" in warm["details"][-1]
    assert f"kubectl -n dsv4 delete job {WARM_JOB}" in warm["fix"]
    # Its failed pods are the Job's story, not failed pods of the release.
    assert [f["title"] for f in findings(report, "release.pods")] == ["2 pod(s) running and ready"]


def test_running_warm_job_shows_its_log_and_the_waiting_worker(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release(warm="running"))
    objects = _worker_in_init(objects, "wait-jit-warm", 5)
    log = (
        "[warm    0.0s] preset h200-flash-mtp: warm model flash 5 layers (fp4 experts) at "
        "/var/cache/dsv4/warm-model/flash-5-fp4, target vllm-k1, cache /var/cache/dsv4, 96 "
        "compile processes\n"
        "[warm  318.2s] engine ready in 318.2s (load 141.0s, compile pool 96.4s)\n"
    )
    code, report = status(capsys, tmp_path, objects, {f"{WARM_JOB}-w8k3n/warm.log": log})
    warm = only(report, "release.jit-warm")
    assert (warm["status"], warm["title"]) == ("warn", f"JIT warm Job {WARM_JOB} running for 6m")
    assert warm["details"][0] == (
        f"last log lines (kubectl -n dsv4 logs {WARM_JOB}-w8k3n -c warm --tail 20):"
    )
    assert warm["details"][-1].startswith("  | [warm  318.2s] engine ready")
    assert warm["fix"].endswith(f"kubectl -n dsv4 logs -f job/{WARM_JOB}")
    (wait,) = [f for f in findings(report, "release.pods") if "JIT warm" in f["title"]]
    assert wait["status"] == "warn"
    assert wait["title"] == (
        f"worker pod {WORKER}: waiting for the JIT warm Job to fill the kernel cache (at most "
        "jitCache.warm.waitSeconds, then the engine compiles its own) (5m)"
    )


def test_warm_job_missing_or_off(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING", warm="missing"))
    code, report = status(capsys, tmp_path, objects)
    missing = only(report, "release.jit-warm")
    assert (missing["status"], missing["title"]) == (
        "warn",
        "JIT warm Job of release dsv4 missing: the GPU workers wait for it "
        "(jitCache.warm.waitSeconds), then compile their own kernels",
    )
    assert missing["fix"].startswith("helm upgrade dsv4 with the same values creates it again")
    # Off (jitCache.warm.enabled=false): no Job, no worker waits, nothing to say.
    objects = cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING", warm=None))
    code, report = status(capsys, tmp_path, objects)
    assert code == 0 and findings(report, "release.jit-warm") == []


def test_complete_warm_whose_cache_does_not_fit_warns(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING"))
    newer = sc.WARM_MANIFEST.versions.model_copy(update={"vllm": "0.35.0"})
    line = cache_manifest.fit_line(sc.WARM_MANIFEST, newer, sc.WARM_MANIFEST.gpu, sc.WARM_CACHE)
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"].startswith(WARM_JOB):
            terminated = obj["status"]["containerStatuses"][0]["state"]["terminated"]
            terminated["message"] = f"[warm  471.2s] manifest ...\n{line}\n"
    code, report = status(capsys, tmp_path, objects)
    warm = only(report, "release.jit-warm")
    assert warm["status"] == "warn"
    assert (
        warm["title"] == f"JIT warm Job {WARM_JOB} complete (took 8m), but the cache does not fit"
    )
    assert warm["details"] == [line]
    assert "vllm 0.34.0 in the cache, 0.35.0 here" in line


def test_serve_application_deploy_failed(capsys, tmp_path, shared_dir):
    message = (
        "Deploying app 'dsv4' failed with exception:\n"
        "Traceback (most recent call last):\n"
        '  File "/home/dsv4/serving/app.py", line 52, in build\n'
        "    preset = load_preset(name, overrides)\n"
        "serving.config.preset.PresetError: preset 'h200-flash-mtp' is invalid:\n"
        "  speculation.num_speculative_tokens: Input should be less than or equal to 8"
    )
    objects = cluster(
        shared_dir,
        *sc.release(worker_node="gpu-h200-a", app_status="DEPLOY_FAILED", app_message=message),
    )
    code, report = status(capsys, tmp_path, objects)
    serve = only(report, "release.serve")
    assert serve["status"] == "fail" and serve["title"].endswith("DEPLOY_FAILED")
    assert serve["details"][0] == "  | Deploying app 'dsv4' failed with exception:"
    assert (
        serve["details"][-1]
        == "  |   speculation.num_speculative_tokens: Input should be less than or equal to 8"
    )


def test_replica_failure_and_initializing_timeout(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release())
    (rc,) = dc.by_kind(objects, "RayCluster")
    rc["status"]["conditions"].append(
        dc.cond(
            "ReplicaFailure",
            "True",
            "FailedCreateWorkerPod",
            'pods "dsv4-dsv4-serve-x7k2p-h200-workers-worker-zz9x1" is forbidden: exceeded quota: '
            "gpu-quota, requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=8, "
            "limited: requests.nvidia.com/gpu=8",
            10,
        )
    )
    (svc,) = dc.by_kind(objects, "RayService")
    svc["status"]["conditions"][0].update(
        reason="InitializingTimeout",
        message="RayService failed to become ready within the initializing timeout of 1h0m0s",
    )
    code, report = status(capsys, tmp_path, objects)
    assert code == 1
    assert "exceeded quota: gpu-quota" in only(report, "release.raycluster")["title"]
    assert "gave up initializing" in only(report, "release.rayservice")["title"]


def test_release_not_installed_or_kuberay_missing(capsys, tmp_path, shared_dir):
    code, report = status(capsys, tmp_path, cluster(shared_dir))
    assert code == 1
    assert (
        only(report, "release.rayservice")["title"]
        == "no RayService of release dsv4 in namespace dsv4"
    )
    objects = [
        o
        for o in cluster(shared_dir)
        if o["kind"] not in ("CustomResourceDefinition", "Deployment")
    ]
    code, report = status(capsys, tmp_path, objects)
    assert only(report, "kuberay.crds")["status"] == "fail"
    assert only(report, "kuberay.operator")["status"] == "fail"


def test_namespace_missing_is_one_line(capsys, tmp_path, shared_dir):
    dump = dc.write_dump(tmp_path / "d", cluster(shared_dir))
    code = main(["doctor", "status", "dsv4", "-n", "nope", "--from-dump", str(dump)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (
        "dsv4-serve doctor: error: namespace nope does not exist in the dump (create it: "
        "kubectl create namespace nope, or pass -n NAMESPACE)\n"
    )


# -- Prometheus ---------------------------------------------------------------------------
class FakePrometheus:
    """Answers /api/v1/query like Prometheus: {status, data: {resultType, result}}."""

    def __init__(self, series: dict[str, list[tuple[dict, float]]]) -> None:
        self.series = series
        self.queries: list[str] = []

    def __enter__(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                expr = parse_qs(url.query)["query"][0]
                fake.queries.append(expr)
                name = expr.split("{")[0]
                if name.startswith("bad"):
                    body = {"status": "error", "errorType": "bad_data", "error": "parse error"}
                else:
                    body = {
                        "status": "success",
                        "data": {
                            "resultType": "vector",
                            "result": [
                                {
                                    "metric": {"__name__": name, **labels},
                                    "value": [1764504000.0, str(v)],
                                }
                                for labels, v in fake.series.get(name, [])
                            ],
                        },
                    }
                payload = json.dumps(body).encode()
                self.send_response(200 if body["status"] == "success" else 400)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


MODEL_ID = "deepseek-ai/DeepSeek-V4-Flash"
MODEL = {"namespace": "dsv4", "model_name": MODEL_ID}


def test_queries_are_recording_rules_the_chart_ships():
    recorded = {r["record"] for g in rule_groups()["groups"] for r in g["rules"] if "record" in r}
    for name in (prometheus.ACCEPTANCE, prometheus.ACCEPTANCE_LENGTH, prometheus.TTFT_P90):
        assert name in recorded
    for threshold in ("acceptance_floor", "acceptance_baseline", "ttft_slo_seconds"):
        assert prometheus.THRESHOLD.format(threshold) in recorded


@pytest.mark.parametrize(
    "acceptance, ttft, expected",
    [
        (
            0.78,
            0.9,
            [
                ("pass", "deepseek-ai/DeepSeek-V4-Flash: MTP acceptance 78%, 1.78 tokens per step"),
                ("pass", "deepseek-ai/DeepSeek-V4-Flash: TTFT p90 0.90s (SLO 2.00s)"),
            ],
        ),
        (
            0.22,
            3.5,
            [
                (
                    "fail",
                    f"{MODEL_ID}: MTP acceptance 22%, 1.22 tokens per step, below the floor 40%",
                ),
                ("warn", "deepseek-ai/DeepSeek-V4-Flash: TTFT p90 3.50s, over the SLO 2.00s"),
            ],
        ),
        (
            0.55,
            1.0,
            [
                (
                    "warn",
                    f"{MODEL_ID}: MTP acceptance 55%, 1.55 tokens per step, below the baseline 70%",
                ),
                ("pass", "deepseek-ai/DeepSeek-V4-Flash: TTFT p90 1.00s (SLO 2.00s)"),
            ],
        ),
    ],
)
def test_mtp_acceptance_and_ttft(capsys, tmp_path, shared_dir, acceptance, ttft, expected):
    series = {
        prometheus.ACCEPTANCE: [(MODEL, acceptance)],
        prometheus.ACCEPTANCE_LENGTH: [(MODEL, 1 + acceptance)],
        prometheus.TTFT_P90: [({**MODEL, "quantile": "0.9"}, ttft)],
        "dsv4:threshold:acceptance_floor": [(MODEL, 0.4)],
        "dsv4:threshold:acceptance_baseline": [(MODEL, 0.7)],
        "dsv4:threshold:ttft_slo_seconds": [(MODEL, 2.0)],
    }
    objects = cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING"))
    with FakePrometheus(series) as url:
        _, report = status(capsys, tmp_path, objects, None, "--prometheus", url)
    assert [(f["status"], f["title"]) for f in findings(report, "metrics.prometheus")] == expected


def test_prometheus_without_data_or_unreachable_warns(capsys, tmp_path, shared_dir):
    objects = cluster(shared_dir, *sc.release(ready=True, app_status="RUNNING"))
    with FakePrometheus({}) as url:
        code, report = status(capsys, tmp_path, objects, None, "--prometheus", url)
    assert code == 0
    assert (
        only(report, "metrics.prometheus")["title"]
        == "no dsv4 metrics for namespace dsv4 in the last 5 minutes"
    )
    code, report = status(capsys, tmp_path, objects, None, "--prometheus", "http://127.0.0.1:9")
    finding = only(report, "metrics.prometheus")
    assert finding["status"] == "warn" and finding["title"].startswith(
        "cannot reach Prometheus at http://127.0.0.1:9"
    )


def test_prometheus_error_body():
    with FakePrometheus({}) as url, pytest.raises(prometheus.PrometheusError, match="parse error"):
        prometheus.query(url, "bad{")
