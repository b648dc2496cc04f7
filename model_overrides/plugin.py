"""vLLM general-plugin entry point: runs in every vLLM process."""

_applied = False


def register() -> None:
    """Apply the patches the installed vLLM needs (idempotent per process)."""
    global _applied
    if _applied:
        return
    _applied = True
    from model_overrides.patches import REGISTRY_READY  # noqa: F401
    from model_overrides.registry import REGISTRY

    REGISTRY.apply_all()

    from model_overrides.load_audit import install_if_requested

    install_if_requested()
