"""Finding 2: the download Job runs the serving image's own `hf` CLI (huggingface_hub's,
pinned by the image), installs nothing, and its exact command line parses with that CLI's
parser. tests/images/test_images.py parses it again inside the built image."""

import importlib.metadata
import inspect
import re
import subprocess
from pathlib import Path

import pytest

from serving.chart.presets_table import presets_table
from tests.support.chart_hf import parse_hf
from tests.support.chart_render import ROOT, by_kind, render, worker_group

HF_MODULE = "huggingface_hub.cli.hf"


def download_container(objects: list[dict]) -> dict:
    (job,) = [j for j in by_kind(objects, "Job") if j["metadata"]["name"].endswith("-download")]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def hf_argv(container: dict) -> list[str]:
    """The `hf` command line exactly as the Job's shell expands it (with its env)."""
    lines = [ln.strip() for ln in container["args"][0].splitlines()]
    (line,) = [ln for ln in lines if HF_MODULE in ln and not ln.startswith("#")]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    out = subprocess.run(
        ["/bin/sh", "-c", 'eval "set -- $LINE"; printf "%s\\0" "$@"'],
        env={"PATH": "/usr/bin:/bin", **env, "LINE": line},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split("\0")[:-1]


def test_hf_module_is_the_hf_console_script():
    (script,) = [
        e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "hf"
    ]
    assert script.value == f"{HF_MODULE}:main"
    assert int(importlib.metadata.version("huggingface_hub").split(".")[0]) >= 1


def test_the_image_pins_the_huggingface_hub_this_checks():
    # The CPU lock is what the stand-in image carries (tests/images/test_images.py).
    lock = (ROOT / "requirements-cpu.lock").read_text()
    pinned = re.search(r"^huggingface-hub==(\S+)", lock, re.M).group(1)
    assert importlib.metadata.version("huggingface_hub") == pinned


@pytest.mark.parametrize("preset", sorted(presets_table()))
def test_job_command_parses_with_the_installed_hf_cli(preset: str, tmp_path: Path):
    row = presets_table()[preset]
    values = {
        "preset": preset,
        "platform": row["platform"],
        "model": {"download": {"enabled": True, "tokenSecret": {"name": "hf-token"}}},
    }
    objects = render(tmp_path, values)
    container = download_container(objects)
    worker = worker_group(objects)["template"]["spec"]
    assert container["image"] == worker["containers"][0]["image"], "the serving image"
    script = container["args"][0]
    assert not re.search(r"\b(pip|pip3|uv|apt-get|apk|curl|wget)\b", script), script
    assert "huggingface-cli" not in script

    argv = hf_argv(container)
    assert argv[:3] == ["python3", "-m", HF_MODULE]
    name, params = parse_hf(argv[3:])
    assert name == "download"
    assert params["repo_id"] == row["modelSource"]
    assert params["local_dir"] == f"/models/{row['modelSource']}"
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert env["HF_HUB_DISABLE_UPDATE_CHECK"]["value"] == "1"
    # The workers wait for this Job's marker, and say which Job.
    (wait,) = [c for c in worker["initContainers"] if c["name"] == "wait-for-weights"]
    wait_env = {e["name"]: e["value"] for e in wait["env"]}
    assert wait_env["MODEL"] == params["local_dir"]
    assert wait_env["JOB"] == "rel-dsv4-serve-download"


def test_revision_repo_and_mirror_reach_the_cli(tmp_path: Path):
    download = {
        "enabled": True,
        "repo": "my-org/dsv4-fork",
        "revision": "v1.2",
        "endpoint": "https://hub.internal",
    }
    container = download_container(render(tmp_path, {"model": {"download": download}}))
    _, params = parse_hf(hf_argv(container)[3:])
    assert (params["repo_id"], params["revision"]) == ("my-org/dsv4-fork", "v1.2")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_ENDPOINT"] == "https://hub.internal"


def test_parser_is_real(tmp_path: Path):
    import click

    with pytest.raises(click.NoSuchOption):
        parse_hf(["download", "org/repo", "--local-dirr", "/x"])


def test_s3_source_uses_the_images_pyarrow(tmp_path: Path):
    import pyarrow.fs

    values = {
        "model": {
            "download": {
                "enabled": True,
                "source": "s3",
                "s3Uri": "s3://b/dsv4",
                "tokenSecret": {"name": "s3"},
            }
        }
    }
    container = download_container(render(tmp_path, values))
    assert container["command"] == ["python3", "-c"]
    code = container["args"][0]
    compile(code, "download-job", "exec")
    assert not re.search(r"\b(pip|subprocess|os\.system)\b", code)
    params = inspect.signature(pyarrow.fs.copy_files).parameters
    assert {"source_filesystem", "destination_filesystem", "use_threads"} <= set(params)
    assert hasattr(pyarrow.fs, "S3FileSystem")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SOURCE"] == "s3://b/dsv4"
