"""Progress on stderr while reading a big cluster (stdout stays the report)."""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """On a terminal, one line rewritten in place; otherwise a line only for reads that
    span several pages (a big cluster), so logs and CI output stay short."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self._shown = False

    def step(self, text: str) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}")
            self.stream.flush()
            self._shown = True

    def page(self, what: str, count: int, pages: int) -> None:
        """Called after each page of a paginated list."""
        if not self.enabled:
            return
        if self.tty:
            self.step(f"reading {what}: {count}…")
        elif pages > 1:
            self.stream.write(f"doctor: reading {what}: {count} so far\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """A line worth keeping even without a terminal (slow steps)."""
        if not self.enabled:
            return
        if self.tty:
            self.step(text)
        else:
            self.stream.write(f"doctor: {text}\n")
            self.stream.flush()

    def done(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False
