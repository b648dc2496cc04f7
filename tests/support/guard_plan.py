"""What the guard runner (tests/support/guard_runner.py, a child process) runs: k, the
request length and each phase's prompts. Free of side effects, so a test module may
import it (the runners set vLLM's environment at import)."""

K = 2
MAX_TOKENS = 48


def prompts_of(design, family: str, batch: int) -> list[str]:
    """``batch`` prompts of a family; ``mixed``: high and zero in turn."""
    names = ["high", "zero"] if family == "mixed" else [family]
    return [design.family_prompt(names[i % len(names)], i // len(names)) for i in range(batch)]
