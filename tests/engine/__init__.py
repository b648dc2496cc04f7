"""Tests that start vLLM engines on the golden model (slow)."""
