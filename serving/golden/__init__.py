"""Golden tiny DeepSeek-V4: a synthetic checkpoint with the real DSV4 architecture.

Its weights are designed so that greedy output and MTP acceptance are known by
construction (see ``design.py``). It is a test fixture and the local default, not a
language model.
"""

from serving.golden.design import GoldenDesign
from serving.golden.writer import write_golden_model

__all__ = ["GoldenDesign", "write_golden_model"]
