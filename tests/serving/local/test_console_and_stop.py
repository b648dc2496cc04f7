"""`make serve` as a person sees it, failed starts, and a stop that leaves nothing.

- `make serve`'s own command (read from the Makefile with ``make -n``): the console has
  our stage lines and nothing else (no JSON records, no Ray or vLLM lines); the log file
  it names has all of that. After a replica restart (Serve reloads HAProxy: new
  processes with ``-sf <old pids>``, PIDs `up` never saw) and one more reload-started
  HAProxy that Ray does not know about, SIGTERM (and a second one while it stops) leaves
  no process and frees the ports.
- Induced failures, each ending in one line naming the cause and the log, exit 1, and
  nothing left running: the port taken, an unwritable model path, a bad preset value
  (vLLM rejects it), an engine that dies at load (its KV cache does not fit in memory:
  the engine's own error, forwarded by Ray, is the cause). An engine killed while it
  loads (no error of its own) is covered by tests/serving/local/test_start_failure.py.
"""

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from serving.config.proxy import RELOAD_GRACE_S, haproxy_config, haproxy_ports
from serving.local.processes import free_port, port_free
from tests.support.paths import ROOT
from tests.support.ray_app import READY_LINE, ray_pids

pytestmark = pytest.mark.ray
PREFIX = "[dsv4-serve]"
VENV = Path(sys.prefix)


def make_serve_command(port: int) -> list[str]:
    """The command `make serve` runs (its install step assumed done)."""
    stamp = VENV / ".deps-installed"
    out = subprocess.run(
        ["make", "-n", "-s", "-o", str(stamp), "serve", f"VENV={VENV}", f"PORT={port}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = [line for line in out.stdout.splitlines() if "dsv4-serve up" in line]
    return shlex.split(line)


def _env(**extra: str) -> dict[str, str]:
    mine = ("DSV4_API_KEYS", "DSV4_LOG_DIR", "DSV4_VERBOSE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(mine)}
    return {**env, **extra}


class Up:
    """`up` as a child in its own session; its console (a pipe) collected line by line."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.ray_before = ray_pids()
        self.haproxy_before = set(_haproxy_folders())
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.seen: set[int] = set()  # every process `up` started, as seen while it ran
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def descendants(self) -> list[psutil.Process]:
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen |= {p.pid for p in kids}
        return kids

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert self.proc.poll() is None, f"`up` exited {self.proc.returncode}:\n{self.text}"
            assert time.monotonic() < deadline, f"no {needle!r} in:\n{self.text}"
            self.descendants()
            time.sleep(0.5)

    def finish(self, timeout: float) -> int:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise
        self._reader.join(10)
        return self.proc.returncode

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            left = ray_pids() - self.ray_before
            left |= {p for p in self.seen if psutil.pid_exists(p) and not _zombie(p)}
            folders = set(_haproxy_folders()) - self.haproxy_before
            if not left and not folders:
                return
            assert time.monotonic() < deadline, f"left running: {left}, HAProxy {folders}"
            time.sleep(1)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _haproxy_folders() -> dict[str, list[psutil.Process]]:
    """HAProxy processes by config folder (Ray's per-node folder)."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["cmdline"]):
        config = haproxy_config(proc.info.get("cmdline") or [])
        if config is not None:
            found.setdefault(str(config.parent), []).append(proc)
    return found


def _ours(line: str) -> bool:
    return line.startswith(PREFIX)


# ---- `make serve`, a replica restart, one more reload, SIGTERM ----------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    port = free_port()
    cmd = make_serve_command(port)
    cmd += ["--ray-metrics-port", str(free_port()), "--gateway-metrics-port", str(free_port())]
    app = Up(cmd, _env())
    app.port = port
    app.base = f"http://127.0.0.1:{port}"
    try:
        app.wait_for(READY_LINE, 400)
        app.wait_for("Ctrl-C (or SIGTERM) stops everything", 30)
        yield app
    finally:
        if app.proc.poll() is None:
            os.killpg(app.proc.pid, signal.SIGKILL)
            app.proc.wait()


def test_make_serve_console_has_our_stage_lines_and_no_json(served: Up):
    lines = [line for line in served.lines if line.strip()]
    assert all(_ours(line) for line in lines), "\n".join(x for x in lines if not _ours(x))
    assert not any('"asctime"' in line or line.lstrip().startswith("{") for line in lines)
    expected = [
        "auth OFF: no API key configured",
        "serving path direct, proxy haproxy",
        "Ray start ... (local Ray for preset 'cpu-tiny')",
        "Ray start: Ray ",
        "engine load ... (building the app)",
        "engine load: dsv4 RUNNING (Dsv4Server: HEALTHY) after ",
        "ready in ",
        "stages: ray ",
        "try: curl -s",
        "metrics: engine http://127.0.0.1:",
        "logs: ",
        "Ctrl-C (or SIGTERM) stops everything",
    ]
    positions = [next(i for i, x in enumerate(lines) if f"{PREFIX} {e}" in x) for e in expected]
    assert positions == sorted(positions), lines
    assert any("golden model at " in x or "model write: " in x for x in lines)
    assert len(lines) < 25, lines  # was ~200 Ray and vLLM lines (some 600-character JSON)


def test_the_log_file_it_names_has_everything(served: Up):
    logs = next(line for line in served.lines if line.startswith(f"{PREFIX} logs: "))
    path = ROOT / logs.split()[2]
    assert path.parent == ROOT / ".cache" / "logs", logs
    text = path.read_text()
    assert '"asctime"' in text  # Ray Serve LLM's JSON records
    assert "Loading weights took" in text  # vLLM's engine, forwarded by Ray
    assert "Started a local Ray instance" in text  # Ray's driver
    assert all(line in text for line in served.lines if line.startswith(PREFIX))
    assert re.search(r"Ray's /tmp/ray/session_[\w-]+/logs", logs), logs


def test_it_answers(served: Up, golden_design):
    body = {"model": "dsv4-golden", "prompt": "neti", "max_tokens": 3, "temperature": 0}
    out = httpx.post(f"{served.base}/v1/completions", json=body, timeout=60)
    assert out.json()["choices"][0]["text"] == golden_design.continuation("neti", 3)


def test_a_request_may_outlive_the_haproxy_that_took_it_by_an_hour(served: Up):
    # What Ray rendered from the environment `up` set (serving/config/proxy.py): a reload's
    # old process cuts what it still holds only after this.
    folder, procs = _ours_haproxy(served)
    config = haproxy_config(procs[0].cmdline())
    assert config is not None and str(config.parent) == folder
    stops = re.findall(r"^\s*hard-stop-after (\S+)$", config.read_text(), re.M)
    assert stops == [f"{RELOAD_GRACE_S}s"], stops


def _ours_haproxy(app: Up) -> tuple[str, list[psutil.Process]]:
    folders = {f: p for f, p in _haproxy_folders().items() if f not in app.haproxy_before}
    assert len(folders) == 1, folders  # one Ray node: one config folder
    return next(iter(folders.items()))


def _admin_socket_pid(haproxy_cmd: list[str]) -> int | None:
    """The pid that answers on the admin socket of the config ``haproxy_cmd`` runs (Ray
    2.60 checks a reload the same way: ray/serve/_private/haproxy.py
    ``_wait_for_hap_availability``)."""
    config = haproxy_config(haproxy_cmd)
    found = re.search(r"^\s*stats socket (\S+)", config.read_text(), re.M) if config else None
    if not found:
        return None
    try:
        with socket.socket(socket.AF_UNIX) as admin:
            admin.settimeout(2)
            admin.connect(found.group(1))
            admin.sendall(b"show info\n")
            answer = b""
            while chunk := admin.recv(65536):
                answer += chunk
    except OSError:
        return None
    pid = re.search(rb"^Pid: (\d+)", answer, re.M)
    return int(pid.group(1)) if pid else None


def _start_unknown_reload(folder: str, tmp: Path) -> tuple[subprocess.Popen, Path]:
    """An HAProxy reload of ``folder``'s config that nobody Ray knows started, as Ray's
    own reloads run it (``-sf <pid>``). Started means it took over the admin socket and
    still runs a moment later; a start that loses a race with one of Ray's reloads (the
    socket or listeners changing hands) is tried again, and its output is kept."""
    log, tries = tmp / "unknown-reload.log", []
    for _ in range(3):
        live = [p for p in _haproxy_folders().get(folder, []) if p.is_running()]
        assert live, f"no HAProxy of {folder} runs any more: {tries}"
        cmd = live[-1].cmdline()
        start = end = cmd.index("-sf")
        while end + 1 < len(cmd) and cmd[end + 1].isdigit():
            end += 1
        cmd = [*cmd[:start], "-sf", *(str(p.pid) for p in live), *cmd[end + 1 :]]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if _admin_socket_pid(cmd) == proc.pid:
                time.sleep(2)
                if proc.poll() is None:
                    return proc, log
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        tries.append(f"exit {proc.returncode}: {log.read_text()[-1000:]}")
        time.sleep(2)
    raise AssertionError(f"the unknown reload never took over: {tries}")


def test_a_stop_after_haproxy_reloads_leaves_nothing(served: Up, tmp_path: Path):
    folder, procs = _ours_haproxy(served)
    first = {p.pid for p in procs}
    # A replica restart: Serve replaces the replica and reloads HAProxy when it leaves and
    # when its replacement is ready.
    (replica,) = [p for p in served.descendants() if "ServeReplica:dsv4" in p.name()]
    replica.kill()
    deadline = time.monotonic() + 300
    body = {"model": "dsv4-golden", "prompt": "neti", "max_tokens": 2}
    while True:
        assert time.monotonic() < deadline, "not serving again after the replica restart"
        served.descendants()
        try:
            if httpx.post(f"{served.base}/v1/completions", json=body, timeout=10).is_success:
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    _, procs = _ours_haproxy(served)
    live = [p for p in procs if p.is_running()]
    assert live and not {p.pid for p in live} & first  # new processes, none seen at start
    assert all("-sf" in p.cmdline() for p in live), [p.cmdline() for p in live]
    # One more reload, as Ray's would start it, but by nobody Ray knows: an HAProxy a
    # reload left behind. Only its config folder says it belongs to this `up`.
    orphan, orphan_log = _start_unknown_reload(folder, tmp_path)
    served.descendants()
    served.proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    # A second signal while it stops (an impatient Ctrl-C) does not cut the stop short.
    served.wait_for(f"{PREFIX} shutting down ...", 30)
    time.sleep(1)
    served.proc.send_signal(signal.SIGTERM)
    assert served.finish(150) == 0, served.text
    assert f"{PREFIX} still stopping (Serve, Ray, HAProxy): a moment more" in served.lines
    stop_s = time.monotonic() - started
    assert served.lines[-1] == f"{PREFIX} stopped", served.lines[-5:]
    stopped = [x for x in served.lines if "stopped HAProxy left behind by Ray" in x]
    ended = f"exit code {orphan.poll()}: {orphan_log.read_text()[-1000:]}"
    assert stopped, f"the reload's HAProxy was not swept (it ended by itself? {ended})"
    stopped = stopped[0]
    assert str(orphan.pid) in stopped, stopped
    orphan.wait(10)
    served.assert_nothing_left()
    ports = [("127.0.0.1", served.port)] + [("0.0.0.0", p) for p in haproxy_ports().values()]
    assert all(port_free(host, port) for host, port in ports), ports
    print(f"stop after the reloads: {stop_s:.1f}s")


# ---- induced failures ---------------------------------------------------------------


def _up_command(*extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "serving.cli", "up", "cpu-tiny", "--port", str(free_port())]
    cmd += ["--ray-metrics-port", str(free_port()), "--gateway-metrics-port", str(free_port())]
    return [*cmd, *extra]


def _failed_start(app: Up, kind: str, timeout: float) -> str:
    """The start failed with one line naming ``kind`` and the log; nothing is left."""
    code = app.finish(timeout)
    seconds = time.monotonic() - app.started
    lines = [line for line in app.lines if line.strip()]
    assert code == 1, app.text
    assert all(_ours(line) for line in lines), app.text
    last = lines[-1]
    assert last.startswith(f"{PREFIX} error: failed to start: {kind}: "), app.text
    log = re.search(r"\(full log: (.+)\)$", last)
    assert log and (ROOT / log.group(1)).exists(), last
    assert sum("failed to start" in line for line in lines) == 1
    app.assert_nothing_left()
    print(f"{kind}: failed in {seconds:.1f}s: {last}")
    return last


def test_port_taken(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = _up_command()
        cmd[cmd.index("--port") + 1] = str(port)
        app = Up(cmd, _env(DSV4_LOG_DIR=str(tmp_path)))
        last = _failed_start(app, "port in use", 60)
    assert f"the API port {port} is already in use by " in last
    assert "Ray start" not in app.text  # found before anything started


def test_unwritable_model_path(tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cmd = _up_command("--set", f"model.source={blocker}/model")
    app = Up(cmd, _env(DSV4_LOG_DIR=str(tmp_path)))
    last = _failed_start(app, "model path not writable", 60)
    assert "Not a directory" in last and "Ray start" not in app.text


def test_bad_preset_value(tmp_path: Path):
    # Valid for the preset schema, rejected by vLLM inside the replica.
    cmd = _up_command("--set", "engine_args.max_model_len=10000000")
    last = _failed_start(Up(cmd, _env(DSV4_LOG_DIR=str(tmp_path))), "bad preset value", 300)
    assert "User-specified max_model_len (10000000)" in last


def test_engine_dies_at_load_out_of_memory(tmp_path: Path):
    # 10^8 GiB of KV cache: vLLM's CPU worker refuses it while the engine loads.
    cmd = _up_command("--set", 'env.VLLM_CPU_KVCACHE_SPACE="100000000"')
    last = _failed_start(Up(cmd, _env(DSV4_LOG_DIR=str(tmp_path))), "out of memory", 300)
    assert "less than requested memory for kv" in last
