"""The repository's root, for tests that read or run the project's files."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
