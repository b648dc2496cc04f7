"""Scraped metrics as a promtool unit test: the dsv4 rules evaluated on a real app's series.

``tests/gpu/serve_smoke.py`` scrapes every metrics endpoint of a running app in rounds
and writes one file per round, ``scrape-N.prom``: each endpoint's raw exposition text
after a marker line naming the endpoint, its Prometheus job and instance, and when it was
scraped. :func:`unit_test` turns two or more rounds into a ``promtool test rules`` file:

- ``input_series``: every sample of the endpoints the chart's PodMonitor scrapes (Ray's
  metrics export and the gateway), names and labels as scraped plus the ``job`` and
  ``instance`` a Prometheus scrape adds, at the scrape times relative to the first one.
- ``promql_expr_test`` for every recording rule and every alert expression, with the
  value ``tests.support.rule_oracle`` computes from the same samples without PromQL.
- ``alert_rule_test`` for every alert: those whose condition has held for their ``for:``.

Everything is evaluated 5m after the first scrape, the last instant a 5m window still
holds every round. There ``rate()`` extrapolates every series scraped in every round of
one endpoint by the same factor, so a ratio of two rates is exactly the ratio of the
counters' increases from the first scrape to the last: the recorded MTP acceptance is
delta accepted / delta drafted. (Prometheus 2.x, as Debian ships it: range and instant
selectors include a sample exactly one window back; 3.x excludes it.)

:func:`missing_series` reads which series each rule selects from the rules file itself
and names those no round of the scrape holds.

    python -m tests.support.scrape_snapshot SCRAPE_DIR -o snapshot.test.yaml
    promtool test rules snapshot.test.yaml
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.rule_oracle import (
    EVAL_INTERVAL,
    WINDOW,
    Expected,
    Labels,
    Result,
    Series,
    parse_duration,
    prom_round,
)

MARK = "# dsv4-scrape "
# What the chart's PodMonitor scrapes; other endpoints (the API port's /metrics) are kept
# in the files but are no Prometheus target.
SCRAPED_JOBS = ("ray", "gateway")
GRID_MS = 100  # scrape times are placed on this grid (promtool's input interval)
SCALE = 1e9  # values are compared as round(v * SCALE) / SCALE


# --- scrape files -------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One endpoint's exposition text from one scrape."""

    endpoint: str
    job: str
    instance: str
    url: str
    unix_ms: int
    text: str

    def header(self) -> str:
        fields = {
            "endpoint": self.endpoint,
            "job": self.job,
            "instance": self.instance,
            "unix_ms": self.unix_ms,
            "url": self.url,
        }
        return MARK + " ".join(f"{k}={v}" for k, v in fields.items())


def write_round(path: Path, sections: Iterable[Section]) -> Path:
    with open(path, "w", encoding="utf-8") as out:
        for section in sections:
            text = section.text if section.text.endswith("\n") else section.text + "\n"
            out.write(section.header() + "\n" + text)
    return path


def read_round(path: Path) -> list[Section]:
    sections: list[Section] = []
    fields: dict[str, str] | None = None
    lines: list[str] = []

    def close() -> None:
        if fields is not None:
            sections.append(
                Section(
                    endpoint=fields["endpoint"],
                    job=fields["job"],
                    instance=fields["instance"],
                    url=fields["url"],
                    unix_ms=int(fields["unix_ms"]),
                    text="".join(lines),
                )
            )

    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith(MARK):
            close()
            fields = dict(item.split("=", 1) for item in line[len(MARK) :].split())
            lines = []
        elif fields is None:
            raise ValueError(f"{path}: exposition text before the first {MARK.strip()!r} line")
        else:
            lines.append(line)
    close()
    return sections


def round_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("scrape-*.prom"), key=lambda p: int(p.stem.split("-")[1]))
    if len(files) < 2:
        raise ValueError(f"{directory}: a snapshot needs two or more scrape-N.prom files")
    return files


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of an exposition text (prometheus-client's parser, the text format's)."""
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _target_labels(labels: dict[str, str], job: str, instance: str) -> Labels:
    """Labels as a Prometheus scrape stores them (``honor_labels: false``): empty values
    dropped, a target's own ``job``/``instance`` kept as ``exported_*``, then the
    scrape's ``job`` and ``instance``."""
    out = {}
    for key, value in labels.items():
        if value == "":
            continue
        out[f"exported_{key}" if key in ("job", "instance") else key] = value
    out |= {"job": job, "instance": instance}
    return tuple(sorted(out.items()))


# --- the snapshot as series in time ---------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    directory: Path
    series: tuple[Series, ...]
    start_unix_ms: int
    round_ms: tuple[tuple[int, ...], ...]  # per round: each endpoint's offset

    @property
    def span_ms(self) -> int:
        return max(t for r in self.round_ms for t in r)

    def names(self) -> set[str]:
        return {s.name for s in self.series}


def load(directory: Path, jobs: Iterable[str] = SCRAPED_JOBS) -> Snapshot:
    jobs = set(jobs)
    rounds = [[s for s in read_round(f) if s.job in jobs] for f in round_files(directory)]
    if any(not r for r in rounds):
        raise ValueError(f"{directory}: a round holds none of the endpoints {sorted(jobs)}")
    start = min(s.unix_ms for r in rounds for s in r)
    points: dict[tuple[str, Labels], list[tuple[int, float]]] = defaultdict(list)
    for sections in rounds:
        for section in sections:
            at = round((section.unix_ms - start) / GRID_MS) * GRID_MS
            for name, labels, value in parse(section.text):
                key = (name, _target_labels(labels, section.job, section.instance))
                if points[key] and points[key][-1][0] >= at:
                    raise ValueError(f"{directory}: {name} scraped twice at {at} ms")
                points[key].append((at, value))
    offsets = tuple(
        tuple(round((s.unix_ms - start) / GRID_MS) * GRID_MS for s in r) for r in rounds
    )
    snapshot = Snapshot(
        directory,
        tuple(Series(n, lab, tuple(p)) for (n, lab), p in sorted(points.items())),
        start,
        offsets,
    )
    if snapshot.span_ms > WINDOW * 1000:
        raise ValueError(f"{directory}: rounds span {snapshot.span_ms} ms, over one 5m window")
    return snapshot


# --- which series the rules read -----------------------------------------------------

_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left"}
_KEYWORDS |= {"group_right", "offset", "bool", "inf", "nan"}


def referenced_series(expr: str) -> list[tuple[str, ...]]:
    """The series one of our rule expressions selects: each selector as the names it
    accepts (``{__name__=~"a|b"}`` accepts either), read from the PromQL text."""
    found: list[tuple[str, ...]] = []
    for alternatives in re.findall(r'\{__name__=~"([^"]*)"\}', expr):
        names = tuple(alternatives.split("|"))
        if not all(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", n) for n in names):
            raise ValueError(f"not a plain alternation of metric names: {alternatives!r}")
        found.append(names)
    text = re.sub(r'\{__name__=~"[^"]*"\}', " ", expr)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', " ", text)  # strings: label values, replacements
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)  # matchers, ranges
    grouping = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
    text = re.sub(grouping, " ", text)
    for name in re.findall(r"(?<![\w:.])[a-zA-Z_:][\w:]*(?![\w:]|\s*\()", text):
        if name.lower() not in _KEYWORDS:
            found.append((name,))
    return found


def rules_in(rules_file: Path) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(rules_file.read_text())["groups"] for r in g["rules"]]


# Series that exist only while a preset option is on: a scrape with none of a group's
# series had it off, and needs none of them; one with some needs all the rules read.
# vLLM's NIXL series come in both name forms, so a selector is skipped only when every
# name it accepts belongs to a group that is off.
OPTIONAL_GROUPS = {
    "dsv4_spec_guard_": "the speculation guard (speculation.guard adaptive)",
    "vllm:nixl_": "the NIXL KV connector (a disaggregation section), vLLM's own server",
    "ray_vllm_nixl_": "the NIXL KV connector (a disaggregation section), through Ray",
}


def missing_series(snapshot: Snapshot, rules_file: Path) -> dict[str, list[str]]:
    """Selectors of the rules that match no scraped series: {selector: [rules]}.

    A ``dsv4:`` name must be recorded by a rule of the file; any other must have been
    scraped, in any round (OPTIONAL_GROUPS aside)."""
    rules = rules_in(rules_file)
    recorded = {r["record"] for r in rules if "record" in r}
    scraped = snapshot.names()
    off = tuple(p for p in OPTIONAL_GROUPS if not any(n.startswith(p) for n in scraped))
    missing: dict[str, list[str]] = defaultdict(list)
    for rule in rules:
        for names in referenced_series(rule["expr"]):
            if off and all(name.startswith(off) for name in names):
                continue
            have = recorded if names[0].startswith("dsv4:") else scraped
            if not have.intersection(names):
                missing["|".join(names)].append(rule.get("record") or rule["alert"])
    return dict(missing)


# --- the promtool test file ----------------------------------------------------------


def _selector(name: str, labels: Labels) -> str:
    quoted = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in labels)
    return f"{name}{{{quoted}}}"


def _values(points: tuple[tuple[int, float], ...]) -> str:
    """promtool's series notation on the GRID_MS grid: ``_xN`` is N missing samples."""
    out, step = [], 0
    for t, value in points:
        gap = t // GRID_MS - step
        if gap:
            out.append(f"_x{gap}")
        text = "NaN" if math.isnan(value) else repr(value).replace("inf", "Inf")
        out.append(text)
        step = t // GRID_MS + 1
    return " ".join(out)


def _samples(result: Result) -> list[dict[str, Any]]:
    return [
        {"labels": _selector("", k), "value": prom_round(v, SCALE)}
        for k, v in sorted(result.items())
        if not math.isnan(v)
    ]


def unit_test(
    snapshot: Snapshot, rules_file: Path, rule_file_ref: str | None = None
) -> dict[str, Any]:
    """The ``promtool test rules`` file: the snapshot's series, every recording rule and
    alert expression with its expected value, every alert's firing state."""
    from serving.config.preset import Monitoring
    from serving.monitoring import rule_tests

    defaults = Monitoring().model_dump()
    at = int(WINDOW * 1000)
    history: dict[int, Expected] = {}

    def expected_at(t: int) -> Expected:
        if t not in history:
            history[t] = Expected(snapshot.series, t, defaults)
        return history[t]

    final = expected_at(at)
    rules = rules_in(rules_file)
    records = list(dict.fromkeys(r["record"] for r in rules if "record" in r))
    eval_time = f"{at // 1000}s"
    expr_tests = []
    for name in records:
        result = final.value(name)
        # round() absorbs float rounding between Go and Python; NaN (0/0, no
        # observations) equals nothing, so those series are counted instead.
        expr_tests.append(
            {
                "expr": f"round({name} * {SCALE:g}) / {SCALE:g} unless ({name} != {name})",
                "eval_time": eval_time,
                "exp_samples": _samples(result),
            }
        )
        nan = {k: 1.0 for k, v in result.items() if math.isnan(v)}
        expr_tests.append(
            {
                "expr": f"count without () ({name} != {name})",
                "eval_time": eval_time,
                "exp_samples": _samples(nan),
            }
        )
    alert_tests = []
    step = EVAL_INTERVAL * 1000
    for rule in (r for r in rules if "alert" in r):
        name = rule["alert"]
        now = final.alert(name, expected_at)
        expr_tests.append(
            {"expr": f"round(({rule['expr']}) * {SCALE:g}) / {SCALE:g}", "eval_time": eval_time}
            | {"exp_samples": _samples(now)}
        )
        # Firing: the condition held at every evaluation for the last `for:`.
        hold = parse_duration(rule.get("for", "0s")) * 1000
        fired = []
        for labels, value in sorted(now.items()):
            since = at
            while since - step >= 0 and labels in expected_at(since - step).alert(
                name, expected_at
            ):
                since -= step
            if at - since >= hold:
                fired.append(({**dict(labels), **rule.get("labels", {})}, value))
        alert_tests.append(rule_tests.alert(name, eval_time, *fired))
    return {
        "rule_files": [rule_file_ref or str(rules_file)],
        "evaluation_interval": f"{EVAL_INTERVAL}s",
        "tests": [
            {
                "name": f"snapshot {snapshot.directory.name}",
                "interval": f"{GRID_MS}ms",
                "input_series": [
                    {"series": _selector(s.name, s.labels), "values": _values(s.points)}
                    for s in snapshot.series
                ],
                "promql_expr_test": expr_tests,
                "alert_rule_test": alert_tests,
            }
        ],
    }


def counter_increase(snapshot: Snapshot, name: str, **match: str) -> float:
    """Sum over matching series of (last sample - first sample): the plain delta."""
    total = 0.0
    for s in snapshot.series:
        if s.name == name and all(s.get(k) == v for k, v in match.items()) and s.points:
            total += s.points[-1][1] - s.points[0][1]
    return total


def main(argv: list[str] | None = None) -> int:
    from serving.chart import derived_files

    parser = argparse.ArgumentParser(description="a promtool unit test from scrape-N.prom files")
    parser.add_argument("scrape_dir", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--rules", type=Path, default=derived_files.RULES_FILE)
    args = parser.parse_args(argv)
    snapshot = load(args.scrape_dir)
    for selector, users in missing_series(snapshot, args.rules).items():
        print(f"not in the scrape: {selector} (read by {', '.join(users)})")
    ref = os.path.relpath(args.rules.resolve(), args.output.resolve().parent)
    test = unit_test(snapshot, args.rules, ref)
    args.output.write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    print(f"wrote {args.output}: promtool test rules {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
