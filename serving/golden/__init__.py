"""Golden tiny DeepSeek-V4: a synthetic checkpoint with the real DSV4 architecture.

Its weights are designed so that greedy output and MTP acceptance are known by
construction (see ``design.py``). It is a test fixture and the local default, not a
language model.
"""

from typing import Any

from serving.golden.design import GoldenDesign

__all__ = ["GoldenDesign", "write_golden_model"]


def __getattr__(name: str) -> Any:
    # The writer needs torch; the design (and so `dsv4-serve`'s parser) does not.
    if name == "write_golden_model":
        from serving.golden.writer import write_golden_model

        return write_golden_model
    raise AttributeError(name)
