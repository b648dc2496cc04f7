"""Routed-expert SwiGLU clamp: vLLM's MoE against a plain-torch statement of DSV4.

On the "clamp" golden variant (live experts whose routed up/gate pre-activations pass
``swiglu_limit`` on about 1% of elements, live hyper-connections, silent attention,
identical routed experts), vLLM's per-position log-probabilities are compared with
``tests/support/dsv4_reference.py``:
- with the override on, vLLM agrees with the reference within bf16 noise;
- with it off (``DSV4_OVERRIDES_DISABLE``), it does not;
- with it off, it agrees with the reference whose routed experts are unclamped: the
  divergence is exactly the routed clamp.
The noise yardstick is vLLM itself on the checkpoint with 5% of its bf16 weights moved by one
ulp (tests/support/checkpoint_jitter.py), as in tests/model_overrides/kernels/test_kernel_paths.py.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from serving.golden import GoldenDesign, write_golden_model
from tests.model_overrides.kernels.test_kernel_paths import _run, logprob_gap, within
from tests.support.checkpoint_jitter import jittered_copy
from tests.support.dsv4_reference import ClampCounts, Forward, Options, Reference
from tests.support.golden_prompts import prompt_of

pytestmark = pytest.mark.engine
PATCH = "dsv4-cpu-moe-swiglu-clamp"
DESIGN = GoldenDesign(variant="clamp")
PROMPTS = [prompt_of(DESIGN, words, seed) for words, seed in ((200, 7), (100, 8))]
VOCAB = len(DESIGN.vocab)
MAX_TOKENS = 16


# ---------------------------------------------------------------- vLLM


def engine(model_dir: Path, disable: str | None = None) -> dict:
    """vLLM's log-probabilities, with the full distribution at every prompt position."""
    spec = {
        "model_dir": str(model_dir),
        "library": "native",
        "prompts": PROMPTS,
        "max_tokens": MAX_TOKENS,
        "prompt_logprobs": -1,
        "engine": {"max_logprobs": -1},
    }
    env = {"DSV4_OVERRIDES_DISABLE": disable} if disable else {}
    result = _run("tests.support.kernel_path_runner", [json.dumps(spec)], env)
    ids = [r["prompt_token_ids"] for r in result["results"]]
    assert ids == [DESIGN.token_ids(p) for p in PROMPTS]  # what the reference runs on
    return result


@pytest.fixture(scope="module")
def clamp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_golden_model(tmp_path_factory.mktemp("golden-clamp"), DESIGN)


@pytest.fixture(scope="module")
def on(clamp_dir: Path) -> dict:
    result = engine(clamp_dir)
    assert result["patches"][PATCH] == "applied", result["patches"]
    return result


@pytest.fixture(scope="module")
def off(clamp_dir: Path) -> dict:
    result = engine(clamp_dir, disable=PATCH)
    assert result["patches"].get(PATCH) != "applied", result["patches"]
    return result


@pytest.fixture(scope="module")
def noise(clamp_dir: Path, on: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What bf16 itself leaves open: vLLM on the checkpoint with 5% of its bf16 weights moved
    by one ulp, against vLLM on the checkpoint (both with the override on)."""
    jittered = engine(jittered_copy(clamp_dir, tmp_path_factory.mktemp("golden-clamp-jitter")))
    return logprob_gap(on, jittered) | {"mean_kl": mean_kl(distributions(on), jittered)}


# ---------------------------------------------------------------- the reference


@dataclass
class ReferenceRun:
    result: dict  # in the runner's format: logprob_gap compares it with a vLLM run
    forwards: list[Forward]
    clamp: ClampCounts


def reference_run(model_dir: Path, options: Options) -> ReferenceRun:
    ref = Reference(model_dir, options)
    results, forwards, clamp = [], [], ClampCounts()
    for prompt in PROMPTS:
        ids = DESIGN.token_ids(prompt)
        fwd = ref.forward(ids)
        tokens, logprobs = greedy(ref, ids[-1], MAX_TOKENS)
        results.append(
            {"prompt_logprobs": fwd.token_logprobs(ids), "token_ids": tokens, "logprobs": logprobs}
        )
        forwards.append(fwd)
        clamp = clamp + fwd.clamp
    return ReferenceRun({"results": results}, forwards, clamp)


def greedy(ref: Reference, last: int, steps: int) -> tuple[list[int], list[float]]:
    """Silent attention makes each position a function of its own token alone, so a decode
    step is the reference on the last token."""
    tokens, logprobs = [], []
    for _ in range(steps):
        row = ref.forward([last]).logprobs[0]
        last = int(row.argmax())
        tokens.append(last)
        logprobs.append(float(row[last]))
    return tokens, logprobs


def distributions(run: dict) -> list[torch.Tensor]:
    """vLLM's prompt distributions as [positions, V] log-probabilities (-inf where absent)."""
    out = []
    for res in run["results"]:
        dists = res["prompt_distributions"]
        table = torch.full((len(dists), VOCAB), -math.inf)
        for row, dist in zip(table, dists, strict=True):
            row[[int(t) for t in dist]] = torch.tensor(list(dist.values()))
        out.append(table)
    return out


def mean_kl(reference: list[torch.Tensor], run: dict) -> float:
    """Mean over prompt positions of KL(reference || run), both full distributions."""
    kls = []
    for ref, theirs in zip(reference, distributions(run), strict=True):
        kls.append((ref.exp() * (ref - theirs)).nan_to_num(nan=0.0).sum(-1))
    return float(torch.cat(kls).mean())


def divergence(ref: ReferenceRun, run: dict) -> dict:
    """|Δ log p| (median, p90, max over teacher-forced and agreeing decode positions) and
    the mean KL over prompt positions."""
    ref_dists = [f.logprobs[:-1] for f in ref.forwards]
    return logprob_gap(ref.result, run) | {"mean_kl": mean_kl(ref_dists, run)}


@pytest.fixture(scope="module")
def clamped(clamp_dir: Path) -> ReferenceRun:
    return reference_run(clamp_dir, Options())


@pytest.fixture(scope="module")
def unclamped(clamp_dir: Path) -> ReferenceRun:
    """DSV4 with the routed experts' clamp removed (the shared expert's kept)."""
    return reference_run(clamp_dir, Options(routed_clamp=False))


# ---------------------------------------------------------------- tests


def test_the_routed_clamp_bites_in_the_reference(clamped: ReferenceRun, unclamped: ReferenceRun):
    c = clamped.clamp
    print(
        f"routed pre-activations beyond swiglu_limit: up {c.up_rate:.3%}, gate {c.gate_rate:.3%}"
        f" of {c.elements}; (token, layer) pairs with a clamped element {c.tokens_hit}"
    )
    assert 0.005 <= c.up_rate <= 0.05 and c.gate_rate >= 0.002, c
    moved = logprob_gap(clamped.result, unclamped.result)
    print(f"reference with vs without the routed clamp: {moved}")
    assert moved["median"] > 0.1, moved


def test_override_on_agrees_with_the_reference(clamped: ReferenceRun, on: dict, noise: dict):
    gap = divergence(clamped, on)
    print(f"override ON ({on['library']}) vs reference: {gap}; bf16 noise: {noise}")
    assert within(gap, noise) and gap["mean_kl"] <= noise["mean_kl"], (gap, noise)
    assert gap["decode_agree"] == MAX_TOKENS, gap


def test_override_off_diverges_from_the_reference(clamped: ReferenceRun, off: dict, noise: dict):
    gap = divergence(clamped, off)
    print(f"override OFF vs reference: {gap}; bf16 noise: {noise}")
    assert not within(gap, noise), (gap, noise)
    assert gap["median"] > 3 * noise["median"] and gap["mean_kl"] > 10 * noise["mean_kl"], gap


def test_override_off_is_the_reference_without_the_routed_clamp(
    unclamped: ReferenceRun, off: dict, noise: dict
):
    gap = divergence(unclamped, off)
    print(f"override OFF vs reference without the routed clamp: {gap}; bf16 noise: {noise}")
    assert within(gap, noise) and gap["mean_kl"] <= noise["mean_kl"], (gap, noise)
