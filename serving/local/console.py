"""What `dsv4-serve up` shows a person, and where everything else goes.

The console gets our own ``[dsv4-serve]`` lines: stages, warnings, errors and one
progress line per long step (rewritten in place on a terminal; on a pipe, such as
``kubectl logs``, a line when the step starts, when its state changes, every
``HEARTBEAT_S`` and when it ends). Everything else the process prints (Ray, Serve, vLLM,
the worker output Ray forwards to the driver, Ray Serve LLM's JSON records, C-level
writes) goes to our log file, through a pipe that replaces file descriptors 1 and 2.
``verbose`` copies that stream to the console too, as it was before this module.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

PREFIX = "[dsv4-serve]"
HEARTBEAT_S = 30  # a step's line on a pipe, at most this far apart
KEEP_LOGS = 10  # up-*.log files kept in the log folder
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def verbose_from_env() -> bool:
    return os.environ.get("DSV4_VERBOSE", "").lower() not in {"", "0", "false", "no"}


def default_log_dir() -> Path:
    """``DSV4_LOG_DIR``, else ``.cache/logs`` under the working directory (the checkout
    for `make serve`, the home folder in the images)."""
    return Path(os.environ.get("DSV4_LOG_DIR") or Path.cwd() / ".cache" / "logs")


def _open_log(log_dir: Path) -> tuple[Path, TextIO]:
    """A new ``up-<time>-<pid>.log`` (and ``up-latest.log`` pointing at it); the oldest
    beyond ``KEEP_LOGS`` are removed. Falls back to the temp folder if ``log_dir`` is not
    writable."""
    import tempfile

    stamp = time.strftime("%Y%m%d-%H%M%S")
    for folder in (log_dir, Path(tempfile.gettempdir()) / "dsv4-serve-logs"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"up-{stamp}-{os.getpid()}.log"
            handle = open(path, "a", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115
        except OSError:
            continue
        for old in sorted(folder.glob("up-2*.log"))[:-KEEP_LOGS]:
            old.unlink(missing_ok=True)
        latest = folder / "up-latest.log"
        try:
            latest.unlink(missing_ok=True)
            latest.symlink_to(path.name)
        except OSError:
            pass
        return path, handle
    raise OSError(f"no writable log folder ({log_dir} or the temp folder)")


class Step:
    """One long step's progress line; see the module docstring."""

    def __init__(self, console: Console, name: str) -> None:
        self.console, self.name = console, name
        self.started = time.monotonic()
        self.state = ""
        self.detail = ""
        self._printed = 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, state: str | None = None, detail: str | None = None) -> None:
        """New state or detail: redrawn on a terminal; on a pipe, said every HEARTBEAT_S."""
        if state is not None:
            self.state = state
        if detail is not None:
            self.detail = detail
        if self.console.live:
            return  # the ticker redraws the line
        now = time.monotonic()
        if now - self._printed >= HEARTBEAT_S:
            self._printed = now
            tail = f" ({self.detail})" if self.detail else ""
            self.console.say(f"{self.name} {self.elapsed:.0f}s: {self.state}{tail}")

    def line(self, width: int) -> str:
        text = f"{PREFIX} {self.name} {self.elapsed:4.0f}s  {self.state}"
        if self.detail:
            text += f"  | {self.detail}"
        return text[: max(width - 1, 20)]


class Console:
    """Our lines to the console; the rest of the process's output to ``log_path``."""

    def __init__(self, log_dir: Path | None = None, verbose: bool = False) -> None:
        self.verbose = verbose
        self.log_path, self._log = _open_log(log_dir or default_log_dir())
        self._lock = threading.RLock()
        self._observers: list[Callable[[str], None]] = []
        self._term: int | None = None
        self._saved: tuple[int, int] | None = None
        self._pump: threading.Thread | None = None
        self._step: Step | None = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._gone = False  # the console can no longer be written

    # The console itself: the original stdout (a terminal, a pipe, a file).
    @property
    def tty(self) -> bool:
        return os.isatty(self._term if self._term is not None else sys.stdout.fileno())

    @property
    def live(self) -> bool:
        """Rewrite the step's line in place: only on a terminal, and not when the full
        stream is shown there too."""
        return self.tty and not self.verbose

    def start(self) -> Console:
        """Send fds 1 and 2 (and so every child that inherits them) into the log file."""
        sys.stdout.flush()
        sys.stderr.flush()
        self._term = os.dup(1)
        self._saved = (os.dup(1), os.dup(2))
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._pump = threading.Thread(target=self._read, args=(read_end,), daemon=True)
        self._pump.start()
        return self

    def close(self) -> None:
        """Put fds 1 and 2 back, drain what is still in the pipe, close the file."""
        self.end_step()
        if self._saved is None:
            self._log.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = self._saved
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        self._saved = None
        if self._pump:
            # A child that inherited the pipe may hold it open: wait only a moment.
            self._pump.join(2)
        with self._lock:
            self._log.close()
        if self._term is not None:
            os.close(self._term)
            self._term = None

    def __enter__(self) -> Console:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def observe(self, callback: Callable[[str], None]) -> None:
        """``callback(line)`` for every line of the captured stream (on the pump thread)."""
        self._observers.append(callback)

    # Our lines.
    def say(self, message: str) -> None:
        self._emit(f"{PREFIX} {message}")

    def warn(self, message: str) -> None:
        self._emit(f"{PREFIX} warning: {message}")

    def error(self, message: str) -> None:
        self._emit(f"{PREFIX} error: {message}")

    def note(self, message: str) -> None:
        """A line for the log file only."""
        with self._lock:
            self._file(f"{PREFIX} {message}")

    def step(self, name: str, state: str = "") -> Step:
        """Start a long step (ending any other); ``end_step`` or ``done`` ends it."""
        self.end_step()
        step = Step(self, name)
        step.state = state
        with self._lock:
            self._step = step
        if self.live:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        else:
            self.say(f"{name} ..." + (f" ({state})" if state else ""))
            step._printed = time.monotonic()
        return step

    def done(self, summary: str) -> float:
        """End the current step with ``<name>: <summary>``; returns its seconds."""
        step = self._step
        self.end_step()
        if step is None:
            self.say(summary)
            return 0.0
        seconds = step.elapsed
        self.say(f"{step.name}: {summary}")
        return seconds

    def end_step(self) -> None:
        with self._lock:
            step, self._step = self._step, None
        if self._ticker:
            self._stop.set()
            self._ticker.join(2)
            self._ticker = None
        if step and self.live:
            self._to_term("\r\x1b[K")

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self._step:
                    self._to_term("\r\x1b[K" + self._step.line(self._width()))

    def _width(self) -> int:
        try:
            columns = os.get_terminal_size(self._term).columns
        except (OSError, TypeError):
            columns = 0
        return columns or 100  # a terminal that reports no size

    def _emit(self, line: str) -> None:
        with self._lock:
            self._file(line)
            if self.live and self._step:
                self._to_term("\r\x1b[K" + line + "\n" + self._step.line(self._width()))
            else:
                self._to_term(line + "\n")

    def _to_term(self, text: str) -> None:
        if self._gone:
            return
        fd = self._term if self._term is not None else sys.stdout.fileno()
        data = text.encode(errors="replace")
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError:  # the terminal or pipe went away: the log file still gets it all
            self._gone = True

    def _file(self, line: str) -> None:
        if not self._log.closed:
            self._log.write(ANSI.sub("", line) + "\n")

    # The captured stream.
    def _read(self, fd: int) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if self.verbose:
                with self._lock:
                    self._to_term(chunk.decode(errors="replace"))
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                self._captured(raw.decode(errors="replace"))
        if pending:
            self._captured(pending.decode(errors="replace"))
        os.close(fd)

    def _captured(self, line: str) -> None:
        with self._lock:
            self._file(line.rstrip("\r"))
        for callback in self._observers:
            with contextlib.suppress(Exception):  # an observer must never stop the pump
                callback(line)
