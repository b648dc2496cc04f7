"""Run the contract check on every DSV4 variant without risking this process.

Importing another platform's variant can be fatal: on a CPU without AVX-512 BF16,
vLLM has loaded ``_C_AVX512``, and ``vllm.models.deepseek_v4.amd`` imports
``vllm.platforms.rocm``, whose ``import vllm._C`` registers the ``_C`` op namespace a
second time; c10 then aborts the process (SIGABRT, no Python exception). So only the
variants vLLM itself runs here are imported in this process; each other variant is
imported in a child (``python -m model_overrides.contracts.check_runner VARIANT``), and read
from source when that child cannot import it or dies.
"""

import json
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from model_overrides.contracts import clamp_contract, hc_state_contract

PLATFORM_VARIANTS = hc_state_contract.PLATFORM_VARIANTS
CHILD_TIMEOUT_S = 600


@dataclass
class VariantReport:
    name: str
    how: str  # "imported" or "read from source"
    notes: list[str] = field(default_factory=list)
    findings: list[hc_state_contract.Finding] = field(default_factory=list)


def _report(variant: hc_state_contract.Variant) -> VariantReport:
    imported = variant.decoder is not None and variant.decoder.runtime is not None
    return VariantReport(
        variant.name,
        "imported" if imported else "read from source",
        list(variant.notes),
        hc_state_contract.check_variant(variant),
    )


def check_here(name: str, importing: bool) -> VariantReport | None:
    found = hc_state_contract.discover_variants(only=(name,), importing=importing)
    return _report(found[0]) if found else None


def _why(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode < 0:
        return f"killed by {signal.Signals(-proc.returncode).name}"
    tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
    return f"exit {proc.returncode}: {tail[0][:160]}"


def start_child(name: str) -> subprocess.Popen:
    """Import and check variant ``name`` in a child (collect it with ``check_in_child``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "model_overrides.contracts.check_runner", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check_in_child(name: str, child: subprocess.Popen) -> VariantReport | None:
    try:
        stdout, stderr = child.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, stderr = child.communicate()
    proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("REPORT ")), None)
    if proc.returncode == 0 and line:
        data = json.loads(line.removeprefix("REPORT "))
        if data is None:
            return None
        data["findings"] = [hc_state_contract.Finding(**f) for f in data["findings"]]
        return VariantReport(**data)
    report = check_here(name, importing=False)
    if report is not None:
        report.notes.append(f"importing it in a child failed ({_why(proc)})")
    return report


def run_check(platform: str = "all") -> tuple[list[VariantReport], list[hc_state_contract.Finding]]:
    wanted = None if platform == "all" else set(PLATFORM_VARIANTS[platform])
    names = [n for n in hc_state_contract.present_variants() if wanted is None or n in wanted]
    local = set(hc_state_contract.current_platform_variants())
    # Every child at once: each spends most of its time importing vLLM, and the clamp
    # rules below are read from source meanwhile.
    children = {name: start_child(name) for name in names if name not in local}
    reports = []
    try:
        for name in names:
            if name in local:
                report = check_here(name, importing=True)
            else:
                report = check_in_child(name, children[name])
            if report is not None:
                # SwiGLU clamp rules: read from source only, so safe here for every variant.
                report.findings += clamp_contract.findings_for(name)
                reports.append(report)
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    return reports, [f for r in reports for f in r.findings]


def _child(name: str) -> None:
    from model_overrides.kernels import kernel_library

    kernel_library.force_if_requested()  # the parent's library choice holds here too
    report = check_here(name, importing=True)
    print("REPORT " + json.dumps(asdict(report) if report else None))


if __name__ == "__main__":
    _child(sys.argv[1])
