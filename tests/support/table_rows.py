"""Rows of a rendered markdown table, found by how they start."""


def row_starting(text: str, start: str) -> str:
    """The one row of ``text`` that starts with ``start`` (fails on none or several)."""
    (row,) = [line for line in text.splitlines() if line.startswith(start)]
    return row
