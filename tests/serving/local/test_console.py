"""serving/local/console.py in a real child process: what reaches the console (a pipe, a
terminal) and what reaches the log file, for Python prints, logging, JSON records,
C-level writes and a child process that inherits the descriptors."""

import os
import pty
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from serving.local.console import KEEP_LOGS, Console, verbose_from_env
from tests.support.paths import ROOT

CHILD = textwrap.dedent(
    """
    import json, logging, os, subprocess, sys, time
    from pathlib import Path
    import serving.local.console as console_module
    from serving.local.console import Console

    console_module.HEARTBEAT_S = 0.3
    logging.basicConfig(level=logging.INFO)
    with Console(Path(sys.argv[1]), verbose=sys.argv[2] == "1") as console:
        console.say("stage one")
        print("python print to stdout")
        print("python print to stderr", file=sys.stderr)
        logging.getLogger("vllm").warning("a library warning")
        print(json.dumps({"asctime": "now", "levelname": "INFO", "message": "a record"}))
        os.write(2, b"a C-level write to fd 2\\n")
        subprocess.run(["sh", "-c", "echo from a child process"], check=True)
        step = console.step("engine load", "loading")
        for i in range(4):
            step.update(state=f"loading {i}", detail=f"detail {i}")
            time.sleep(0.2)
        console.done("ready after a moment")
        console.warn("something to look at")
        console.error("failed to start: example: ValueError: x")
    print(console.log_path)  # after close: to the real stdout again
    """
)
FOREIGN = [
    "python print to stdout",
    "python print to stderr",
    "a library warning",
    '"message": "a record"',
    "a C-level write to fd 2",
    "from a child process",
]


def _run(tmp_path: Path, verbose: bool) -> tuple[list[str], str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), "1" if verbose else "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # fd 2 went to the log file (or, verbose, to our stdout)
    log = (tmp_path / "up-latest.log").read_text()
    return out.stdout.splitlines(), log


def test_console_shows_only_our_lines_and_the_file_has_everything(tmp_path):
    console, log = _run(tmp_path, verbose=False)
    ours = [line for line in console if line.startswith("[dsv4-serve]")]
    assert ours == [
        "[dsv4-serve] stage one",
        "[dsv4-serve] engine load ... (loading)",
        *[line for line in ours if line.startswith("[dsv4-serve] engine load ") and "s: " in line],
        "[dsv4-serve] engine load: ready after a moment",
        "[dsv4-serve] warning: something to look at",
        "[dsv4-serve] error: failed to start: example: ValueError: x",
    ]
    heartbeats = [line for line in ours if "s: loading" in line]
    assert heartbeats and all("(detail " in line for line in heartbeats)  # on a pipe: beats
    # Nothing else but the log path printed after the console was closed.
    assert [line for line in console if not line.startswith("[dsv4-serve]")] == [console[-1]]
    assert Path(console[-1]).parent == tmp_path
    for text in FOREIGN + [line for line in ours]:
        assert text in log, text
    assert not any(text in "\n".join(console) for text in FOREIGN)


def test_verbose_shows_everything_too(tmp_path):
    console, log = _run(tmp_path, verbose=True)
    text = "\n".join(console)
    for needle in FOREIGN + ["[dsv4-serve] stage one", "[dsv4-serve] error: failed to start"]:
        assert needle in text and needle in log, needle


def test_a_terminal_gets_one_progress_line_rewritten_in_place(tmp_path):
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), "0"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=ROOT,
    )
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1)
        if ready:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(10)
    os.close(leader)
    screen = b"".join(chunks).decode(errors="replace")
    assert "\r\x1b[K[dsv4-serve] engine load" in screen  # redrawn, not new lines
    assert "| detail 3" in screen or "| detail 2" in screen
    lines = [line for line in screen.replace("\r\n", "\n").split("\n") if line.strip()]
    # Lines that end up on screen (a redraw overwrites the line it is on).
    final = [line.rsplit("\x1b[K", 1)[-1] for line in lines]
    assert "[dsv4-serve] engine load: ready after a moment" in final
    assert not any("s: loading" in line for line in final)  # no heartbeat lines on a TTY
    assert not any(text in screen for text in FOREIGN)


def test_old_logs_are_pruned_and_latest_points_at_the_newest(tmp_path):
    for i in range(KEEP_LOGS + 3):
        (tmp_path / f"up-20200101-0000{i:02d}-1.log").write_text("old")
    console = Console(tmp_path)
    console.say("hello")
    console.close()
    logs = sorted(tmp_path.glob("up-2*.log"))
    assert len(logs) == KEEP_LOGS and console.log_path in logs
    assert (tmp_path / "up-latest.log").resolve() == console.log_path.resolve()


def test_an_unwritable_log_folder_falls_back_to_the_temp_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    console = Console(blocker / "logs")
    console.close()
    assert console.log_path.parent.name == "dsv4-serve-logs"
    console.log_path.unlink()


@pytest.mark.parametrize(
    ("value", "expected"), [("", False), ("0", False), ("1", True), ("true", True)]
)
def test_verbose_from_env(monkeypatch, value, expected):
    monkeypatch.setenv("DSV4_VERBOSE", value)
    assert verbose_from_env() is expected


HOLD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from serving.local.console import Console
    from serving.local.local_up import _catch_sigterm, _hold_signals

    with Console(Path(sys.argv[1])) as console:
        _catch_sigterm()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except KeyboardInterrupt:
            console.say("stopping")
        _hold_signals(console)
        for signum in (signal.SIGTERM, signal.SIGINT):
            os.kill(os.getpid(), signum)  # must not raise: the stop goes on
        console.say("stopped")
    """
)


def test_a_second_signal_during_the_stop_does_not_cut_it_short(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "[dsv4-serve] stopping",
        "[dsv4-serve] still stopping (Serve, Ray, HAProxy): a moment more",
        "[dsv4-serve] still stopping (Serve, Ray, HAProxy): a moment more",
        "[dsv4-serve] stopped",
    ]
