"""Numerics on vLLM's CUDA path, each against a yardstick measured in the same GPU run.

- numeric variant (attention, compressor, indexer, MoE and mHC reach the logits): the GPU's
  per-position log-probabilities against the CPU backend's (tests/gpu/data/numeric-cpu.json,
  the same checkpoint, recorded with tests/gpu/cpu_reference.py), within the noise of the
  GPU itself on the checkpoint with 5% of its weights moved by one bf16 ulp. Both backends
  use an fp8 KV cache (fp8_ds_mla), so fp8 rounding is inside the yardstick too.
- clamp variant: the MoE backend vLLM picks on Hopper against a plain-torch statement of
  DSV4's MoE with SwiGLU's clamp (tests/support/dsv4_reference.py), as the CPU test does.
"""

from __future__ import annotations

import json

import pytest

from tests.gpu.cpu_reference import REFERENCE, checkpoint_digest
from tests.model_overrides.kernels.test_kernel_paths import logprob_gap, within
from tests.model_overrides.patches.test_swiglu_clamp import (
    MAX_TOKENS,
    distributions,
    divergence,
    mean_kl,
    reference_run,
)
from tests.support.dsv4_reference import Options

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cpu() -> dict:
    return json.loads(REFERENCE.read_text())


def test_numeric_gpu_log_probs_match_the_cpu_within_gpu_noise(pool, models, cpu, out_dir):
    assert checkpoint_digest(models["numeric"]) == cpu["checkpoint_sha256"], "stale reference"
    gpu, jitter = pool.result("numeric"), pool.result("numeric-jitter")
    noise = logprob_gap(gpu, jitter)
    gap = logprob_gap(cpu["runs"]["cpu"], gpu)
    cpu_noise = logprob_gap(cpu["runs"]["cpu"], cpu["runs"]["cpu-jitter"])
    record = {
        "gpu_vs_cpu": gap,
        "gpu_noise": noise,
        "cpu_noise": cpu_noise,
        "engine": gpu["engine"],
    }
    (out_dir / "numerics.json").write_text(json.dumps(record, indent=1))
    print(f"GPU vs CPU: {gap}\nGPU bf16 noise: {noise}\nCPU bf16 noise: {cpu_noise}")
    assert within(gap, noise), record
    assert gap["decode_agree"] >= min(4, noise["decode_agree"]), record


def test_clamp_variant_on_the_hopper_moe_agrees_with_dsv4(pool, models, out_dir):
    on, jitter = pool.result("clamp"), pool.result("clamp-jitter")
    noise = logprob_gap(on, jitter) | {"mean_kl": mean_kl(distributions(on), jitter)}
    gap = divergence(reference_run(models["clamp"], Options()), on)
    unclamped = divergence(reference_run(models["clamp"], Options(routed_clamp=False)), on)
    record = {"gpu_vs_reference": gap, "gpu_noise": noise, "vs_unclamped": unclamped}
    record["engine"] = on["engine"]
    (out_dir / "clamp.json").write_text(json.dumps(record, indent=1))
    print(f"clamp: GPU ({on['engine'].get('moe')}) vs reference {gap}; noise {noise}")
    assert within(gap, noise) and gap["mean_kl"] <= noise["mean_kl"], record
    assert gap["decode_agree"] == MAX_TOKENS, record
    # The yardstick can tell: the reference without the routed clamp is far outside it.
    assert not within(unclamped, noise), record
