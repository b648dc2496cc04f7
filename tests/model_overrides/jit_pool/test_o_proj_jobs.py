"""DeepSeek-V4's grouped o_proj einsum as compile jobs: every token count a batch can
take, once per layout, read from the layer the way vLLM's own ``_o_proj`` reads it.

The layer and the kernel run only on CUDA, so the layer here is a module holding the
attributes vLLM's attention sets, and vLLM's ``_o_proj`` (``nvidia/flashmla.py``) is read
from the installed source and its keyword expressions evaluated on that module."""

import ast
import inspect
import pickle
import textwrap
from pathlib import Path

import pytest
import torch
import vllm
from torch import nn

from model_overrides.jit_pool import jobs as jit_jobs
from model_overrides.jit_pool.jobs import O_PROJ_M_PER_JOB, JobSet, TensorLayout
from model_overrides.jit_pool.pool import KIND_ORDER

FLASHMLA = Path(vllm.__file__).parent / "models" / "deepseek_v4" / "nvidia" / "flashmla.py"
O_PROJ = Path(vllm.__file__).parent / "models" / "deepseek_v4" / "nvidia" / "ops" / "o_proj.py"


class _WoA(nn.Module):
    def __init__(self, dtype: torch.dtype, scale_name: str = "weight_scale_inv") -> None:
        super().__init__()
        # V4-Flash: 8 groups of o_lora_rank 1024 over a group's 8 heads of 512, as an engine
        # holds them once loaded (fp8_utils.deepgemm_post_process_fp8_weight_block makes the
        # checkpoint's 2-D weight and scale (groups, rank, K) and (groups, rank/128, K/128)).
        self.weight = nn.Parameter(
            torch.empty(8, 1024, 4096, dtype=dtype, device="meta"), requires_grad=False
        )
        setattr(self, scale_name, torch.empty(8, 8, 32, device="meta"))


class _Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cos_sin_cache = torch.empty(65536, 64, dtype=torch.float32, device="meta")


class _Attention(nn.Module):
    """What vLLM's DeepSeek-V4 attention holds (``deepseek_v4/attention.py``) plus the
    einsum recipe its CUDA subclasses add."""

    def __init__(self, dtype: torch.dtype = torch.float8_e4m3fn, recipe: bool = True) -> None:
        super().__init__()
        self.n_local_heads, self.n_local_groups = 64, 8
        self.nope_head_dim, self.rope_head_dim, self.o_lora_rank = 448, 64, 1024
        self.wo_a = _WoA(dtype)
        self.rotary_emb = _Rotary()
        if recipe:
            self._einsum_recipe, self._tma_aligned_scales = (1, 128, 128), False


def _vllm_o_proj_call() -> ast.Call:
    tree = ast.parse(FLASHMLA.read_text())
    method = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_o_proj"
    )
    return next(
        n
        for n in ast.walk(method)
        if isinstance(n, ast.Call) and any(k.arg == "einsum_recipe" for k in n.keywords)
    )


def _evaluate(node: ast.expr, layer: nn.Module):
    return eval(compile(ast.Expression(node), str(FLASHMLA), "eval"), {"self": layer})  # noqa: S307


def test_the_case_passes_what_vllms_layer_passes():
    layer = _Attention()
    case = jit_jobs.o_proj_case(layer)
    call = _vllm_o_proj_call()
    assert case is not None
    assert case.call_kwargs() == {k.arg: _evaluate(k.value, layer) for k in call.keywords}
    assert case.cos_sin_cache == TensorLayout.of(_evaluate(call.args[2], layer))
    assert case.weight == TensorLayout((8, 1024, 4096), (4096 * 1024, 4096, 1), "float8_e4m3fn")
    assert case.scale_name == "weight_scale_inv"


def test_the_job_calls_vllms_function_with_every_argument_it_takes():
    tree = ast.parse(O_PROJ.read_text())
    fn = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "deep_gemm_fp8_o_proj"
    )
    positional = [a.arg for a in fn.args.args]
    keyword_only = [a.arg for a in fn.args.kwonlyargs]
    assert positional == ["o", "positions", "cos_sin_cache", "wo_a", "wo_b"]
    case = jit_jobs.o_proj_case(_Attention())
    assert sorted(case.call_kwargs()) == sorted(keyword_only)
    # The job's own call hands five positionals and the case's keywords.
    run = ast.parse(textwrap.dedent(inspect.getsource(jit_jobs._run_o_proj)))
    call = next(
        n
        for n in ast.walk(run)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "deep_gemm_fp8_o_proj"
    )
    assert len(call.args) == len(positional)
    assert [ast.unparse(k.value) for k in call.keywords] == ["case.call_kwargs()"]


def test_layers_without_deep_gemms_einsum_are_left_alone():
    assert jit_jobs.o_proj_case(_Attention(dtype=torch.bfloat16)) is None  # torch.bmm
    assert jit_jobs.o_proj_case(_Attention(recipe=False)) is None  # ROCm, CPU, XPU layers
    assert jit_jobs.o_proj_case(nn.Linear(4, 4)) is None


def test_the_scale_is_found_under_the_name_vllm_looks_for_first():
    layer = _Attention()
    layer.wo_a.weight_scale = torch.empty(8, 8, 32, device="meta")
    assert jit_jobs.o_proj_case(layer).scale_name == "weight_scale"


def test_every_token_count_is_run_once_per_layout():
    # Twelve layers of one layout, the MTP drafter's the same, and one of another (half
    # the groups, as tensor parallelism of 2 leaves them on a rank).
    other = _Attention()
    other.n_local_heads, other.n_local_groups = 32, 4
    model = nn.Sequential(*[_Attention() for _ in range(13)], other)
    cases = jit_jobs.o_proj_cases(model, 8192)
    by_layout: dict = {}
    for case in cases:
        assert 1 <= len(case.m_values) <= O_PROJ_M_PER_JOB
        by_layout.setdefault(case.layout(), []).extend(case.m_values)
    assert len(by_layout) == 2
    for counts in by_layout.values():
        assert sorted(counts) == list(range(1, 8193))
    assert len(cases) == 2 * 8192 // O_PROJ_M_PER_JOB
    # A budget that is no multiple of the run still ends at the budget.
    assert max(c.m_values[-1] for c in jit_jobs.o_proj_cases(model, 1000)) == 1000


def test_the_jobs_travel_to_a_worker_and_run_after_the_gemms(monkeypatch):
    import vllm.utils.deep_gemm as vllm_deep_gemm

    monkeypatch.setattr(vllm_deep_gemm, "is_deep_gemm_supported", lambda: True)
    out = JobSet()
    jit_jobs.o_proj_jobs(nn.Sequential(_Attention(), _Attention()), 2048, out)
    assert [job.kind for job in out.jobs] == ["o_proj_einsum"] * 4
    assert len({job.fingerprint() for job in out.jobs}) == 4
    first = pickle.loads(out.jobs[0].payload)
    assert first.m_values == tuple(range(1, O_PROJ_M_PER_JOB + 1))
    assert KIND_ORDER["fp8_gemm_nt"] < KIND_ORDER["o_proj_einsum"] < KIND_ORDER["hc_prenorm_gemm"]


def test_without_deep_gemm_there_are_no_jobs():
    out = JobSet()
    jit_jobs.o_proj_jobs(nn.Sequential(_Attention()), 2048, out)  # this CPU has none
    assert out.jobs == []


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float32", "int32"])
def test_a_layout_makes_zeros_of_its_shape_and_strides(dtype):
    layout = TensorLayout((4, 6), (1, 4), dtype)  # column-major, as a transposed scale
    out = layout.zeros("cpu")
    assert TensorLayout.of(out) == layout
    assert not out.to(torch.float32).any()
