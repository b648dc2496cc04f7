"""The JIT warm Job and the GPU workers' wait for it, rendered by the real helm and validated
with kubernetes-validate and the vendored KubeRay CRD. The Job's arguments parse with the
real `dsv4-serve` parser and resolve to the shapes the release serves; both containers'
scripts run for real here, with the real `dsv4-serve warm --check` on a real manifest.

No engine starts: the Job's own warm needs a GPU (tests/gpu/cold_start.sh runs it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from model_overrides.jit_pool import manifest as cache_manifest
from serving.chart.presets_table import presets_table
from serving.cli import build_parser
from serving.config.build_args import BuildArgs, resolve
from serving.warm.plan import cache_shapes
from tests.serving.chart.test_helm_chart import crds, validate_all  # noqa: F401 - fixture
from tests.support.chart_render import (
    CHART,
    by_kind,
    notes,
    pod_templates,
    ray_cluster,
    render,
    serve_config,
    worker_group,
)
from tests.support.paths import ROOT

PRESETS = presets_table()
ONE_HOST = sorted(p for p, row in PRESETS.items() if row["nodesPerReplica"] == 1)
MULTI_HOST = sorted(p for p, row in PRESETS.items() if row["nodesPerReplica"] > 1)
WAIT = "wait-jit-warm"


def warm_jobs(objects: list[dict]) -> list[dict]:
    return [
        j
        for j in by_kind(objects, "Job")
        if j["metadata"]["labels"]["app.kubernetes.io/component"] == "jit-warm"
    ]


def warm_job(objects: list[dict]) -> dict:
    (job,) = warm_jobs(objects)
    return job


def warm_container(objects: list[dict]) -> dict:
    (container,) = warm_job(objects)["spec"]["template"]["spec"]["containers"]
    return container


def warm_args(container: dict):
    """The Job's arguments as the real CLI parses them."""
    return build_parser().parse_args(["warm", *container["args"]])


def wait_containers(spec: dict) -> list[dict]:
    return [c for c in spec.get("initContainers", []) if c["name"] == WAIT]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _values(preset: str) -> dict:
    return {"preset": preset, "platform": PRESETS[preset]["platform"]}


# -- the Job ------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ONE_HOST)
def test_job_warms_on_one_replica_as_a_worker(preset: str, tmp_path: Path, crds):  # noqa: F811
    row = PRESETS[preset]
    objects = render(tmp_path, _values(preset))
    validate_all(objects, crds)
    job = warm_job(objects)
    gpu = row["gpuType"].lower()
    assert re.fullmatch(rf"rel-dsv4-serve-jit-warm-{gpu}-[0-9a-f]{{5}}", job["metadata"]["name"])
    assert len(job["metadata"]["name"]) <= 63
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels["app.kubernetes.io/component"] == "jit-warm"
        assert labels["app.kubernetes.io/instance"] == "rel"
    assert job["spec"]["backoffLimit"] == 1
    assert job["spec"]["activeDeadlineSeconds"] == 7200
    pod = job["spec"]["template"]["spec"]
    worker = worker_group(objects)["template"]["spec"]
    engine = worker["containers"][0]
    container = warm_container(objects)

    # The serving image, on one replica's GPUs, sized and placed as a worker.
    assert container["image"] == engine["image"]
    resource = "amd.com/gpu" if row["platform"] == "rocm" else "nvidia.com/gpu"
    assert container["resources"]["limits"][resource] == row["gpusPerReplica"]
    assert container["resources"] == engine["resources"]
    for key in ("nodeSelector", "tolerations", "affinity", "securityContext", "hostIPC"):
        assert pod.get(key) == worker.get(key), key
    assert pod["restartPolicy"] == "Never"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }

    # The shared claim the workers mount, /dev/shm as theirs, and no weights.
    volumes = {v["name"]: v for v in pod["volumes"]}
    worker_volumes = {v["name"]: v for v in worker["volumes"]}
    assert set(volumes) == {"dshm", "jit-cache"}
    assert volumes == {name: worker_volumes[name] for name in volumes}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "jit-cache": "/var/cache/dsv4"}

    # `dsv4-serve warm PRESET --cache DIR --jobs N` as the real parser reads it.
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][2] == (CHART / "files/jit-warm.sh").read_text().rstrip("\n")
    args = warm_args(container)
    assert (args.command, args.preset, args.cache, args.jobs) == (
        "warm",
        preset,
        "/var/cache/dsv4",
        int(engine["resources"]["requests"]["cpu"]),
    )
    assert not (args.check or args.import_file or args.export or args.set)
    assert _env(container)["DSV4_JIT_CACHE"] == args.cache


def test_parser_is_real():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["warm", "h200-flash-mtp", "--cache-dir", "/x"])


def test_overrides_reach_the_warm_and_give_the_served_shapes(tmp_path: Path):
    values = {
        "serve": {
            "overrides": {"engine_args": {"max_num_seqs": 64, "max_model_len": 65536}},
            "set": ["speculation.num_speculative_tokens=2", "engine_args.max_num_seqs=48"],
        }
    }
    objects = render(tmp_path, values)
    args = warm_args(warm_container(objects))
    assert args.set == [
        'engine_args={"max_model_len":65536,"max_num_seqs":64}',
        "speculation.num_speculative_tokens=2",
        "engine_args.max_num_seqs=48",
    ]
    _, warmed = resolve(BuildArgs(preset=args.preset, set=args.set))
    _, served = resolve(serve_config(objects)["applications"][0]["args"])
    assert warmed.engine_kwargs()["max_num_seqs"] == 48
    # What the cache's manifest is keyed on is what the release's engines run.
    assert cache_shapes(warmed) == cache_shapes(served)


def test_jobs_and_resources_follow_the_warm_values(tmp_path: Path):
    values = {
        "workers": {"resources": {"cpu": "1500m"}},
        "jitCache": {"warm": {"backoffLimit": 0, "activeDeadlineSeconds": 600}},
    }
    objects = render(tmp_path, values)
    assert warm_args(warm_container(objects)).jobs == 1
    assert warm_job(objects)["spec"]["backoffLimit"] == 0
    assert warm_job(objects)["spec"]["activeDeadlineSeconds"] == 600
    own = {"jitCache": {"warm": {"resources": {"cpu": 32, "memory": "256Gi"}}}}
    container = warm_container(render(tmp_path, own))
    assert warm_args(container).jobs == 32
    assert container["resources"]["requests"]["cpu"] == "32"
    assert container["resources"]["limits"]["memory"] == "256Gi"


def test_name_is_per_gpu_type_and_changes_with_the_job_alone(tmp_path: Path):
    h200 = render(tmp_path, {})
    assert warm_job(render(tmp_path, {}))["metadata"]["name"] == warm_job(h200)["metadata"]["name"]
    b200 = warm_job(render(tmp_path, _values("b200-pro-mtp")))["metadata"]["name"]
    assert "-jit-warm-b200-" in b200
    # Another override is another Job (a Job's pod template cannot change in place); the
    # Ray cluster does not change with it, so KubeRay keeps its pods.
    changed = render(tmp_path, {"serve": {"set": ["engine_args.max_num_seqs=48"]}})
    assert warm_job(changed)["metadata"]["name"] != warm_job(h200)["metadata"]["name"]
    assert ray_cluster(changed) == ray_cluster(h200)


def test_notes_say_how_to_follow_it(tmp_path: Path):
    name = warm_job(render(tmp_path, {}))["metadata"]["name"]
    text = notes(tmp_path, {})
    assert f"kubectl -n dsv4 logs -f job/{name}" in text
    assert "dsv4-serve doctor status rel -n dsv4" in text
    assert "JIT warm" not in notes(tmp_path, {"jitCache": {"warm": {"enabled": False}}})


# -- when it runs -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "on"),
    [
        ({}, True),
        ({"jitCache": {"pvc": {"existingClaim": "kernels"}}}, True),
        ({"jitCache": {"type": "emptyDir"}}, False),
        ({"jitCache": {"type": "hostPath"}}, False),
        ({"jitCache": {"warm": {"enabled": False}}}, False),
        ({**_values(MULTI_HOST[0])}, False),
        ({"disaggregation": {"enabled": True}}, True),
    ],
    ids=["pvc", "existing-claim", "emptyDir", "hostPath", "off", "multi-host", "disaggregated"],
)
def test_on_by_default_for_a_shared_claim(values: dict, on: bool, tmp_path: Path, crds):  # noqa: F811
    objects = render(tmp_path, values)
    validate_all(objects, crds)
    assert len(warm_jobs(objects)) == int(on)
    templates = pod_templates(objects)
    gpu_roles = [r for r in templates if r in ("worker", "prefill", "decode")]
    assert gpu_roles
    for role in gpu_roles:
        assert len(wait_containers(templates[role]["spec"])) == int(on), role
    assert not wait_containers(templates["head"]["spec"])  # no GPU, no engine
    if on and "pvc" in values.get("jitCache", {}):
        claim = warm_job(objects)["spec"]["template"]["spec"]["volumes"][1]
        assert claim["persistentVolumeClaim"]["claimName"] == "kernels"


REFUSED = [
    (
        {"jitCache": {"type": "emptyDir", "warm": {"enabled": True}}},
        "jitCache.warm.enabled=true needs jitCache.type pvc, one claim every pod shares: with "
        "jitCache.type emptyDir the warm Job's pod would warm its own throwaway volume",
    ),
    (
        {"jitCache": {"type": "hostPath", "warm": {"enabled": True}}},
        "with jitCache.type hostPath the warm Job's pod would warm only the node it runs on",
    ),
    (
        {**_values(MULTI_HOST[0]), "jitCache": {"warm": {"enabled": True}}},
        f"jitCache.warm.enabled=true: a replica of preset {MULTI_HOST[0]} spans 2 hosts",
    ),
    ({"jitCache": {"warm": {"waitSeconds": -1}}}, "/jitCache/warm/waitSeconds"),
    ({"jitCache": {"warm": {"activeDeadlineSeconds": 5}}}, "/jitCache/warm/activeDeadlineSeconds"),
    ({"jitCache": {"warm": {"resources": {"cpu": "lots"}}}}, "/jitCache/warm/resources/cpu"),
    ({"jitCache": {"warm": {"enable": True}}}, "enable"),
]


@pytest.mark.parametrize(("values", "message"), REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_bad_values_are_refused_by_name(values: dict, message: str, tmp_path: Path):
    assert message in render(tmp_path, values, expect_ok=False)


# -- the workers' wait --------------------------------------------------------------------
def test_every_gpu_worker_waits_last_and_reads_the_cache_only(tmp_path: Path):
    values = {
        "jitCache": {"mountPath": "/jit/", "warm": {"waitSeconds": 600}},
        "model": {"download": {"enabled": True}},
    }
    objects = render(tmp_path, values)
    spec = worker_group(objects)["template"]["spec"]
    names = [c["name"] for c in spec["initContainers"]]
    assert names == ["wait-for-weights", WAIT]
    (wait,) = wait_containers(spec)
    assert wait["image"] == spec["containers"][0]["image"]
    env = _env(wait)
    assert env["DSV4_JIT_CACHE"] == "/jit" == warm_args(warm_container(objects)).cache
    assert env["WAIT_SECONDS"] == "600"
    assert env["WARM_JOBS"] == (
        "kubectl -n dsv4 get jobs -l app.kubernetes.io/instance=rel,"
        "app.kubernetes.io/component=jit-warm"
    )
    assert wait["volumeMounts"] == [{"name": "jit-cache", "mountPath": "/jit/", "readOnly": True}]
    assert "resources" not in wait  # the pod's requests stay the engine's


# -- the scripts, run ---------------------------------------------------------------------
@pytest.fixture
def python3_on_path(tmp_path: Path) -> str:
    """A PATH whose python3 is this interpreter, which has dsv4-serve as the image does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"  # not a symlink: the venv is found from the path run
    python3.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python3.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def _run(container: dict, env: dict[str, str], path: str, argv: list[str] | None = None):
    """The container's command as its shell runs it, with its env over ours."""
    command = [*container["command"], *(container.get("args") if argv is None else argv)]
    full = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **_env(container), **env}
    return subprocess.run(command, env=full, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _start(container: dict, env: dict[str, str], path: str) -> subprocess.Popen:
    """The container's command started, its output read as it comes."""
    command = [*container["command"], *container.get("args", [])]
    full = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **_env(container), **env}
    return subprocess.Popen(
        command, env=full, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _manifest(root: Path, vllm: str | None = None) -> cache_manifest.Manifest:
    """A manifest of this machine (or one that says another vLLM built the cache)."""
    versions = cache_manifest.node_versions()
    if vllm:
        versions = versions.model_copy(update={"vllm": vllm})
    return cache_manifest.build(root, "h200-flash-mtp", {"parallel": {"tensor": 8}}, None, versions)


def _fit(root: Path, found: cache_manifest.Manifest | None) -> str:
    here = (cache_manifest.node_versions(), cache_manifest.node_gpu())
    return cache_manifest.fit_line(found, *here, str(root.resolve()))


@pytest.fixture(scope="module")
def wait_container(tmp_path_factory) -> dict:
    (wait,) = wait_containers(
        worker_group(render(tmp_path_factory.mktemp("r"), {}))["template"]["spec"]
    )
    return wait


def test_wait_gives_up_after_wait_seconds_without_failing(
    wait_container: dict, python3_on_path: str, tmp_path: Path
):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"DSV4_JIT_CACHE": str(cache), "WAIT_SECONDS": "0"}
    out = _run(wait_container, env, python3_on_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-2].startswith("no JIT cache that fits after 0s (jitCache.warm.waitSeconds 0)")
    assert lines[-1] == _fit(cache, None)


def test_wait_ends_once_the_warm_writes_a_manifest_that_fits(
    wait_container: dict, python3_on_path: str, tmp_path: Path
):
    cache = tmp_path / "cache"
    cache.mkdir()
    old = _manifest(cache, vllm="0.0.1")  # an older image's warm
    old.dump(cache)
    fits = _manifest(cache)
    env = {"DSV4_JIT_CACHE": str(cache), "WAIT_SECONDS": "120", "POLL_SECONDS": "1"}
    began = time.monotonic()
    proc = _start(wait_container, env, python3_on_path)
    assert proc.stdout is not None
    # The new Job finishes once the wait has judged the old manifest and is waiting (a
    # timer instead lost the race on a busy machine, before the wait's first read).
    lines = [proc.stdout.readline().rstrip("\n"), proc.stdout.readline().rstrip("\n")]
    fits.dump(cache)
    rest, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert time.monotonic() - began < 100
    lines += rest.splitlines()
    assert lines[0] == _fit(cache, old)
    assert "does not fit this node" in lines[0]
    assert "waiting for the JIT warm Job to fill" in lines[1]
    # The unchanged old manifest was judged once, not at every poll.
    assert sum("does not fit this node" in line for line in lines) == 1
    assert lines[-1] == _fit(cache, fits)
    assert "fits this node" in lines[-1]


def test_wait_says_when_the_cache_does_not_fit(
    wait_container: dict, python3_on_path: str, tmp_path: Path
):
    cache = tmp_path / "cache"
    cache.mkdir()
    old = _manifest(cache, vllm="0.0.1")
    old.dump(cache)
    env = {"DSV4_JIT_CACHE": str(cache), "WAIT_SECONDS": "1", "POLL_SECONDS": "1"}
    out = _run(wait_container, env, python3_on_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == _fit(cache, old)
    assert "vllm 0.0.1 in the cache" in lines[-1]


def test_job_script_ends_its_log_and_its_message_with_the_fit_line(
    python3_on_path: str, tmp_path: Path
):
    container = warm_container(render(tmp_path, {}))
    cache = tmp_path / "cache"
    cache.mkdir()
    message = tmp_path / "termination-log"
    env = {"DSV4_JIT_CACHE": str(cache), "TERMINATION_LOG": str(message)}
    # A warm that fails (a CPU preset has nothing to warm): its status, no message file
    # (kubelet then takes the log's tail), and the fit line last.
    out = _run(container, env, python3_on_path, ["cpu-tiny", "--cache", str(cache), "--jobs", "1"])
    assert out.returncode == 2
    assert "nothing to warm" in out.stderr
    assert out.stdout.splitlines()[-1] == _fit(cache, None)
    assert not message.exists()
    # A warm step that succeeds (here the check itself, on a cache that fits): the fit
    # line is the message and the log's last line.
    found = _manifest(cache)
    found.dump(cache)
    out = _run(container, env, python3_on_path, ["--check", "--cache", str(cache)])
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == _fit(cache, found)
    assert message.read_text() == _fit(cache, found) + "\n"


def test_scripts_are_posix_sh():
    for name in ("jit-warm.sh", "wait-jit-warm.sh"):
        out = subprocess.run(
            ["/bin/sh", "-n", str(CHART / "files" / name)], capture_output=True, text=True
        )
        assert out.returncode == 0, (name, out.stderr)
