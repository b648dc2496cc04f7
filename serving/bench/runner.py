"""Interleaved comparison: every round, every concurrency level, every target in a
rotating order, so slow drifts of a shared machine hit all targets alike. Ours because
`vllm bench serve` measures one target per run; each level's requests and figures are
vLLM's (``serving.bench.load``, ``serving.bench.stats``).

A run may have a deadline: past it the remaining cells are skipped (the report says how
many), so a run with a wall-clock limit still ends with its report written. Rounds are
the outer loop, so a run cut short still holds every level (with fewer rounds)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput

from serving.bench.load import Target, run_level, settled_scrape
from serving.bench.stages import jit_monitor_kernels
from serving.bench.stats import acceptance, spec_decode_delta, summarize
from serving.config.jit_cache import ROOT_ENV
from serving.monitoring.metrics_page import Samples, scrape


@dataclass
class BenchPlan:
    concurrency: list[int]
    requests_per_level: int
    rounds: int
    max_tokens: int
    prompts: list[str]
    chat: bool = False
    temperature: float = 0.0  # greedy unless asked: texts comparable across targets
    warmup_requests: int = 2
    requests_per_stream: int = 0  # each level sends at least this many per concurrent stream
    # The known greedy text of a prompt (the golden model's), to count wrong outputs.
    expected: Callable[[str], str] | None = None

    def requests_at(self, concurrency: int) -> int:
        """Requests per round at ``concurrency``: a level of 128 streams needs more than
        16 requests to hold 128 in flight."""
        return max(self.requests_per_level, self.requests_per_stream * concurrency)

    def summary(self) -> dict:
        return {
            "concurrency": self.concurrency,
            "requests_per_level": self.requests_per_level,
            "requests_per_stream": self.requests_per_stream,
            "requests_by_concurrency": {c: self.requests_at(c) for c in self.concurrency},
            "rounds": self.rounds,
            "max_tokens": self.max_tokens,
            "chat": self.chat,
            "temperature": self.temperature,
        }


@dataclass
class _Cell:
    outputs: list[RequestFuncOutput] = field(default_factory=list)
    wall: float = 0.0
    rounds: int = 0
    spec: list[dict] = field(default_factory=list)
    wrong_text: int = 0
    round_tokens_per_s: list[float] = field(default_factory=list)  # how far rounds agree
    round_jit_compiles: list[int | None] = field(default_factory=list)  # None: no log read
    # Kernel files each round added to the JIT cache, per tool (None: no cache root set).
    round_cache_kernels_added: list[dict[str, int] | None] = field(default_factory=list)


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _merge_spec(deltas: list[dict]) -> dict | None:
    if not deltas:
        return None
    accepted_at: dict[str, float] = {}
    for d in deltas:
        for position, rate in d["acceptance_by_position"].items():
            accepted_at[position] = accepted_at.get(position, 0.0) + (rate or 0) * d["drafts"]
    return acceptance(
        sum(d["drafts"] for d in deltas),
        sum(d["draft_tokens"] for d in deltas),
        sum(d["accepted_tokens"] for d in deltas),
        dict(sorted(accepted_at.items(), key=lambda item: int(item[0]))),
    )


def _log_size(target: Target) -> int | None:
    if not target.log_path:
        return None
    try:
        return os.path.getsize(target.log_path)
    except OSError:
        return None


def _compiled_since(target: Target, offset: int | None) -> list[str] | None:
    """Kernels vLLM's JIT monitor logged since ``offset`` in the target's log (a cell's
    compiles: each stalls the batch it happens in); None where no log is read."""
    if offset is None or not target.log_path:
        return None
    try:
        with open(target.log_path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    return jit_monitor_kernels(text)


def cache_kernels(environ: dict[str, str] | os._Environ = os.environ) -> dict[str, int] | None:
    """Kernel files per tool in the JIT cache the local engines share ($DSV4_JIT_CACHE, set
    by `serving.config.jit_cache exports`); None where no cache root is set. vLLM's JIT
    monitor sees Triton's and TileLang's compiles, not DeepGEMM's: files on disk count all."""
    root = environ.get(ROOT_ENV)
    if not root or not os.path.isdir(root):
        return None
    from model_overrides.jit_pool.manifest import count_kernels

    return count_kernels(root)[0]


def kernels_added(before: dict[str, int] | None, after: dict[str, int] | None) -> dict | None:
    if before is None or after is None:
        return None
    return {tool: n - before.get(tool, 0) for tool, n in after.items() if n > before.get(tool, 0)}


class BenchRun:
    """One run of a plan; ``result()`` reports what is measured so far (also after an
    interruption). ``deadline``: a ``time.monotonic()`` past which no cell starts.
    ``on_round``: called with the result so far after each round."""

    def __init__(
        self,
        targets: list[Target],
        plan: BenchPlan,
        progress: Callable[[str], None] = _progress,
        deadline: float | None = None,
        on_round: Callable[[dict], None] | None = None,
    ) -> None:
        self.targets, self.plan, self.progress = targets, plan, progress
        self.deadline, self.on_round = deadline, on_round
        self.cells: dict[tuple[str, int], _Cell] = {}
        self.done = 0
        self.skipped = 0

    @property
    def total_cells(self) -> int:
        return len(self.plan.concurrency) * self.plan.rounds * len(self.targets)

    def run(self) -> dict:
        plan = self.plan
        top = max(plan.concurrency)
        for target in self.targets:
            self.progress(f"warm-up {target.name}")
            asyncio.run(run_level(target, plan.prompts[: plan.warmup_requests], 1, 8, plan.chat))
            if top > 8:  # one wave of the widest batch, so its first cell is not the first
                wave = [plan.prompts[i % len(plan.prompts)] for i in range(top)]
                asyncio.run(run_level(target, wave, top, 8, plan.chat))
        started = time.monotonic()
        for round_ in range(plan.rounds):  # rounds outermost: a cut run keeps every level
            shift = round_ % len(self.targets)
            for concurrency in plan.concurrency:
                for target in self.targets[shift:] + self.targets[:shift]:
                    if self.deadline is not None and time.monotonic() > self.deadline:
                        self.skipped += 1
                        continue
                    self._cell(target, concurrency, round_, started)
            if self.on_round:
                self.on_round(self.result())
        if self.skipped:
            self.progress(f"time budget spent: {self.skipped} of {self.total_cells} cells skipped")
        return self.result()

    def _cell(self, target: Target, concurrency: int, round_: int, started: float) -> None:
        plan = self.plan
        count = plan.requests_at(concurrency)
        prompts = [plan.prompts[(round_ * count + i) % len(plan.prompts)] for i in range(count)]
        before = self._scrape(target)
        log_offset = _log_size(target)
        cache_before = cache_kernels()
        outputs, wall = asyncio.run(
            run_level(target, prompts, concurrency, plan.max_tokens, plan.chat, plan.temperature)
        )
        cell = self.cells.setdefault((target.name, concurrency), _Cell())
        cell.outputs += outputs
        cell.wall += wall
        cell.rounds += 1
        if plan.expected and not plan.temperature:  # a known text is the greedy one
            cell.wrong_text += sum(
                o.success and o.generated_text != plan.expected(p)
                for p, o in zip(prompts, outputs, strict=True)
            )
        self.done += 1
        tokens = sum(o.output_tokens for o in outputs if o.success)
        failed = sum(not o.success for o in outputs)
        rate = tokens / wall if wall > 0 else 0.0
        cell.round_tokens_per_s.append(round(rate, 1))
        compiled = _compiled_since(target, log_offset)
        cell.round_jit_compiles.append(None if compiled is None else len(compiled))
        added = kernels_added(cache_before, cache_kernels())
        cell.round_cache_kernels_added.append(added)
        self.progress(
            f"c={concurrency} round {round_ + 1}/{plan.rounds} {target.name}: "
            f"{rate:.1f} tok/s, {failed} failed"
            f"{f', {len(compiled)} kernels compiled during it' if compiled else ''}"
            f"{f', kernel files added to the JIT cache {added}' if added else ''} "
            f"({time.monotonic() - started:.0f} s, cell {self.done}/{self.total_cells})"
        )
        if before is None:
            return
        try:
            after = settled_scrape(
                target.metrics_url, before, target.settle_period_s, target.settle_timeout_s
            )
        except (httpx.HTTPError, OSError) as exc:
            self.progress(f"{target.name}: /metrics unreadable after the level ({exc})")
            return
        delta = spec_decode_delta(before, after, model=target.model)
        if delta["drafts"]:
            cell.spec.append(delta)

    def _scrape(self, target: Target) -> Samples | None:
        if not target.metrics_url:
            return None
        try:
            return scrape(target.metrics_url)
        except (httpx.HTTPError, OSError) as exc:  # a dead server: its requests fail too
            self.progress(f"{target.name}: /metrics unreadable ({exc})")
            return None

    def result(self) -> dict:
        levels = []
        for (name, concurrency), cell in list(self.cells.items()):
            summary = summarize(cell.outputs, cell.wall)
            summary.update(
                target=name,
                concurrency=concurrency,
                rounds=cell.rounds,
                round_tokens_per_s=cell.round_tokens_per_s,
                round_jit_compiles=cell.round_jit_compiles,
                round_cache_kernels_added=cell.round_cache_kernels_added,
                spec_decode=_merge_spec(cell.spec),
            )
            if self.plan.expected:
                summary["wrong_text"] = cell.wrong_text
            levels.append(summary)
        plan = self.plan.summary()
        plan["cells"] = {"total": self.total_cells, "done": self.done, "skipped": self.skipped}
        return {"plan": plan, "targets": [t.name for t in self.targets], "levels": levels}
