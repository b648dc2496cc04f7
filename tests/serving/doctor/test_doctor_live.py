"""The live path: the official `kubernetes` client against an API server on 127.0.0.1
(tests/support/doctor_apiserver.py), and its failures as the client really raises them.

The same objects served live and written as a dump give the same report: the live path is
the dump path fed by the client's own list / read / SelfSubjectAccessReview calls."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException, ForbiddenException, UnauthorizedException

from serving.cli import main
from serving.doctor import kinds
from serving.doctor.errors import DoctorError, Unavailable
from serving.doctor.live import LiveCluster, load_client
from serving.doctor.progress import Progress
from tests.support import doctor_cluster as dc
from tests.support import doctor_scenarios as sc
from tests.support.doctor_apiserver import FakeApiServer, kubeconfig, serving
from tests.support.paths import ROOT

WORKER = "dsv4-dsv4-serve-x7k2p-h200-workers-worker-m2v9c"


@pytest.fixture(autouse=True)
def fixed_now(monkeypatch):
    # Ages in the report are measured from the fixtures' time, as a dump's are.
    monkeypatch.setattr("serving.doctor.cluster.utcnow", lambda: dc.NOW)


@pytest.fixture(autouse=True)
def no_ambient_kubeconfig(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["doctor", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def served(objects: list, **kwargs) -> FakeApiServer:
    return FakeApiServer(objects, dc.version_doc()["serverVersion"], **kwargs)


def _without_source(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("source:"))


@pytest.mark.parametrize("command", ["preflight", "status"])
def test_live_report_equals_dump_report(capsys, tmp_path, shared_dir, command):
    objects = [*sc.stuck_cluster(shared_dir), dc.busy_pod("gpu-h200-b", 2)]
    args = ["preflight", "h200-flash-mtp"] if command == "preflight" else ["status", dc.RELEASE]
    args += ["-n", dc.NAMESPACE]
    dump = dc.write_dump(tmp_path / "dump", objects)
    dump_code, from_dump, _ = run(capsys, *args, "--from-dump", str(dump))
    api = served(objects)
    with serving(api) as url:
        kc = kubeconfig(tmp_path / "kubeconfig", url)
        live_code, live, err = run(capsys, *args, "--kubeconfig", str(kc))
    assert err == ""
    assert live_code == dump_code == 1
    assert f"source: cluster {url} (context test)" in live
    assert _without_source(live) == _without_source(from_dump)
    # Read through the API's own paths, never by listing every CRD.
    assert (
        "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayservices.ray.io"
        in api.requests
    )
    assert "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions" not in api.requests
    if command == "preflight":
        # 11 kinds (the JIT warm Job's among them) x get/create/patch/delete, and Secrets
        # with helm's list/update too.
        reviews = "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        assert api.requests.count(reviews) == 11 * 4 + 6


def test_logs_are_read_through_the_api(capsys, tmp_path, shared_dir):
    crashing = {
        "ready": False,
        "started": False,
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}},
        "lastState": {
            "terminated": {
                "exitCode": 1,
                "reason": "Error",
                "startedAt": dc.ts(5),
                "finishedAt": dc.ts(4),
            }
        },
    }
    objects = [*dc.cluster_base(shared_dir, sc.h200_nodes(), sc.SHARED_STORAGE)]
    objects += sc.release(worker_node="gpu-h200-a", worker_status=crashing, worker_ready=False)
    logs = {(WORKER, "ray-worker", True): "line 1\nline 2\nValueError: bad model path\n"}
    with serving(served(objects, logs=logs)) as url:
        kc = kubeconfig(tmp_path / "kc", url)
        code, out, _ = run(capsys, "status", "dsv4", "--kubeconfig", str(kc), "--log-lines", "2")
    assert code == 1
    assert (
        f"last log lines (kubectl -n dsv4 logs {WORKER} -c ray-worker --previous --tail 2):" in out
    )
    assert "  | line 2\n" in out and "  | ValueError: bad model path\n" in out
    assert "  | line 1" not in out


def test_big_cluster_is_read_in_pages_with_progress(capsys, tmp_path, shared_dir):
    many = [dc.node(f"cpu-{i:04d}", None, memory_gi=251, cpu=64) for i in range(1200)]
    objects = dc.cluster_base(shared_dir, [*sc.h200_nodes(), *many], sc.SHARED_STORAGE)
    api = served(objects)
    with serving(api) as url:
        kc = kubeconfig(tmp_path / "kc", url)
        code, out, err = run(
            capsys,
            "preflight",
            "h200-flash-mtp",
            "--kubeconfig",
            str(kc),
            "--set",
            "model.download.enabled=true",
        )
    assert code == 0, out
    assert api.requests.count("GET /api/v1/nodes") == 3  # 500 + 500 + 204
    assert err.splitlines() == [
        "doctor: reading nodes: 1000 so far",
        "doctor: reading nodes: 1204 so far",
    ]
    assert "4 node(s) with >= 8 allocatable nvidia.com/gpu (4 GPU node(s) in all)" in out


def test_quiet_and_json_keep_stdout_clean(capsys, tmp_path, shared_dir):
    many = [dc.node(f"cpu-{i:04d}", None) for i in range(600)]
    objects = dc.cluster_base(shared_dir, [*sc.h200_nodes(), *many], sc.SHARED_STORAGE)
    with serving(served(objects)) as url:
        kc = kubeconfig(tmp_path / "kc", url)
        code, out, err = run(
            capsys, "preflight", "h200-flash-mtp", "--kubeconfig", str(kc), "-o", "json"
        )
        assert json.loads(out)["exit_code"] == code
        assert err == "doctor: reading nodes: 604 so far\n"
        code, out, err = run(
            capsys, "preflight", "h200-flash-mtp", "--kubeconfig", str(kc), "-o", "json", "-q"
        )
        assert err == ""


def test_forbidden_reads_become_warnings(capsys, tmp_path, shared_dir):
    """A namespace-scoped account: no cluster-wide nodes or pods. The checks that need them
    say so and what to ask for; the rest still run."""
    api = served(sc.healthy_h200(shared_dir), forbidden={"nodes", "pods"})
    with serving(api) as url:
        kc = kubeconfig(tmp_path / "kc", url)
        code, out, err = run(
            capsys,
            "preflight",
            "h200-flash-mtp",
            "--kubeconfig",
            str(kc),
            "-o",
            "json",
            "--set",
            "model.download.enabled=true",
        )
    report = json.loads(out)
    gpu = [f for f in report["findings"] if f["check"] == "gpu.nodes"][0]
    assert gpu["status"] == "warn"
    assert gpu["title"] == (
        'not checked: cannot read nodes: nodes is forbidden: User "alice" cannot list resource '
        '"nodes" in API group "" at the cluster scope'
    )
    assert code == 0 and report["summary"]["fail"] == 0


def test_expired_token_is_one_line(capsys, tmp_path, shared_dir):
    with serving(served(sc.healthy_h200(shared_dir))) as url:
        kc = kubeconfig(tmp_path / "kc", url, token="expired")
        code, out, err = run(capsys, "preflight", "h200-flash-mtp", "--kubeconfig", str(kc))
    assert code == 2 and out == ""
    assert err == (
        f"dsv4-serve doctor: error: the API server at {url} rejected the credentials (401 "
        "Unauthorized): the token is expired or invalid; log in again (e.g. your cloud's "
        "get-credentials command) and retry\n"
    )


def test_unreachable_api_server_is_one_line(capsys, tmp_path):
    port = closed_port()
    kc = kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    code, out, err = run(capsys, "status", "dsv4", "--kubeconfig", str(kc))
    assert code == 2 and out == ""
    assert err == (
        f"dsv4-serve doctor: error: cannot reach the API server at http://127.0.0.1:{port}: "
        "connection refused (is the cluster up, the VPN on, the kubeconfig context right?)\n"
    )


def test_namespace_that_does_not_exist_is_one_line(capsys, tmp_path, shared_dir):
    with serving(served(sc.healthy_h200(shared_dir))) as url:
        kc = kubeconfig(tmp_path / "kc", url)
        code, out, err = run(capsys, "status", "dsv4", "-n", "nope", "--kubeconfig", str(kc))
    assert code == 2 and out == ""
    assert err == (
        "dsv4-serve doctor: error: namespace nope does not exist in the cluster (create it: "
        "kubectl create namespace nope, or pass -n NAMESPACE)\n"
    )


def test_missing_kubeconfig_is_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "status", "dsv4")
    assert code == 2 and out == ""
    home = tmp_path / "home" / ".kube" / "config"
    assert err == (
        f"dsv4-serve doctor: error: no kubeconfig: {home} does not exist and KUBECONFIG is not "
        "set (pass --kubeconfig FILE, run inside a pod, or use --from-dump DIR)\n"
    )
    code, out, err = run(capsys, "status", "dsv4", "--kubeconfig", str(tmp_path / "missing"))
    assert (
        err == f"dsv4-serve doctor: error: kubeconfig {tmp_path / 'missing'} does not exist "
        "(pass --kubeconfig FILE)\n"
    )


@pytest.mark.parametrize(
    "content, expected",
    [
        ("garbage", "cannot be used"),
        ("apiVersion: v1\nkind: Config\nclusters: [}\n", "cannot be used"),
        ("", "cannot be used: Invalid kube-config."),
        ("apiVersion: v1\nkind: Config\ncurrent-context: gone\ncontexts: []\n", "cannot be used"),
    ],
)
def test_garbage_kubeconfig_is_one_line(capsys, tmp_path, content, expected):
    path = tmp_path / "kc"
    path.write_text(content)
    code, out, err = run(capsys, "status", "dsv4", "--kubeconfig", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"dsv4-serve doctor: error: kubeconfig {path} ") and expected in err


def test_unknown_context_is_one_line(capsys, tmp_path):
    kc = kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    code, out, err = run(capsys, "status", "dsv4", "--kubeconfig", str(kc), "--context", "prod")
    assert code == 2
    assert (
        err == f"dsv4-serve doctor: error: kubeconfig {kc} has no context 'prod' (it has: test)\n"
    )


def test_the_client_raises_what_the_doctor_maps(tmp_path, shared_dir):
    """The exceptions the doctor catches are the ones this client raises over HTTP."""
    with serving(served(sc.healthy_h200(shared_dir), forbidden={"pods"})) as url:
        bad = kubeconfig(tmp_path / "bad", url, token="expired")
        api = config.new_client_from_config(str(bad), persist_config=False)
        with pytest.raises(UnauthorizedException) as exc:
            client.CoreV1Api(api).list_node()
        assert exc.value.status == 401
        good = config.new_client_from_config(
            str(kubeconfig(tmp_path / "good", url)), persist_config=False
        )
        with pytest.raises(ForbiddenException):
            client.CoreV1Api(good).list_namespaced_pod("dsv4")
        with pytest.raises(ApiException) as exc:
            client.CoreV1Api(good).read_namespace("nope")
        assert exc.value.status == 404
        cluster = LiveCluster(good, "test", "dsv4", Progress(enabled=False))
        with pytest.raises(Unavailable, match="pods is forbidden"):
            cluster.list(kinds.POD, "dsv4")
        assert cluster.get(kinds.PVC, "nope", "dsv4") is None
        assert cluster.namespace_exists("nope") is False
        assert cluster.can_i("create", "ray.io", "rayservices", "dsv4") is True
        assert cluster.can_i("create", "ray.io", "rayservices", "other") is False
    with pytest.raises(config.ConfigException):
        config.load_kube_config(str(tmp_path / "absent"))
    kc = kubeconfig(tmp_path / "closed", f"http://127.0.0.1:{closed_port()}")
    api, _, _ = load_client(str(kc), None)
    with pytest.raises(DoctorError, match="connection refused"):
        LiveCluster(api, "test", "dsv4", Progress(enabled=False)).version()


def test_no_traceback_from_a_real_process(tmp_path):
    """One line on stderr and exit 2, in a fresh process (no test harness around it)."""
    kc = kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{closed_port()}")
    out = subprocess.run(
        [sys.executable, "-m", "serving.cli", "doctor", "status", "dsv4", "--kubeconfig", str(kc)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "cannot reach the API server" in out.stderr


def test_without_the_kubernetes_client_one_line_says_what_to_install(tmp_path):
    script = (
        "import sys, argparse\n"
        "sys.modules['kubernetes'] = None  # as if `pip install dsv4-serve` without [doctor]\n"
        "from serving.doctor.command import add_arguments, run\n"
        "parser = argparse.ArgumentParser(); add_arguments(parser)\n"
        "sys.exit(run(parser.parse_args(['status', 'dsv4'])))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 2
    assert out.stderr == (
        "dsv4-serve doctor: error: the doctor needs the kubernetes client: "
        "pip install 'dsv4-serve[doctor]' (in a checkout: pip install -e '.[doctor]')\n"
    )
