"""The CUDA HC-path switch (dsv4-cuda-hc-path) against vLLM's real CUDA DSV4 modules.

vLLM's ``nvidia`` DSV4 modules import on the CPU, so the probe's reading of their hook
points (the decoder's HC-state arguments, ``mhc_post_tilelang`` in the model and MTP
modules) is checked here against the installed vLLM; running the inline path needs the GPU
(tests/gpu/test_gpu_golden.py). The platform check is the one thing set by hand.
"""

import importlib

import pytest
import torch

from model_overrides.patches import dsv4_cuda_hc_path as hc
from model_overrides.registry import Need


@pytest.fixture
def cuda_inline(monkeypatch):
    monkeypatch.setenv("DSV4_HC_PATH", "inline")
    monkeypatch.setattr(hc, "_on_cuda", lambda: True)
    model, mtp = hc._modules()
    layer = model.DeepseekV4DecoderLayer
    saved = (layer.forward, model.mhc_post_tilelang, mtp.mhc_post_tilelang)
    yield model, mtp
    layer.forward, model.mhc_post_tilelang, mtp.mhc_post_tilelang = saved


def test_off_unless_asked_and_only_on_cuda(monkeypatch):
    monkeypatch.delenv("DSV4_HC_PATH", raising=False)
    assert hc.probe().need is Need.NOT_NEEDED
    monkeypatch.setenv("DSV4_HC_PATH", "inline")
    assert hc.probe().need is Need.NOT_APPLICABLE  # this CPU


def test_probe_finds_the_hooks_in_this_vllm(cuda_inline):
    assert hc.probe().need is Need.NEEDED, hc.probe().detail


def test_apply_makes_the_layer_inline_and_the_final_posts_no_ops(cuda_inline):
    model, mtp = cuda_inline
    seen = []
    kernel = model.mhc_post_tilelang
    model.mhc_post_tilelang = lambda x, residual, post_layer_mix, comb_res_mix: (
        seen.append("post") or x + residual
    )
    original = model.DeepseekV4DecoderLayer.forward
    model.DeepseekV4DecoderLayer.forward = lambda self, *a, **k: (a[0], a[0], "p", "r")
    try:
        hc.apply()
        assert hc.verify() is None
        x = torch.ones(2, 4, 8)
        out = model.DeepseekV4DecoderLayer.forward(None, x, None, None)
        assert out[1:] == (None, None, None) and seen == ["post"]  # applied once, no state
        assert torch.equal(out[0], 2 * x)
        for module in (model, mtp):  # the callers' last post: nothing left to apply
            assert module.mhc_post_tilelang(out[0], None, None, None) is out[0]
        assert hc.probe().need is Need.ALREADY_APPLIED
    finally:
        model.DeepseekV4DecoderLayer.forward = original
        model.mhc_post_tilelang = kernel


def test_a_moved_hook_reads_unrecognised(cuda_inline, monkeypatch):
    model, _ = cuda_inline
    monkeypatch.setattr(model, "mhc_post_tilelang", lambda x, residual: x)
    probe = hc.probe()
    assert probe.need is Need.UNRECOGNISED and "mhc_post_tilelang" in probe.detail


def test_the_modules_are_vllms_own():
    model, mtp = hc._modules()
    assert model is importlib.import_module(hc.MODEL) and mtp is importlib.import_module(hc.MTP)
