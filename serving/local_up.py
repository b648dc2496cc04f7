"""`dsv4-serve up`: local Ray + the same Serve config a cluster deploys, with progress."""

import importlib
import os
import signal
import sys
import threading
import time
from typing import Any

from serving.build_args import BuildArgs, resolve
from serving.gateway.auth import KeySource
from serving.proxy import environment as proxy_environment
from serving.proxy import haproxy_pids, stop_leftover_haproxy
from serving.proxy import resolve as resolve_proxy
from serving.serve_config import serve_config

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _say(message: str) -> None:
    print(f"[dsv4-serve] {message}", flush=True)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _catch_sigterm() -> None:
    """Ray's core worker installs its own SIGTERM/SIGINT handlers as it starts (SIGTERM
    aborts, Ctrl-C is swallowed); take both back so either one drains and stops."""
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)


def _progress(started: float, done: threading.Event) -> None:
    from ray import serve

    last = ""
    while not done.wait(5):
        try:
            apps = serve.status().applications
        except Exception:  # the controller may still be starting
            continue
        parts = []
        for name, app in apps.items():
            deps = ", ".join(f"{d}: {s.status.value}" for d, s in app.deployments.items())
            parts.append(f"{name} {app.status.value} ({deps})")
        line = "; ".join(parts) or "starting Serve"
        if line != last:
            _say(f"{time.monotonic() - started:5.0f}s  {line}")
            last = line


DRAIN_SECONDS = 60  # as long as the engine replica's graceful_shutdown_timeout_s


def _in_flight(gateway_metrics_url: str) -> float:
    from serving.metrics_page import scrape

    samples = scrape(gateway_metrics_url)
    return sum(v for (name, _), v in samples.items() if name == "dsv4_gateway_requests_in_flight")


def _drain(gateway_metrics_url: str, deadline_s: float = DRAIN_SECONDS) -> None:
    """Wait for requests already in flight to finish before tearing Serve down."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            pending = _in_flight(gateway_metrics_url)
        except Exception:  # the gateway is gone already: nothing left to wait for
            return
        if pending <= 0:
            return
        _say(f"draining {pending:.0f} in-flight request(s) ...")
        time.sleep(1)
    _say(f"drain deadline ({deadline_s:.0f}s) passed; stopping anyway")


def up(args: BuildArgs, host: str, port: int, ray_metrics_port: int, num_cpus: int | None) -> int:
    _, preset = resolve(args)
    keys = KeySource()
    if keys.configured() and not keys.keys():
        _say("an API key source is configured but holds no key (check DSV4_API_KEYS_FILE)")
        return 2
    if not keys.keys():
        if host not in LOOPBACK:
            _say(
                f"refusing to bind {host} without an API key: "
                "set DSV4_API_KEYS or DSV4_API_KEYS_FILE"
            )
            return 2
        _say(
            "auth OFF: no API key configured (DSV4_API_KEYS / DSV4_API_KEYS_FILE); "
            "bound to loopback only"
        )
    else:
        _say(f"auth ON: {keys.describe()}")
    config = serve_config(args, host, port)
    gateway_port = args.gateway_metrics_port or int(
        os.environ.get("DSV4_GATEWAY_METRICS_PORT", 9464)
    )

    proxy = resolve_proxy(preset.serving.proxy)
    # Before Ray starts (every Ray process reads them); values already set win.
    for name, value in proxy_environment(proxy).items():
        os.environ.setdefault(name, value)
    # A replica that is its own ingress stays up 30 s after a stop by default, for load
    # balancers to deregister it; here nothing but our own drain (below) fronts it.
    os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "1")
    _say(f"serving path {preset.serving.path}, proxy {proxy}")
    haproxy_before = haproxy_pids()

    import ray
    from ray import serve

    started = time.monotonic()
    _say(f"starting local Ray for preset {preset.name!r} ({preset.description})")
    # Ray's own scheduling needs headroom beyond the engine's CPU bundle (ingress, proxy).
    cpus = num_cpus or max(4, os.cpu_count() or 1)
    ray.init(
        num_cpus=cpus,
        include_dashboard=False,
        _metrics_export_port=ray_metrics_port,
        namespace="dsv4",
    )
    stages = {"ray": time.monotonic() - started}
    done, failure = threading.Event(), []
    try:
        serve.start(http_options=config["http_options"])
        stages["serve"] = time.monotonic() - started - stages["ray"]
        _catch_sigterm()
        watcher = threading.Thread(target=_progress, args=(started, done), daemon=True)
        watcher.start()
        for app in config["applications"]:
            target = _import(app["import_path"])(app["args"])
            try:
                serve.run(target, name=app["name"], route_prefix=app["route_prefix"])
            except Exception as exc:  # surfaced below, after the watcher stops
                failure.append(exc)
        stages["replica"] = time.monotonic() - started - stages["ray"] - stages["serve"]
        _catch_sigterm()
        done.set()
        if failure:
            _say(f"deployment failed: {failure[0]}")
            return 1
        base = f"http://{'127.0.0.1' if host in LOOPBACK else host}:{port}"
        auth = ' -H "Authorization: Bearer $DSV4_API_KEY"' if keys.keys() else ""
        _say(f"ready in {time.monotonic() - started:.0f}s at {base}/v1 (model {preset.model.id!r})")
        # Start-up by stage: Ray, Serve's controller and proxy, the replica (engine included).
        _say("stages: " + ", ".join(f"{name} {secs:.1f}s" for name, secs in stages.items()))
        _say(
            f"try: curl -s {base}/v1/completions{auth} -H 'Content-Type: application/json' "
            f'-d \'{{"model": "{preset.model.id}", "prompt": "neti", "max_tokens": 8}}\''
        )
        _say(
            f"metrics: engine http://127.0.0.1:{ray_metrics_port}/metrics, gateway http://127.0.0.1:{gateway_port}/metrics"
        )
        _say("Ctrl-C (or SIGTERM) stops everything")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        _say("shutting down ...")
        if done.is_set() and not failure:
            _drain(f"http://127.0.0.1:{gateway_port}/metrics")
        return 0
    finally:
        done.set()
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            if stopped := stop_leftover_haproxy(haproxy_before):
                _say(f"stopped HAProxy left behind by Ray (pid {stopped})")
        _say("stopped")
        sys.stdout.flush()
