"""Findings (✔ / ⚠ / ✘ with the fix) and the loop that runs checks into them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from serving.doctor.errors import Unavailable
from serving.doctor.progress import Progress


class Status(Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass
class Finding:
    status: Status
    title: str
    details: list[str] = field(default_factory=list)
    fix: str | None = None
    section: str = ""
    check: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "section": self.section,
            "status": self.status.value,
            "title": self.title,
            "details": self.details,
            "fix": self.fix,
        }


def ok(title: str, *details: str) -> Finding:
    return Finding(Status.PASS, title, list(details))


def warn(title: str, fix: str | None = None, details: Iterable[str] = ()) -> Finding:
    return Finding(Status.WARN, title, list(details), fix)


def fail(title: str, fix: str | None = None, details: Iterable[str] = ()) -> Finding:
    return Finding(Status.FAIL, title, list(details), fix)


Result = Finding | Iterable[Finding] | None


@dataclass(frozen=True)
class Check:
    id: str
    section: str
    fn: Callable[[Any], Result]


def run_checks(checks: list[Check], ctx: Any, progress: Progress) -> list[Finding]:
    findings: list[Finding] = []
    for check in checks:
        progress.step(f"checking {check.section.lower()}: {check.id}…")
        try:
            result = check.fn(ctx)
            produced = [result] if isinstance(result, Finding) else list(result or [])
        except Unavailable as exc:
            produced = [warn(f"not checked: {exc.reason}", exc.fix)]
        for finding in produced:
            finding.section = finding.section or check.section
            finding.check = finding.check or check.id
            findings.append(finding)
    progress.done()
    return findings


def exit_code(findings: list[Finding]) -> int:
    """0: can work (warnings allowed); 1: at least one failure. (2 is bad input.)"""
    return 1 if any(f.status is Status.FAIL for f in findings) else 0
