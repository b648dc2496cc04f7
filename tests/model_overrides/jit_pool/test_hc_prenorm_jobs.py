"""The mHC pre-norm GEMM's jobs: every split count vLLM can choose, once per mix shape.

vLLM's split choice lives in modules that import TileLang (absent on the CPU), so the two
functions are read from the installed vLLM's source and run as they are, on a GPU of 132
SMs (H100 and H200)."""

import ast
import functools
import pickle
import types
from pathlib import Path

import torch
import vllm
from torch import nn

from model_overrides.jit_pool.jobs import HC_BLOCK, HcPrenormCase, JobSet, hc_prenorm_jobs

MHC = Path(vllm.__file__).parent / "model_executor" / "kernels" / "mhc"
SMS = 132


def _vllm_function(path: Path, name: str, namespace: dict) -> types.FunctionType:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102
    return namespace[name]


def _vllm_splits():
    gpu = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            get_device_properties=lambda _: types.SimpleNamespace(multi_processor_count=SMS)
        )
    )
    namespace = {"torch": gpu, "cdiv": lambda a, b: -(-a // b), "cache": functools.cache}
    num_split = _vllm_function(MHC / "tilelang_kernels.py", "compute_num_split", namespace)
    pre = _vllm_function(MHC / "warmup.py", "compute_mhc_pre_num_splits", namespace)

    def split_for(k: int, tokens: int) -> set[int]:
        return {num_split(HC_BLOCK, k, -(-tokens // HC_BLOCK)), pre(k, tokens)}

    return split_for, num_split


class _Layer(nn.Module):
    """The mix weights of a DeepSeek-V4 decoder layer (hidden 4096, hc_mult 4)."""

    def __init__(self, hidden: int = 4096, hc: int = 4, first: bool = False) -> None:
        super().__init__()
        mix = hc * (hc + 2)
        self.hc_attn_fn = nn.Parameter(torch.zeros(mix, hc * hidden), requires_grad=False)
        self.hc_ffn_fn = nn.Parameter(torch.zeros(mix, hc * hidden), requires_grad=False)
        self.hc_attn_fn_broadcast = torch.zeros(mix, hidden) if first else None
        self.hc_head_fn = nn.Parameter(torch.zeros(hc, hc * hidden))  # not DeepGEMM's


def _model() -> nn.Module:
    return nn.Sequential(_Layer(first=True), _Layer(), _Layer())


def test_every_split_count_a_batch_can_take_is_one_job_per_mix_shape():
    split_for, num_split = _vllm_splits()
    jobs = JobSet()
    hc_prenorm_jobs(_model(), 8192, jobs, split_for=split_for)
    cases = [pickle.loads(job.payload) for job in jobs.jobs]
    assert {job.kind for job in jobs.jobs} == {"hc_prenorm_gemm"}
    by_shape: dict[tuple[int, int], list[HcPrenormCase]] = {}
    for case in cases:
        by_shape.setdefault((case.n, case.k), []).append(case)
    assert sorted(by_shape) == [(24, 4096), (24, 16384)]  # the head's 4-wide mix is not
    for (_, k), found in by_shape.items():
        every = {num_split(HC_BLOCK, k, -(-t // HC_BLOCK)) for t in range(1, 8193)}
        assert sorted(c.num_splits for c in found) == sorted(every)
        for case in found:  # the token count given is one that takes the split
            assert case.num_splits in split_for(k, case.tokens)
    # 21 + 15: the sm90_tf32_hc_prenorm_gemm kernels the H100 warm and its two sweeps
    # compiled one by one for the same shapes (docs/cold-start.md).
    assert len(cases) == 36
    assert len({job.fingerprint() for job in jobs.jobs}) == 36


def test_a_smaller_token_budget_reaches_fewer_split_counts():
    split_for, _ = _vllm_splits()
    small, large = JobSet(), JobSet()
    hc_prenorm_jobs(_model(), 512, small, split_for=split_for)  # CUDA-graph sizes only
    hc_prenorm_jobs(_model(), 16384, large, split_for=split_for)
    assert len(small.jobs) < 36 <= len(large.jobs)
    assert max(pickle.loads(j.payload).tokens for j in small.jobs) <= 512
