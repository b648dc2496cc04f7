"""deepseek_v4: which vLLM CPU kernel library this process loads (and forcing a lower one).

Runs first, so the status line of every vLLM process names its library:
``_C`` (AVX-512 BF16), ``_C_AVX512`` or ``_C_AVX2``. With ``DSV4_CPU_KERNEL_LIBRARY``
set to a lower ISA than the hardware's, the plugin has already made torch report
that ISA (``kernel_library.force_if_requested``); verify checks vLLM loaded it.
"""

from model_overrides.kernels import kernel_library
from model_overrides.patches.module_attr import is_cpu_platform
from model_overrides.registry import REGISTRY, Need, Patch, Probe


def load_kernels() -> str | None:
    """Load vLLM's kernels the way vLLM does; returns the library now mapped.

    Through ``vllm._custom_ops``: its import loads the library and registers fakes for
    the ops that library has, so ops we define afterwards never meet a second fake.
    """
    import vllm._custom_ops  # noqa: F401

    return kernel_library.loaded()


def _describe(loaded: str | None) -> str:
    return f"loaded {loaded or 'no kernel library'} (hardware: {kernel_library.hardware_isa()})"


def probe() -> Probe:
    if not is_cpu_platform():
        return Probe(Need.NOT_APPLICABLE, "not the CPU platform")
    isa = kernel_library.requested_isa()
    if isa is None:
        return Probe(Need.NOT_NEEDED, _describe(load_kernels()))
    try:
        kernel_library.check_request(isa)
    except kernel_library.ForceError as exc:
        return Probe(Need.UNRECOGNISED, str(exc))
    lib = kernel_library.LIBRARIES[isa]
    why = f"{kernel_library.FORCE_ENV}={isa}; hardware: {kernel_library.hardware_isa()}"
    return Probe(Need.NEEDED, f"loads {lib} ({why})")


def apply() -> None:
    kernel_library.force(kernel_library.requested_isa())
    load_kernels()


def verify() -> str | None:
    loaded, expected = kernel_library.loaded(), kernel_library.expected_library()
    if loaded != expected:
        return f"vLLM loaded {loaded} before the plugin could force {expected}"
    return None


REGISTRY.add(
    Patch(
        name="cpu-kernel-library",
        override="deepseek_v4",
        summary=f"report (or force, {kernel_library.FORCE_ENV}) the CPU kernel library",
        probe=probe,
        apply=apply,
        verify=verify,
        gpu_note="CPU only",
        upstream="ours: vLLM picks the library by ISA (vllm/platforms/cpu.py import_kernels)",
        remove_when="never: it reports; forcing is a test and benchmark aid",
    )
)
