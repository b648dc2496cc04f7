"""Benches whose arms are whole Ray Serve apps: the arms take turns.

Local Ray apps cannot run side by side here (each one's HAProxy binds the same stats and
metrics ports), so every round starts each local arm's app alone (in an order that
rotates from round to round), plays the bench's workload on it once and stops it. Running
endpoints (``--target NAME=URL``) are played in the same turns. The prefix-routing bench
(serving/bench/routing_bench.py) and the P/D bench (serving/bench/pd_bench.py) use it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from serving.bench import local
from serving.bench.load import Target
from serving.bench.targets import LocalSetup, local_specs

Progress = Callable[[str], None]
# Plays the bench's workload once on a running arm; returns that round's raw record.
Play = Callable[[Target], dict]


@dataclass
class ArmRounds:
    """What the turns gave: each arm's rounds in order, its local starts and start errors."""

    played: dict[str, list[dict]]
    starts: dict[str, list[float]]
    errors: dict[str, dict] = field(default_factory=dict)
    interrupted: bool = False


def _one_turn(
    name: str,
    setup: LocalSetup | None,
    remote: list[Target],
    play: Play,
    logs: Path,
    progress: Progress,
    rounds: ArmRounds,
) -> None:
    """Play once on one arm: a running endpoint, or a local app started for it and stopped
    after it (also when the run is interrupted)."""
    remote_target = next((t for t in remote if t.name == name), None)
    if remote_target is not None:
        rounds.played[name].append(play(remote_target))
        return
    spec = local_specs([name], setup)[0]
    servers, failed = local.start_all([spec], logs, progress)
    if failed:
        rounds.errors[name] = failed[name]
        return
    try:
        rounds.starts[name].append(servers[0].ready_seconds)
        rounds.played[name].append(play(servers[0].target))
    finally:
        progress(f"stopping {name}")
        while True:  # a second Ctrl-C or SIGTERM must not leave the app half stopped
            try:
                local.stop_all([s.proc for s in servers], 60)
                break
            except KeyboardInterrupt:
                progress(f"still stopping {name}")


def play_in_turns(
    setup: LocalSetup | None,
    kinds: list[str],
    remote: list[Target],
    rounds: int,
    play: Play,
    logs: Path,
    progress: Progress,
    after_each: Callable[[ArmRounds], None] | None = None,
) -> ArmRounds:
    """Every arm once per round, the local ones each in its own fresh app. Ctrl-C or
    SIGTERM stops the arm that runs and keeps what the others played. ``after_each`` sees
    what has been played after every turn (a report on disk survives a lost machine)."""
    arms = [*kinds, *(t.name for t in remote)]
    result = ArmRounds({name: [] for name in arms}, {kind: [] for kind in kinds})
    try:
        for index in range(rounds):
            order = arms[index % len(arms) :] + arms[: index % len(arms)]
            progress(f"round {index + 1}/{rounds}: {', '.join(order)}")
            for name in order:
                _one_turn(name, setup, remote, play, logs, progress, result)
                if after_each:
                    after_each(result)
    except KeyboardInterrupt:
        result.interrupted = True
        progress("interrupted: writing what was measured")
    return result
