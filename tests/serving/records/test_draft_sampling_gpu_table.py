"""speculation.md's GPU draft-sampling table renders each run's own cells."""

import copy
import json

from serving.records import draft_sampling_gpu_table
from serving.records.store import ROOT


def _runs() -> list[dict]:
    return [json.loads((ROOT / p).read_text()) for p in draft_sampling_gpu_table.SUMMARIES]


def test_each_cell_of_each_run_is_a_row_with_its_ratio():
    runs = copy.deepcopy(_runs())
    cell = runs[-1]["cells"]["c8"]
    cell["greedy"]["output_tok_s"], cell["probabilistic"]["output_tok_s"] = 1000.0, 950.0
    cell["probabilistic_over_greedy"] = 0.95
    rows = [line for line in draft_sampling_gpu_table.table(runs).splitlines() if "| 8 |" in line]
    assert rows[-1].endswith("| 1 | 8 | 1000.0 | 950.0 | 0.950 | 2.03 / 2.03 |")
    count = sum(len(run["cells"]) for run in runs)
    assert draft_sampling_gpu_table.table(runs).count("\n| NVIDIA") == count


def test_every_summary_is_named_with_its_commit_and_command():
    text = draft_sampling_gpu_table.table()
    for path, run in zip(draft_sampling_gpu_table.SUMMARIES, _runs(), strict=True):
        assert f"`{path}` (vLLM {run['versions']['vllm']}, commit {run['commit']}" in text
