"""The test suite: one directory per area, helpers in tests/support."""
