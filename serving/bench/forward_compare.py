"""`vllm bench forward` (vLLM >= 0.33) beside the real-width bench (serving/bench/realwidth.py).

The real-width bench serves a bench model (DeepSeek-V4-Flash's layer shapes at a few
layers, dummy weights) through vLLM's OpenAI server and measures what a client gets: TPOT,
the acceptance length, output tok/s at concurrency 1..128. `vllm bench forward` builds one
exact batch per case without the scheduler, runs it through the model runner's
`execute_model`, captures the target forward (and the MTP drafter, every draft accepted) as
a one-shot CUDA graph and times its replays between in-graph events
(vllm/benchmarks/forward/main.py, capture.py): no sampling, rejection sampling, scheduler
or host step. Its median per case against our served step (TPOT x acceptance length) at the
same concurrency says how much of a served decode step is the forward itself.

Each run here is one engine: the preset's engine arguments (as `vllm-kK` gets them from
serving/bench/targets.py) for one depth, one k and one routing, with a case per
concurrency: ``c`` requests of query ``k + 1`` (``k`` drafts) at the mean KV length of a
served request (prompt + half the output, serving/bench/realwidth.py), drawn within +-half
the output by vLLM's --kv-len-jitter. Routing ``real`` keeps the router of our dummy
weights (model_overrides/patches/dummy_weights.py, what the served runs had); ``balanced``
and ``zipf`` are vLLM's synthetic fixtures (vllm/benchmarks/forward/routing.py).

    python -m serving.bench.forward_compare commands --model-dir DIR --out DIR [--layers N]
    python -m serving.bench.forward_compare run --model-dir DIR --out DIR [--layers N]
    python -m serving.bench.forward_compare compare --forward DIR [DIR ...] --realwidth JSON
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serving.bench.arguments import non_negative_float, positive_int
from serving.bench.realwidth import decode_context, ms, step_seconds

if TYPE_CHECKING:
    from serving.bench.targets import LocalSetup

PRESET = "h200-flash-bench"
CONCURRENCY = (1, 8, 32, 64, 128)  # tests/gpu/realwidth.sh
KS = (0, 2)
ROUTINGS = ("real", "balanced")
# realwidth.sh's --prompt-words 512: the bench model's tokenizer (serving/bench_model) holds
# every golden word as one token, so 512 words are 512 tokens.
PROMPT_TOKENS = 512
MAX_TOKENS = 128  # realwidth.sh's --max-tokens
# One engine alone on the card: room for 128 requests' blocks at 12 layers (2 GiB held
# 21,888 tokens there, tests/gpu/realwidth.sh).
KV_CACHE_GIB = 16.0
ITERS, SAMPLES = 20, 5  # vLLM's defaults: 100 timed replays a case
TIMEOUT_S = 900  # one engine, with room for a fresh card's kernel compiles
# `vllm bench forward` without the console script (vLLM under PYTHONPATH has none).
VLLM_BENCH_FORWARD = ("-m", "vllm.entrypoints.cli.main", "bench", "forward")
_RUN_NAME = re.compile(r"forward-L(\d+)-k(\d+)-(\w+)")
# vllm/benchmarks/forward/main.py prints one line per case as it finishes.
_LOG_LINE = re.compile(
    r"\[forward\] (?P<case>\S+): (?P<reqs>\d+) reqs, (?P<tokens>\d+) tokens, "
    r"median (?P<median>[\d.]+) us, sample spread (?P<spread>[\d.]+)%"
)


@dataclass(frozen=True)
class ForwardRun:
    """One `vllm bench forward` invocation: one engine, one case per concurrency."""

    name: str
    layers: int
    k: int
    routing: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the caller's environment

    def shell(self) -> str:
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        prefix = ["env", *assignments] if assignments else []
        return " ".join(prefix + [shlex.quote(a) for a in self.command])


def run_name(layers: int, k: int, routing: str) -> str:
    return f"forward-L{layers}-k{k}-{routing}"


def case_spec(concurrency: int, k: int, kv_len: int) -> str:
    """vLLM's `NAME=[N*]Q[@K][:D]` (vllm/benchmarks/forward/shapes.py ``parse_case``): ``N``
    decode (k = 0) or verify requests of query ``1 + k`` at KV length ``K``, the query
    included."""
    drafts = f":{k}" if k else ""
    return f"c{concurrency}={concurrency}*{k + 1}@{kv_len}{drafts}"


def kv_len_jitter(prompt_tokens: int, max_tokens: int) -> float:
    """The fraction of the mean KV length that half the output spans: a served request's
    decode steps run from the prompt to the prompt + output."""
    return round((max_tokens / 2) / decode_context(prompt_tokens, max_tokens), 3)


def bench_layers(model_dir: str | Path, layers: int | None) -> int:
    """The depth to run: ``layers``, or the one the bench model at ``model_dir`` has."""
    from serving.bench_model import read_bench_model

    found = read_bench_model(model_dir)
    if layers is None:
        if found is None:
            raise ValueError(f"no bench model at {model_dir}: pass --layers to write one")
        return int(found["layers"])
    return layers


def bench_setup(
    model_dir: str | Path,
    layers: int,
    preset: str = PRESET,
    sets: Sequence[str] = (),
    kv_cache_gib: float = KV_CACHE_GIB,
) -> LocalSetup:
    """The preset at ``layers`` on the bench model at ``model_dir``, one engine on the card."""
    from serving.bench.targets import local_setup

    model = str(Path(model_dir).resolve())
    overrides = [f"model.bench.layers={layers}", f"model.source={model}", *sets]
    setup = local_setup(preset, overrides, engines=1, kv_cache_gib=kv_cache_gib)
    if setup.preset.model.bench is None:
        raise ValueError(f"preset {preset} has no bench model (model.bench)")
    return setup


def forward_runs(
    setup: LocalSetup,
    out: str | Path,
    *,
    ks: Iterable[int] = KS,
    concurrency: Iterable[int] = CONCURRENCY,
    routings: Iterable[str] = ROUTINGS,
    prompt_tokens: int = PROMPT_TOKENS,
    max_tokens: int = MAX_TOKENS,
    iters: int = ITERS,
    samples: int = SAMPLES,
    python: str = sys.executable,
    profile: bool = False,
) -> list[ForwardRun]:
    """The runs for the setup's depth, ``k`` outer and routing inner. Writes nothing."""
    from serving.bench.targets import environment, vllm_kwargs
    from serving.config.vllm_args import to_cli_args

    bench = setup.preset.model.bench
    assert bench is not None
    kv_len = decode_context(prompt_tokens, max_tokens)
    jitter = kv_len_jitter(prompt_tokens, max_tokens)
    out_dir = Path(out).resolve()
    runs = []
    for k in ks:
        engine = to_cli_args(vllm_kwargs(setup, k))
        env = environment(f"vllm-k{k}", setup, {})
        cases = [arg for c in concurrency for arg in ("--case", case_spec(c, k, kv_len))]
        for routing in routings:
            name = run_name(bench.layers, k, routing)
            cmd = [python, *VLLM_BENCH_FORWARD, *engine, *cases]
            cmd += ["--routing", routing, "--kv-len-jitter", str(jitter)]
            cmd += ["--iters", str(iters), "--samples", str(samples)]
            cmd += ["--output-json", str(out_dir / f"{name}.json")]
            if profile:
                cmd += ["--profile-dir", str(out_dir / f"{name}.profile")]
            runs.append(ForwardRun(name, bench.layers, k, routing, cmd, env))
    return runs


def prepare(setup: LocalSetup, runs: list[ForwardRun], out: str | Path) -> Path:
    """Write the bench model (unless it is there) and add ``runs`` to ``out/plan.json``;
    the plan's path."""
    from serving.bench_model.writer import ensure_bench_model

    bench = setup.preset.model.bench
    assert bench is not None
    ensure_bench_model(setup.model_dir, bench.shape, bench.layers, bench.experts)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = out_dir / "plan.json"
    old = json.loads(plan.read_text()) if plan.exists() else {}
    entries = {r["name"]: r for r in old.get("runs", [])}
    entries |= {r.name: {**asdict(r), "shell": r.shell()} for r in runs}
    plan.write_text(json.dumps({"runs": list(entries.values())}, indent=1))
    return plan


def run_all(runs: list[ForwardRun], out: str | Path, timeout_s: float = TIMEOUT_S) -> list[dict]:
    """Each run in turn with its log under ``out``; one that fails or runs out of time is
    recorded and the rest go on. Appends to ``out/status.jsonl``."""
    from serving.bench.local import stop_all

    out_dir = Path(out)
    statuses = []
    for run in runs:
        log = out_dir / f"{run.name}.log"
        print(f"[forward_compare] {run.name}: {run.shell()}", flush=True)
        began = time.monotonic()
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                run.command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **run.env},
                start_new_session=True,
            )
            try:
                rc: int | None = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                stop_all([proc], 30)
                rc = None
        status = {
            "name": run.name,
            "rc": rc,
            "timed_out": rc is None,
            "seconds": round(time.monotonic() - began, 1),
            "output": (out_dir / f"{run.name}.json").exists(),
        }
        print(f"[forward_compare] {json.dumps(status)}", flush=True)
        with (out_dir / "status.jsonl").open("a") as f:
            f.write(json.dumps(status) + "\n")
        statuses.append(status)
    return statuses


# --- reading results -------------------------------------------------------------------


@dataclass(frozen=True)
class ForwardCell:
    """One case of `vllm bench forward`: ``step_s`` is its median replay."""

    layers: int
    k: int
    routing: str
    concurrency: int
    step_s: float
    spread_pct: float
    num_tokens: int
    mean_kv_len: float | None
    timing_scope: str | None
    source: str  # the JSON, or its log where the run wrote none


def _cell_from_entry(layers: int, routing: str, entry: dict, source: str) -> ForwardCell:
    """An entry of the list vllm/benchmarks/forward/main.py writes (``--output-json``)."""
    requests = entry["requests"]
    rank0 = (entry.get("ranks") or [{}])[0] or {}
    latency = rank0.get("latency_us") or {}
    return ForwardCell(
        layers=layers,
        k=max((r.get("num_draft_tokens", 0) for r in requests), default=0),
        routing=rank0.get("routing") or routing,  # `auto` resolved, or a fallback to real
        concurrency=len(requests),
        step_s=entry["median_us"] / 1e6,
        spread_pct=float(latency.get("sample_spread_pct", float("nan"))),
        num_tokens=int(rank0.get("num_tokens") or sum(r["query_len"] for r in requests)),
        mean_kv_len=sum(r["kv_len"] for r in requests) / len(requests) if requests else None,
        timing_scope=rank0.get("timing_scope"),
        source=source,
    )


def cells_from_log(layers: int, k: int, routing: str, log: Path) -> list[ForwardCell]:
    """The cases a run printed before it stopped (it writes its JSON only at the end)."""
    cells = []
    for m in _LOG_LINE.finditer(log.read_text(errors="replace")):
        reqs, tokens = int(m["reqs"]), int(m["tokens"])
        cells.append(
            ForwardCell(
                layers=layers,
                k=k if tokens == reqs * (k + 1) else tokens // max(reqs, 1) - 1,
                routing=routing,
                concurrency=reqs,
                step_s=float(m["median"]) / 1e6,
                spread_pct=float(m["spread"]),
                num_tokens=tokens,
                mean_kv_len=None,
                timing_scope=None,
                source=log.name,
            )
        )
    return cells


def load_forward(dirs: Iterable[str | Path]) -> list[ForwardCell]:
    """Every `forward-L<layers>-k<k>-<routing>` result under ``dirs``: its JSON, else the
    case lines of its log."""
    cells: list[ForwardCell] = []
    for d in dirs:
        names = {
            p.stem
            for p in Path(d).iterdir()
            if p.suffix in (".json", ".log") and _RUN_NAME.fullmatch(p.stem)
        }
        for stem in sorted(names):
            m = _RUN_NAME.fullmatch(stem)
            assert m is not None
            layers, k, routing = int(m[1]), int(m[2]), m[3]
            path = Path(d) / f"{stem}.json"
            if path.exists():
                entries = json.loads(path.read_text())
                cells += [_cell_from_entry(layers, routing, e, path.name) for e in entries]
            else:
                cells += cells_from_log(layers, k, routing, Path(d) / f"{stem}.log")
    return cells


@dataclass(frozen=True)
class ServedCell:
    """One cell of the real-width bench: ``step_s`` is TPOT p50 x the acceptance length."""

    layers: int
    k: int
    concurrency: int
    step_s: float
    tpot_s: float
    acceptance_length: float
    tokens_per_s: float | None
    source: str


_TARGET = re.compile(r"vllm-k(\d+)")


def load_served(data: dict) -> dict[tuple[int, int, int], ServedCell]:
    """(layers, k, concurrency) -> the served cell, from docs/bench-realwidth's summary
    (``runs.<run>.cells.vllm-kK.<c>``: TPOT in ms, output tok/s per round, of which the
    best is taken: a round that paid JIT compiles is the slower) or from
    ``python -m serving.bench.realwidth``'s realwidth.json (``rows[].measured.<depth>``).
    Where two runs hold one cell the first is kept."""
    cells: dict[tuple[int, int, int], ServedCell] = {}
    for run_name_, run in (data.get("runs") or {}).items():
        layers = int(run["layers"])
        for target, by_c in (run.get("cells") or {}).items():
            if not (m := _TARGET.fullmatch(target)):
                continue  # the guard, vLLM's batch table: no one k
            k = int(m[1])
            for c, cell in by_c.items():
                length = cell.get("acceptance_length") or 1.0
                entry = {
                    "tpot_s": {"p50": cell["tpot_p50_ms"] / 1e3},
                    "spec_decode": {"acceptance_length": length},
                }
                step = step_seconds(entry)
                rounds = cell.get("tok_s_per_round") or []
                if step is None:
                    continue
                cells.setdefault(
                    (layers, k, int(c)),
                    ServedCell(
                        layers,
                        k,
                        int(c),
                        step,
                        cell["tpot_p50_ms"] / 1e3,
                        length,
                        max(rounds) if rounds else None,
                        run_name_,
                    ),
                )
    for row in data.get("rows") or []:
        for depth, m in (row.get("measured") or {}).items():
            key = (int(depth), int(row["k"]), int(row["concurrency"]))
            cells.setdefault(
                key,
                ServedCell(
                    *key,
                    m["step_s"],
                    m["tpot_s"],
                    m.get("acceptance_length") or 1.0,
                    m.get("tokens_per_s"),
                    "realwidth.json",
                ),
            )
    return cells


def compare(forward: list[ForwardCell], served: dict[tuple[int, int, int], ServedCell]) -> dict:
    """Per forward cell: its step, the tok/s it implies at the served acceptance length (all
    drafts accepted, k + 1 a step, where no served cell matches), and the served step and
    tok/s with their ratios to it."""
    rows = []
    for f in sorted(forward, key=lambda x: (x.layers, x.k, x.routing, x.concurrency)):
        s = served.get((f.layers, f.k, f.concurrency))
        length = s.acceptance_length if s else float(f.k + 1)
        row: dict[str, Any] = {
            **asdict(f),
            "tokens_per_step": length,
            "tokens_per_step_from": "served" if s else "all drafts accepted",
            "forward_tokens_per_s": f.concurrency * length / f.step_s,
        }
        if s:
            row["served"] = asdict(s)
            row["served_over_forward_step"] = s.step_s / f.step_s
            row["host_and_sampling_s"] = s.step_s - f.step_s
            if s.tokens_per_s:
                row["forward_over_served_tokens_per_s"] = (
                    row["forward_tokens_per_s"] / s.tokens_per_s
                )
        rows.append(row)
    return {
        "what": "vllm bench forward's median forward step (target + drafter, drafts all "
        "accepted; no sampling, scheduler or host step) against the served step "
        "(TPOT p50 x acceptance length) at the same concurrency",
        "units": "s for *_s",
        "rows": rows,
    }


def markdown(result: dict) -> str:
    lines = [
        "| layers | k | routing | c | forward ms | forward tok/s | served step ms "
        "| served tok/s | AL | served / forward step | served - forward ms | spread % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    for r in result["rows"]:
        s = r.get("served") or {}
        tok = s.get("tokens_per_s")
        ratio = r.get("served_over_forward_step")
        lines.append(
            f"| {r['layers']} | {r['k']} | {r['routing']} | {r['concurrency']} "
            f"| {ms(r['step_s'])} | {r['forward_tokens_per_s']:.0f} | {ms(s.get('step_s'))} "
            f"| {f'{tok:.0f}' if tok else '-'} | {r['tokens_per_step']:.2f} "
            f"| {f'{ratio:.2f}' if ratio else '-'} | {ms(r.get('host_and_sampling_s'))} "
            f"| {r['spread_pct']:.2f} |"
        )
    return "\n".join(lines) + "\n"


# --- command line ----------------------------------------------------------------------


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", required=True, help="the bench model (written if absent)")
    p.add_argument("--out", required=True, help="where results, logs and plan.json go")
    p.add_argument("--layers", type=positive_int, help="depth (default: the model dir's)")
    p.add_argument("--preset", default=PRESET)
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--k", type=int, nargs="+", default=list(KS), dest="ks")
    p.add_argument("--concurrency", type=positive_int, nargs="+", default=list(CONCURRENCY))
    p.add_argument(
        "--routing", nargs="+", default=list(ROUTINGS), choices=["auto", "real", "balanced", "zipf"]
    )
    p.add_argument("--prompt-tokens", type=positive_int, default=PROMPT_TOKENS)
    p.add_argument("--max-tokens", type=positive_int, default=MAX_TOKENS)
    p.add_argument("--kv-cache-gib", type=non_negative_float, default=KV_CACHE_GIB)
    p.add_argument("--iters", type=positive_int, default=ITERS)
    p.add_argument("--samples", type=positive_int, default=SAMPLES)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--profile", action="store_true", help="vLLM's --profile-dir per run")


def _setup_and_runs(args: argparse.Namespace) -> tuple[LocalSetup, list[ForwardRun]]:
    layers = bench_layers(args.model_dir, args.layers)
    setup = bench_setup(args.model_dir, layers, args.preset, args.set, args.kv_cache_gib)
    runs = forward_runs(
        setup,
        args.out,
        ks=args.ks,
        concurrency=args.concurrency,
        routings=args.routing,
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
        iters=args.iters,
        samples=args.samples,
        python=args.python,
        profile=args.profile,
    )
    return setup, runs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m serving.bench.forward_compare")
    sub = p.add_subparsers(dest="cmd", required=True)
    _add_run_arguments(
        sub.add_parser("commands", help="write the model and plan.json; print NAME<TAB>COMMAND")
    )
    run = sub.add_parser("run", help="run every command in turn (one failing: the rest go on)")
    _add_run_arguments(run)
    run.add_argument("--timeout-s", type=positive_int, default=TIMEOUT_S)
    cmp = sub.add_parser("compare", help="the forward results beside the real-width bench's")
    cmp.add_argument("--forward", nargs="+", required=True, metavar="DIR")
    cmp.add_argument("--realwidth", required=True, metavar="JSON")
    cmp.add_argument("--out", help="write compare.json and compare.md here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "compare":
        served = load_served(json.loads(Path(args.realwidth).read_text()))
        result = compare(load_forward(args.forward), served)
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "compare.json").write_text(json.dumps(result, indent=1))
            (out / "compare.md").write_text(markdown(result))
        print(markdown(result), end="")
        return 0 if result["rows"] else 1
    try:
        setup, runs = _setup_and_runs(args)
        prepare(setup, runs, args.out)
    except ValueError as exc:  # no model and no depth, a preset error, another model there
        print(f"forward_compare: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "commands":
        for r in runs:
            print(f"{r.name}\t{r.shell()}")
        return 0
    statuses = run_all(runs, args.out, args.timeout_s)
    return 0 if all(s["rc"] == 0 for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
