"""Which DSV4 overrides each bench target's engine ran with: bench.json's ``patches``.

Every patch the plugin registers gets a line, so a patch that did not run (or a target
that cannot say) shows as such rather than as a missing key: a local target's outcomes
come from its engine log (``stages.patch_statuses``), a remote one's from the
``dsv4_overrides_patch_info`` gauge on its metrics page when that page carries it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from serving.monitoring.metrics_page import Samples, scrape

NOT_REPORTED = "not reported"
PATCH_INFO = "dsv4_overrides_patch_info"


def registered_patches() -> list[str]:
    """Every patch the installed plugin registers, in its order."""
    import model_overrides.patches  # noqa: F401 - registers them
    from model_overrides.registry import REGISTRY

    return REGISTRY.names()


def complete(found: Mapping[str, str], names: Iterable[str], why: str = "") -> dict[str, str]:
    """``found`` with every registered patch it lacks as not reported (and ``why``)."""
    missing = f"{NOT_REPORTED} ({why})" if why else NOT_REPORTED
    out = {name: found.get(name, missing) for name in names}
    return out | {name: status for name, status in found.items() if name not in out}


def from_metrics(samples: Samples) -> dict[str, str]:
    """``patch -> status`` from the gateway's gauge (one engine's statuses when several
    workers report: the same plugin runs in each)."""
    out: dict[str, str] = {}
    for (name, labels), value in samples.items():
        if name == PATCH_INFO and value:
            found = dict(labels)
            out.setdefault(found.get("patch", "?"), found.get("status", "?"))
    return out


def remote(metrics_url: str | None, names: Iterable[str]) -> dict[str, str]:
    """A remote target's patches, as far as its metrics page says."""
    if not metrics_url:
        return complete({}, names, "no metrics URL for this target")
    try:
        found = from_metrics(scrape(metrics_url))
    except Exception as exc:  # noqa: BLE001 - the report says what went wrong
        return complete({}, names, f"{metrics_url}: {type(exc).__name__}")
    return complete(found, names, "" if found else f"no {PATCH_INFO} at {metrics_url}")
