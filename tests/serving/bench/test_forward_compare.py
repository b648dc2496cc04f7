"""`vllm bench forward` beside the real-width bench (serving/bench/forward_compare.py): the
command lines against vLLM 0.34's own parser and source, and the comparison of the two
result formats.

The forward samples in data/forward_compare/ are built to what vLLM 0.34 writes, not
recorded on a GPU (the numbers are made up): the list ``main`` in
vllm/benchmarks/forward/main.py dumps with ``--output-json`` (one entry per case: ``case``,
``requests`` as ``asdict(BenchRequest)``, ``median_us``, ``ranks``), each rank's dict from
``run_case`` (``num_tokens``, ``kv_blocks``, ``routing`` and the bench's result: capture.py
``ForwardBench.run``/``_make_forward``/``_capture_and_time``/``_time``, speculator.py
``DraftBench.check``), with ``--iters 2 --samples 2``; the log sample holds the line
``main`` prints per case. The tests below hold the samples' keys to that source, read with
``ast`` from the matrix's side environment of vLLM 0.34 (built once when missing: these
tests are slow-tier, as the matrix is); the realwidth sample is the recorded
docs/bench-realwidth/vllm034-h100-mtp.json.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest

from serving.bench import forward_compare as fc

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parent / "data" / "forward_compare"
REALWIDTH = ROOT / "docs" / "bench-realwidth" / "vllm034-h100-mtp.json"
FORWARD = "vllm/benchmarks/forward"


def side_034():
    """vLLM 0.34.0's side environment of the version matrix, built once when missing
    (`python -m model_overrides matrix --version 0.34.0`; the matrix tests build it too)."""
    from model_overrides.compat import vllm_matrix

    v = vllm_matrix.SUPPORTED["0.34.0"]
    vllm_matrix.ensure_environment(v)
    return v


def tree(rel: str) -> ast.Module:
    """A file of vLLM 0.34.0's tree, parsed."""
    from model_overrides.compat.vllm_matrix import SIDE_ROOT

    (root,) = (SIDE_ROOT / side_034().vllm).glob("lib/python3*/site-packages")
    return ast.parse((root / rel).read_text())


def definition(module: ast.Module, qualname: str) -> ast.ClassDef | ast.FunctionDef:
    """A function, a class or ``Class.method`` of ``module``."""
    node: ast.AST = module
    for part in qualname.split("."):
        node = next(
            n
            for n in getattr(node, "body", [])
            if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == part
        )
    assert isinstance(node, ast.ClassDef | ast.FunctionDef)
    return node


def dict_keys(node: ast.Dict) -> set[str]:
    """A dict display's literal keys (``**`` unpackings left out)."""
    return {k.value for k in node.keys if isinstance(k, ast.Constant)}


def returned_dict(fn: ast.AST) -> set[str]:
    returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return)]
    return dict_keys(next(r for r in returns if isinstance(r, ast.Dict)))


def forward_options() -> dict[str, list[str] | None]:
    """`vllm bench forward`'s own options (vllm/benchmarks/forward/main.py add_cli_args):
    option -> its choices."""
    fn = definition(tree(f"{FORWARD}/main.py"), "add_cli_args")
    options: dict[str, list[str] | None] = {}
    for call in ast.walk(fn):
        if isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument":
            choices = next((k.value for k in call.keywords if k.arg == "choices"), None)
            options[call.args[0].value] = (  # type: ignore[attr-defined]
                ast.literal_eval(choices) if choices is not None else None
            )
    return options


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bench") / "flash-bench-3"
    from serving.bench_model.writer import write_bench_model

    write_bench_model(path, "flash", 3)
    return path


@pytest.fixture(scope="module")
def runs(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[fc.ForwardRun]:
    setup = fc.bench_setup(model_dir, fc.bench_layers(model_dir, None))
    return fc.forward_runs(setup, tmp_path_factory.mktemp("out"), python="python3")


# --- the command lines -----------------------------------------------------------------


def test_runs_cover_every_k_and_routing_with_a_case_per_concurrency(runs, model_dir):
    assert [r.name for r in runs] == [
        "forward-L3-k0-real",
        "forward-L3-k0-balanced",
        "forward-L3-k2-real",
        "forward-L3-k2-balanced",
    ]
    k2 = runs[2].command
    assert k2[1:6] == ["-m", "vllm.entrypoints.cli.main", "bench", "forward", "--kv-cache-dtype"]
    cases = [k2[i + 1] for i, a in enumerate(k2) if a == "--case"]
    # 512 prompt tokens + half of 128 out; verify = 1 + 2 drafts.
    assert cases == [f"c{c}={c}*3@576:2" for c in (1, 8, 32, 64, 128)]
    assert k2[k2.index("--kv-len-jitter") + 1] == "0.111"
    assert k2[k2.index("--model") + 1] == str(model_dir.resolve())
    spec = json.loads(k2[k2.index("--speculative-config") + 1])
    assert spec["method"] == "mtp" and spec["num_speculative_tokens"] == 2
    assert "--speculative-config" not in runs[0].command
    assert runs[0].command[runs[0].command.index("--case") + 1] == "c1=1*1@576"
    # The preset's engine arguments, as vllm-k0/k2 were served with them.
    for flag, value in [("--block-size", "256"), ("--load-format", "dummy")]:
        assert k2[k2.index(flag) + 1] == value
    assert k2[-2:] == ["--output-json", k2[-1]] and k2[-1].endswith("/forward-L3-k2-real.json")


@pytest.mark.matrix
def test_options_are_vllm_034s_and_cases_match_its_grammar(runs):
    options = forward_options()
    for flag in ("--case", "--routing", "--kv-len-jitter", "--iters", "--samples"):
        assert flag in options, flag
    assert "--output-json" in options and "--profile-dir" in options
    assert {r.routing for r in runs} <= set(options["--routing"] or [])
    shapes = tree(f"{FORWARD}/shapes.py")
    pattern = next(
        n.value.args[0].value
        for n in shapes.body
        if isinstance(n, ast.Assign) and n.targets[0].id == "_REQ_RE"  # type: ignore[attr-defined]
    )
    for run in runs:
        for i, arg in enumerate(run.command):
            if arg == "--case":
                body = run.command[i + 1].partition("=")[2]
                assert re.fullmatch(pattern, body), body


@pytest.mark.matrix
def test_vllm_034_parses_every_command_line(runs):
    """Through vLLM 0.34's CLI in the matrix's side environment."""
    from model_overrides.compat import vllm_matrix

    v = side_034()
    argvs = [r.command[r.command.index("vllm.entrypoints.cli.main") + 1 :] for r in runs]
    proc = subprocess.run(
        [str(v.python), "-m", "tests.support.bench_forward_args"],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env=vllm_matrix.environment(v),
        cwd=ROOT,
        timeout=300,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("FORWARD_ARGS ")), None)
    assert line, proc.stderr[-2000:]
    parsed = json.loads(line.removeprefix("FORWARD_ARGS "))
    assert len(parsed) == len(runs)
    for run, got in zip(runs, parsed, strict=True):
        assert got["bench"]["routing"] == run.routing
        assert got["bench"]["kv_len_jitter"] == pytest.approx(0.111)
        assert [c["count"] for c in got["cases"]] == [1, 8, 32, 64, 128]
        first = got["cases"][0]["requests"][0]
        assert first == {
            "query_len": run.k + 1,
            "kv_len": 576,
            "num_draft_tokens": run.k,
            "chunked": False,
        }
        engine = got["engine"]
        assert engine["load_format"] == "dummy" and engine["enable_prefix_caching"] is False
        assert engine["max_num_seqs"] == 128 and engine["block_size"] == 256
        assert (engine["speculative_config"] is not None) == bool(run.k)
        assert got["executor"] == "external_launcher"


def test_commands_write_the_model_and_a_plan(tmp_path, capsys):
    model, out = tmp_path / "flash-bench-6", tmp_path / "out"
    argv = ["commands", "--model-dir", str(model), "--out", str(out), "--k", "2"]
    assert fc.main([*argv, "--routing", "real"]) == 2  # no model there and no depth
    assert "--layers" in capsys.readouterr().err
    assert fc.main([*argv, "--layers", "6", "--routing", "real"]) == 0
    name, shell = capsys.readouterr().out.strip().split("\t")
    assert name == "forward-L6-k2-real"
    # The bench model's engine must not start without its dummy weights (the preset's env).
    assert shell.startswith(f"env DSV4_REQUIRE_PATCHES=dsv4-dummy-weights {fc.sys.executable} ")
    assert json.loads((model / "config.json").read_text())["num_hidden_layers"] == 6
    plan = json.loads((out / "plan.json").read_text())
    assert [r["name"] for r in plan["runs"]] == ["forward-L6-k2-real"]
    # The depth is the model's from then on; a second depth adds to the plan.
    assert fc.main([*argv, "--routing", "balanced"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [r["name"] for r in plan["runs"]] == ["forward-L6-k2-real", "forward-L6-k2-balanced"]


# --- the result formats ----------------------------------------------------------------


@pytest.mark.matrix
def test_forward_sample_has_the_keys_vllm_034_writes():
    main = tree(f"{FORWARD}/main.py")
    entry_keys = dict_keys(
        next(
            n.args[0]
            for n in ast.walk(definition(main, "main"))
            if isinstance(n, ast.Call)
            and getattr(n.func, "attr", "") == "append"
            and isinstance(n.args[0], ast.Dict)
        )
    )
    capture = tree(f"{FORWARD}/capture.py")
    result_keys = set()
    for n in ast.walk(definition(capture, "ForwardBench")):
        if (
            isinstance(n, ast.Subscript)
            and getattr(n.value, "attr", "") == "result"
            and isinstance(n.slice, ast.Constant)
        ):
            result_keys.add(n.slice.value)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "update":
            result_keys |= {k.arg for k in n.keywords if k.arg}
    rank_keys = returned_dict(definition(main, "run_case")) | result_keys
    latency_keys = returned_dict(definition(capture, "ForwardBench._time"))
    compare_keys = returned_dict(definition(capture, "_compare"))
    drafter_keys = returned_dict(definition(tree(f"{FORWARD}/speculator.py"), "DraftBench.check"))
    request_fields = {
        n.target.id  # type: ignore[attr-defined]
        for n in definition(tree(f"{FORWARD}/shapes.py"), "BenchRequest").body
        if isinstance(n, ast.AnnAssign)
    }
    for path in DATA.glob("*.json"):
        for entry in json.loads(path.read_text()):
            assert set(entry) == entry_keys
            assert all(set(r) == request_fields for r in entry["requests"])
            rank = entry["ranks"][0]
            drafts = entry["requests"][0]["num_draft_tokens"]
            # No --profile-dir: no profile; a drafter only where the case drafts.
            assert set(rank) == rank_keys - {"profile"} - (set() if drafts else {"drafter"})
            assert set(rank["latency_us"]) == latency_keys
            assert set(rank["graph_vs_eager"]) == set(rank["eager_repeat"]) == compare_keys
            if drafts:
                assert set(rank["drafter"]) == drafter_keys
            assert entry["median_us"] == rank["latency_us"]["median"]
            assert rank["latency_us"]["count"] == len(rank["latency_us"]["samples_us"]) == 4


@pytest.mark.matrix
def test_log_sample_matches_the_line_vllm_034_prints():
    main = ast.unparse(definition(tree(f"{FORWARD}/main.py"), "main"))
    assert "reqs, " in main and "tokens, median" in main and "us, sample spread" in main
    cells = fc.cells_from_log(6, 0, "balanced", DATA / "forward-L6-k0-balanced.log")
    assert [(c.concurrency, c.k, c.step_s) for c in cells] == [
        (1, 0, pytest.approx(1175.3e-6)),
        (8, 0, pytest.approx(1650.9e-6)),
    ]


def test_compare_reads_both_formats_side_by_side():
    served = fc.load_served(json.loads(REALWIDTH.read_text()))
    # docs: 6 layers, k = 2, c = 8: TPOT 3.5 ms, acceptance length 2.01, 1935.2 tok/s.
    cell = served[(6, 2, 8)]
    assert cell.step_s == pytest.approx(3.5e-3 * 2.01) and cell.tokens_per_s == 1935.2
    assert served[(3, 0, 8)].tokens_per_s == 3320.3  # the better of its two rounds
    assert (3, 1, 1) in served and not any(k > 3 for _, k, _ in served)  # the guard: no k

    forward = fc.load_forward([DATA])
    assert {(c.routing, c.k, c.source) for c in forward} == {
        ("real", 0, "forward-L6-k0-real.json"),
        ("real", 2, "forward-L6-k2-real.json"),
        ("balanced", 0, "forward-L6-k0-balanced.log"),
    }
    result = fc.compare(forward, served)
    rows = {(r["routing"], r["k"], r["concurrency"]): r for r in result["rows"]}
    assert len(rows) == 6
    k2 = rows[("real", 2, 8)]
    assert k2["step_s"] == pytest.approx(2410.8e-6)
    assert k2["mean_kv_len"] == pytest.approx(585.125)
    assert k2["timing_scope"] == "target_and_drafter"
    assert k2["tokens_per_step"] == 2.01 and k2["tokens_per_step_from"] == "served"
    assert k2["forward_tokens_per_s"] == pytest.approx(8 * 2.01 / 2410.8e-6)
    assert k2["served_over_forward_step"] == pytest.approx(3.5e-3 * 2.01 / 2410.8e-6)
    assert k2["host_and_sampling_s"] == pytest.approx(3.5e-3 * 2.01 - 2410.8e-6)
    k0 = rows[("real", 0, 1)]
    assert k0["served_over_forward_step"] == pytest.approx(2.14e-3 / 1180.2e-6)
    assert k0["forward_over_served_tokens_per_s"] == pytest.approx((1 / 1180.2e-6) / 437.7)
    table = fc.markdown(result)
    assert table.count("\n") == 2 + 6
    assert "| 6 | 2 | real | 8 | 2.41 | 6670 | 7.03 | 1935 | 2.01 | 2.92 | 4.62 | 0.01 |" in table


def test_compare_reads_the_realwidth_tools_output_and_flags_unmatched_cells():
    fit = {
        "rows": [
            {
                "k": 2,
                "concurrency": 8,
                "measured": {
                    "6": {
                        "step_s": 0.007,
                        "tpot_s": 0.0035,
                        "ttft_s": 0.07,
                        "tokens_per_s": 1900.0,
                        "acceptance_length": 2.0,
                    }
                },
            }
        ]
    }
    served = fc.load_served(fit)
    assert served[(6, 2, 8)].step_s == 0.007 and served[(6, 2, 8)].source == "realwidth.json"
    result = fc.compare(fc.load_forward([DATA]), served)
    c1 = next(r for r in result["rows"] if r["k"] == 2 and r["concurrency"] == 1)
    # No served cell: the forward step's tok/s with every draft accepted, nothing beside it.
    assert c1["tokens_per_step"] == 3.0 and c1["tokens_per_step_from"] == "all drafts accepted"
    assert "served" not in c1 and "| - | - | 3.00 | - | - |" in fc.markdown(result)


def test_compare_cli_writes_json_and_markdown(tmp_path, capsys):
    argv = ["compare", "--forward", str(DATA), "--realwidth", str(REALWIDTH)]
    assert fc.main([*argv, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (tmp_path / "compare.md").read_text()
    assert len(json.loads((tmp_path / "compare.json").read_text())["rows"]) == 6
    empty = tmp_path / "empty"
    empty.mkdir()
    assert fc.main(["compare", "--forward", str(empty), "--realwidth", str(REALWIDTH)]) == 1
