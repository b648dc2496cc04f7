"""The two ways the doctor stops short of a finding."""

from __future__ import annotations


class DoctorError(Exception):
    """Bad input or an unusable cluster connection: one line, exit code 2, no report."""


class Unavailable(Exception):
    """A check cannot read what it needs (forbidden, or not in the dump).

    The check becomes a warning that says what is missing and how to provide it, and the
    other checks still run.
    """

    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix
