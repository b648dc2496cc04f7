"""Eager-torch implementations of Triton kernels that DSV4 launches on vLLM's paths."""
