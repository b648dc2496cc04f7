"""The overrides' status as the process that runs the model sees it.

Our plugin applies its patches in every vLLM process, but only the workers run DSV4: on a
GPU cluster the replica that serves the API may sit on another host, or load no GPU
kernels at all. So the status is read where the model runs, through vLLM's public worker
extension (engine argument ``worker_extension_cls``) and ``collective_rpc``, which Ray
Serve LLM's ``LLMServer.collective_rpc`` forwards to every worker of its engine.
"""

import os
import socket
from typing import Any

WORKER_EXTENSION = "model_overrides.engine_status.OverrideStatusExtension"
STATUS_METHOD = "dsv4_override_status"


def report() -> dict[str, Any]:
    """This process's patch outcomes and CPU kernel library (None off the CPU backend)."""
    from model_overrides.kernels import kernel_library
    from model_overrides.status import collect

    library = kernel_library.loaded()
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "kernel_library": library,
        "hardware_isa": kernel_library.hardware_isa() if library else None,
        "patches": [
            {"name": s.name, "override": s.override, "status": s.outcome.value, "detail": s.detail}
            for s in collect()
        ],
    }


class OverrideStatusExtension:
    """Mixed into vLLM's worker class by vLLM itself (``worker_extension_cls``)."""

    def dsv4_override_status(self) -> dict[str, Any]:
        return report()
