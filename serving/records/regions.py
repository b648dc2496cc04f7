"""Generated regions in hand-written pages: a table rendered from records sits between two
markers; the prose around it stays the author's."""

from __future__ import annotations

from collections.abc import Iterable

BEGIN = "<!-- generated: {} (dsv4-serve generate; do not edit) -->"
END = "<!-- end generated: {} -->"


def table_cell(text: str) -> str:
    """Text as one markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table_row(cells: Iterable[str]) -> str:
    """One markdown table row of ``cells``, each made a cell by ``table_cell``."""
    return "| " + " | ".join(table_cell(c) for c in cells) + " |"


def with_region(text: str, name: str, body: str) -> str:
    """``text`` with the region ``name`` holding ``body``."""
    begin, end = BEGIN.format(name), END.format(name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one region {begin} ... {end}")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body.rstrip()}\n{end}{tail}"


def bench_machine(path: str, report: dict) -> str:
    """What a bench report ran on, from its ``client_machine``: the GPU's name, else the
    CPU model, and vLLM's version."""
    machine = report.get("client_machine")
    if not machine:
        raise ValueError(f"{path}: no client_machine")
    where = (machine.get("gpu") or {}).get("name") or machine["cpu_model"]
    return f"{where}, vLLM {machine['software']['vllm']}"
