"""Pinned versions as requirement files write them."""

import re

from tests.support.paths import ROOT


def pins(text: str) -> dict[str, str]:
    """``name==version`` requirement lines (extras and hashes dropped), names normalised."""
    out = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^ \\;]+)", line.strip())
        if match:
            out[match.group(1).lower().replace("_", "-")] = match.group(3)
    return out


def lock_pins() -> dict[str, str]:
    """The CPU lock's versions: the source for every Python package pinned elsewhere."""
    return pins((ROOT / "requirements-cpu.lock").read_text())
