"""The report: ✔ / ⚠ / ✘ lines with the fix for each finding, or JSON for automation."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from typing import Any, TextIO

from serving.doctor.findings import Finding, Status, exit_code

WIDTH = 100
SYMBOLS = {Status.PASS: "✔", Status.WARN: "⚠", Status.FAIL: "✘"}
ASCII = {Status.PASS: "ok", Status.WARN: "warn", Status.FAIL: "FAIL"}
COLORS = {Status.PASS: "32", Status.WARN: "33", Status.FAIL: "31"}
VERDICTS = {
    "preflight": {
        Status.FAIL: "the install cannot work as configured: fix the failures (✘) above",
        Status.WARN: "the install can work; read the warnings (⚠)",
        Status.PASS: "the install can work",
    },
    "status": {
        Status.FAIL: "the release is broken: fix the failures (✘) above",
        Status.WARN: "the release is not fully up yet, or degraded: read the warnings (⚠)",
        Status.PASS: "the release is serving",
    },
}


@dataclass
class Header:
    command: str  # preflight | status
    subject: str  # "h200-flash-mtp: release dsv4 in namespace dsv4"
    source: str  # the cluster's description
    target: dict[str, Any]


def worst(findings: list[Finding]) -> Status:
    for status in (Status.FAIL, Status.WARN):
        if any(f.status is status for f in findings):
            return status
    return Status.PASS


def counts(findings: list[Finding]) -> dict[str, int]:
    return {s.value: sum(f.status is s for f in findings) for s in Status}


def as_json(header: Header, findings: list[Finding]) -> str:
    return json.dumps(
        {
            "command": header.command,
            "target": header.target,
            "source": header.source,
            "findings": [f.as_dict() for f in findings],
            "summary": counts(findings),
            "verdict": VERDICTS[header.command][worst(findings)],
            "exit_code": exit_code(findings),
        },
        indent=2,
    )


def _can_encode(stream: TextIO) -> bool:
    try:
        "✔⚠✘…".encode(stream.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _wrap(text: str, first: str, rest: str) -> list[str]:
    """Long sentences wrapped for a terminal; log lines ("| ...") and lines holding a
    command to copy (kubectl ...) kept whole."""
    keep = text.lstrip().startswith("|") or ("kubectl " in text and not text.startswith("fix:"))
    if keep or len(first) + len(text) <= WIDTH:
        return [first + text]
    return textwrap.wrap(
        text, WIDTH, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
    )


def as_text(header: Header, findings: list[Finding], stream: TextIO, color: bool) -> str:
    fancy = _can_encode(stream)

    def mark(status: Status) -> str:
        symbol = SYMBOLS[status] if fancy else ASCII[status]
        return f"\x1b[{COLORS[status]}m{symbol}\x1b[0m" if color else symbol

    lines = [f"dsv4-serve doctor {header.command} {header.subject}", f"source: {header.source}"]
    section = None
    for finding in findings:
        if finding.section != section:
            section = finding.section
            lines += ["", section]
        lines.append(f"  {mark(finding.status)} {finding.title}")
        for detail in finding.details:
            lines += _wrap(detail, "      ", "        ")
        if finding.fix and finding.status is not Status.PASS:
            lines += _wrap(f"fix: {finding.fix}", "    ", "         ")
    total = counts(findings)
    verdict = VERDICTS[header.command][worst(findings)]
    lines += [
        "",
        f"{total['fail']} failure(s), {total['warn']} warning(s), {total['pass']} passed: "
        f"{verdict} (exit {exit_code(findings)})",
    ]
    text = "\n".join(lines) + "\n"
    if fancy:
        return text
    # An ASCII terminal (LANG=C): no symbol may make the report itself fail to print.
    text = text.replace("…", "...").replace("✘", "FAIL").replace("⚠", "warn")
    encoding = stream.encoding or "ascii"
    return text.encode(encoding, "replace").decode(encoding)
