"""vLLM general-plugin entry point: runs in every vLLM process."""

import contextlib
import os

_applied = False


def register() -> None:
    """Apply the patches the installed vLLM needs (idempotent per process)."""
    global _applied
    if _applied:
        return
    _applied = True
    from model_overrides.kernels import kernel_library

    # Before any patch module can import vLLM's kernels. A bad value is reported by
    # the cpu-kernel-library patch as unrecognised.
    with contextlib.suppress(kernel_library.ForceError):
        kernel_library.force_if_requested()
    from model_overrides.patches import REGISTRY_READY  # noqa: F401
    from model_overrides.registry import REGISTRY

    REGISTRY.apply_all()
    # Raised out of vLLM's general-plugin loader (vllm/plugins/__init__.py calls register()
    # outside its try), so the process does not start. A configured speculation guard is
    # required too: one that cannot install would leave static k running and its alert
    # silent.
    from model_overrides.guard.spec_guard_config import from_environment
    from model_overrides.registry import GUARD_PATCH, REQUIRE_ENV

    required = os.environ.get(REQUIRE_ENV, "")
    try:
        guarded = from_environment().mode in ("adaptive", "script")
    except ValueError:  # unreadable settings: the guard patch's own status says why
        guarded = True
    if guarded:
        required += f",{GUARD_PATCH}"
    REGISTRY.check_required(required)

    from model_overrides.contracts.load_audit import install_if_requested

    install_if_requested()
