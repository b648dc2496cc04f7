"""Tests that need no engine: pure Python, kernel ops, registry, presets, gateway units."""
