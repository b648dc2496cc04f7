"""Native `_C` ops against our eager versions, in a child process (the oracle).

    python -m tests.support.op_oracle CASES_MODULE [--emulate LIBBF16EMU]

The child loads vLLM's full `_C` library directly (only one `_C*` library may live in
a process, so never in pytest's own). On an AVX-512 CPU without avx512_bf16 the
shared `bf16emu` library is loaded first, before torch, so the native ops run there
too (slowly). CASES_MODULE defines ``CASES: dict[str, Callable[[], OpCase]]``.
Prints one line: ``RESULT {case: {output: {...diff...}}}``.
"""

import ctypes
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class OpCase:
    op: str  # name in torch.ops._C
    args: tuple  # tensors are cloned for each side
    impl: Callable[..., Any]  # our eager version
    # (args after the call, return value) -> the named outputs to compare
    outputs: Callable[[tuple, Any], dict[str, Any]]


def _clone(args: tuple) -> tuple:
    import torch

    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def diff(native: Any, ours: Any) -> dict[str, Any]:
    import torch

    if not isinstance(native, torch.Tensor):
        return {"exact": native == ours, "native": repr(native), "ours": repr(ours)}
    out: dict[str, Any] = {
        "shape": list(native.shape),
        "shape_equal": list(native.shape) == list(ours.shape),
        "dtype_equal": native.dtype == ours.dtype,
    }
    if not out["shape_equal"]:
        out["exact"] = False
        return out
    out["exact"] = bool(torch.equal(native, ours)) and out["dtype_equal"]
    if native.dtype.is_floating_point:
        n, o = native.float(), ours.float()
        out["nan_equal"] = bool(torch.equal(n.isnan(), o.isnan()))
        fin = ~(n.isnan() | o.isnan())
        d = (n - o).abs()[fin]
        out["max_abs"] = float(d.max()) if d.numel() else 0.0
        scale = n.abs()[fin]
        out["max_ref"] = float(scale.max()) if scale.numel() else 0.0
        out["mismatched"] = int((d > 0).sum())
    else:
        out["mismatched"] = int((native != ours).sum())
    return out


def run_case(case: OpCase) -> dict[str, Any]:
    import torch

    native_args, our_args = _clone(case.args), _clone(case.args)
    native_ret = getattr(torch.ops._C, case.op)(*native_args)
    our_ret = case.impl(*our_args)
    native = case.outputs(native_args, native_ret)
    ours = case.outputs(our_args, our_ret)
    return {name: diff(native[name], ours[name]) for name in native}


def main(argv: list[str]) -> None:
    if "--emulate" in argv:
        path = argv[argv.index("--emulate") + 1]
        ctypes.CDLL(path)  # before torch: every thread must see the emulated ISA
    import importlib
    import os

    import torch
    import vllm

    torch.ops.load_library(os.path.join(os.path.dirname(vllm.__file__), "_C.abi3.so"))
    cases = importlib.import_module(argv[0]).CASES
    results = {name: run_case(build()) for name, build in cases.items()}
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
