"""Helpers, child-process runners and data shared by the tests (no tests here)."""
