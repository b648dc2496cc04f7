"""Cold start: a node's JIT kernels compiled ahead of its engines, kept and carried.

plan.py (the warm engine and the shapes a cache keys on), sweep.py (traffic past vLLM's
own warm-up), archive.py (export and import), command.py (`dsv4-serve warm`). The
manifest and the compile pool live in the plugin (model_overrides/jit_pool), which every
engine process loads.
"""
