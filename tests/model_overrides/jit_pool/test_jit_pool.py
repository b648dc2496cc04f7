"""The compile pool: jobs described in one process and compiled by worker processes.

vLLM's JIT owners (TileLang, DeepGEMM) compile only on a GPU (the GPU run is in
docs/cold-start.md); here the pool runs real worker processes on a probe owner that is
built and compiled the way the pool builds vLLM's (tests/support/jit_pool_probe.py)."""

import pickle

import pytest

from model_overrides.jit_pool import default_jobs, run_pool
from model_overrides.jit_pool.jobs import CompileJob, JobSet, run_job
from model_overrides.jit_pool.pool import JOBS_ENV, read_ledger
from model_overrides.registry import REGISTRY
from tests.support.jit_pool_probe import OUT_ENV, CompileProbe

OWNER = "tests.support.jit_pool_probe:CompileProbe"


def _jobs(*keys: CompileProbe.CompileKey) -> JobSet:
    return JobSet([CompileJob("jit_key", OWNER, pickle.dumps(k), repr(k)) for k in keys])


@pytest.fixture
def out(tmp_path, monkeypatch):
    monkeypatch.setenv(OUT_ENV, str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


def _compiled(out) -> dict[str, str]:
    """key name -> the pid of the process that compiled it."""
    return dict(p.name.split(".") for p in out.iterdir())


def test_workers_share_the_jobs_and_each_key_compiles_once(out, tmp_path):
    keys = [CompileProbe.CompileKey(f"k{i}", seconds=0.3) for i in range(6)]
    report = run_pool(_jobs(*keys), 3, tmp_path / "lock")
    compiled = _compiled(out)
    assert sorted(compiled) == [f"k{i}" for i in range(6)]
    assert len(set(compiled.values())) > 1  # spread over processes, none compiled twice
    assert report.by_kind == {"jit_key": 6} and not report.failed and report.not_run == 0
    assert "pre-compiled 6 jobs (6 jit_key) on 3 processes" in report.line()


def test_a_failed_key_is_reported_and_the_rest_compile(out, tmp_path):
    keys = [CompileProbe.CompileKey("good"), CompileProbe.CompileKey("bad", fail=True)]
    report = run_pool(_jobs(*keys), 2, tmp_path / "lock")
    assert sorted(_compiled(out)) == ["good"]
    assert [f.error for f in report.failed] == ["RuntimeError: cannot compile bad"]
    assert "1 failed" in report.line()


def test_a_job_set_compiled_once_is_not_compiled_again(out, tmp_path):
    jobs = _jobs(CompileProbe.CompileKey("once"))
    assert not run_pool(jobs, 2, tmp_path / "lock", stamp="node").skipped
    (out / next(out.iterdir()).name).unlink()
    again = run_pool(jobs, 2, tmp_path / "lock", stamp="node")  # another rank, after the first
    assert again.skipped and not list(out.iterdir())
    assert again.line().startswith("[dsv4-jit] pre-compile skipped")


def test_only_the_jobs_the_ledger_lacks_are_compiled(out, tmp_path):
    """An engine from an imported cache: the warm's jobs are in the ledger, a new one is not;
    a failed job stays out of the ledger and is tried again."""
    warm = [CompileProbe.CompileKey("a"), CompileProbe.CompileKey("b", fail=True)]
    warm_jobs = _jobs(*warm)
    run_pool(warm_jobs, 2, tmp_path / "lock", stamp="node")
    assert read_ledger(tmp_path / "lock", "node") == {warm_jobs.jobs[0].fingerprint()}
    for path in out.iterdir():
        path.unlink()
    engine = [
        CompileProbe.CompileKey("a"),
        CompileProbe.CompileKey("b"),
        CompileProbe.CompileKey("c"),
    ]
    report = run_pool(_jobs(*engine), 2, tmp_path / "lock", stamp="node")
    assert sorted(_compiled(out)) == ["b", "c"]
    assert (report.jobs, report.already) == (2, 1)
    assert report.line().endswith("; 1 already in this cache")


def test_a_ledger_written_under_other_versions_does_not_count(out, tmp_path):
    jobs = _jobs(CompileProbe.CompileKey("k"))
    run_pool(jobs, 1, tmp_path / "lock", stamp="vllm-0.33")
    for path in out.iterdir():
        path.unlink()
    report = run_pool(jobs, 1, tmp_path / "lock", stamp="vllm-0.34")
    assert not report.skipped and sorted(_compiled(out)) == ["k"]


def test_a_worker_that_cannot_build_the_owner_fails_the_job_not_the_pool(out, tmp_path):
    job = CompileJob("jit_key", "tests.support.jit_pool_probe:Missing", b"", "?")
    report = run_pool(JobSet([job]), 1, tmp_path / "lock")
    assert "AttributeError" in report.failed[0].error


def test_an_unknown_job_kind_is_refused():
    with pytest.raises(ValueError, match="unknown compile job kind"):
        run_job(CompileJob("nvcc", "x", b""))  # type: ignore[arg-type]


def test_workers_default_to_this_process_cores_up_to_a_ceiling(monkeypatch):
    import os

    monkeypatch.delenv(JOBS_ENV, raising=False)
    from model_overrides.jit_pool.pool import DEFAULT_MAX_JOBS

    assert default_jobs() == min(len(os.sched_getaffinity(0)), DEFAULT_MAX_JOBS)
    assert default_jobs({JOBS_ENV: "3"}) == 3
    with pytest.raises(ValueError, match=JOBS_ENV):
        default_jobs({JOBS_ENV: "-1"})


def test_the_patch_stays_off_the_cpu_backend():
    from model_overrides.patches import parallel_jit_warmup
    from model_overrides.registry import Need

    assert "parallel-jit-warmup" in REGISTRY.names()
    found = parallel_jit_warmup.probe()
    assert found.need is Need.NOT_NEEDED and "not CUDA" in found.detail
