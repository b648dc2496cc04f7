"""The README is a short front door, the manual's links and their headings resolve, its
pages start with a summary and carry no internal work labels, and `dsv4-serve --version`
says the version."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from serving.cli import main
from tests.support.paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The manual's pages, and the front door and contributor guide that link into it.
PAGES = sorted(DOCS.glob("*.md"))
LINKED = [README, ROOT / "CONTRIBUTING.md", *PAGES]
# Every Markdown file under docs/ (pages, run records, design notes).
ALL_DOCS = sorted(DOCS.rglob("*.md"))

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LABEL = re.compile(r"\b(session|issue)s?\s+#?\d+", re.I)


def _prose(path: Path) -> str:
    """The page without its fenced blocks (command output is not prose)."""
    return FENCE.sub("", path.read_text())


def test_readme_is_a_short_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move reference material to docs/"


def test_readme_links_every_page():
    linked = {Path(t.split("#")[0]).name for t in LINK.findall(README.read_text())}
    missing = [p.name for p in PAGES if p.name not in linked]
    assert not missing, f"README's 'Read more' does not link {missing}"


def _anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives a page: lower case, punctuation but hyphens and
    underscores dropped, spaces made hyphens, a repeated one numbered."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(path).splitlines():
        if heading := re.match(r"#{1,6}\s+(.*)", line):
            text = heading.group(1).replace("`", "").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            count = seen[slug] = seen.get(slug, -1) + 1
            found.add(f"{slug}-{count}" if count else slug)
    return found


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings(path: Path):
    broken = []
    for target in LINK.findall(_prose(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # a URL
        name, _, anchor = target.partition("#")
        linked = path.parent / name if name else path
        missing_heading = anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        if not linked.exists() or missing_heading:
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files or headings: {broken}"


def test_anchors_follow_githubs_rules(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Cold start: `warm` (H100, vLLM 0.34)\n\n## Notes\n\n## Notes\n")
    assert _anchors(page) == {"title", "cold-start-warm-h100-vllm-034", "notes", "notes-1"}


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_pages_start_with_a_summary(path: Path):
    blocks = [b.strip() for b in path.read_text().split("\n\n") if b.strip()]
    assert blocks[0].startswith("# "), f"{path.name} does not start with a title"
    summary = blocks[1]
    assert not summary.startswith(("#", "|", "```", "    ", "- ")), (
        f"{path.name}: the title is not followed by a summary paragraph"
    )


@pytest.mark.parametrize(
    "path",
    [README, ROOT / "CONTRIBUTING.md", *ALL_DOCS],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_work_labels(path: Path):
    found = sorted({m.group(0) for m in LABEL.finditer(path.read_text())})
    assert not found, f"{path.relative_to(ROOT)} names internal work labels: {found}"


def _pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _printed_version(capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_version_flag_prints_the_version(capsys):
    assert _printed_version(capsys) == f"dsv4-serve {_pyproject_version()}\n"


def test_version_flag_without_installed_metadata(capsys, monkeypatch):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert _printed_version(capsys) == f"dsv4-serve {_pyproject_version()}\n"


def test_no_work_labels_in_code_or_tests():
    """Product code, tests and scripts say what a thing is, not which piece of work made it."""
    found = []
    for folder in ("serving", "model_overrides", "tests", "tools", "helm", "docker"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".sh", ".yaml", ".tpl", ".txt"} and path.is_file():
                found += [
                    f"{path.relative_to(ROOT)}: {m.group(0)}"
                    for m in LABEL.finditer(path.read_text())
                ]
    assert not found, found


def test_docs_hold_results_not_runs():
    """Pages, plots and small summary JSON: no raw logs, archives, scrapes or junit, each
    JSON under 100 KB, all of docs/ under 4 MB (git history keeps the runs)."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files", "docs"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    paths = [ROOT / f for f in tracked]
    raw = [
        p.name
        for p in paths
        if p.suffix in {".log", ".gz", ".tgz", ".tar", ".xml", ".jsonl", ".prom"}
    ]
    assert not raw, raw
    big = [p.name for p in paths if p.suffix == ".json" and p.stat().st_size > 100_000]
    assert not big, big
    assert sum(p.stat().st_size for p in paths) < 4 * 2**20


# A measured figure: seconds, a decimal ratio, a share or a rate.
MEASURED = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms|tok/s)\b|\b\d+(?:\.\d+)?%|\b\d+\.\d+x\b")


def _column(path: Path, header: str, heading: str) -> list[str]:
    """The cells under HEADER of the first table after HEADING in PATH."""
    text = path.read_text()
    rows = [line for line in text[text.index(heading) :].splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]
    index = cells[0].index(header)
    end = next((i for i, row in enumerate(cells[2:], 2) if len(row) != len(cells[0])), None)
    return [row[index] for row in cells[2:end]]


@pytest.mark.parametrize(
    ("path", "header", "heading"),
    [
        (DOCS / "validation.md", "result", "## The matrix"),
        (README, "validated on", "| preset | model, hardware"),
    ],
    ids=["validation-matrix", "readme-presets"],
)
def test_status_tables_link_figures_not_copy_them(path: Path, header: str, heading: str):
    """Status tables say what ran and link its record: a figure copied by hand into them
    drifts from the record that benchmarks.md renders."""
    cells = _column(path, header, heading)
    assert len(cells) > 5, f"{path.name}: no '{header}' column found under {heading!r}"
    copied = [m.group(0) for cell in cells for m in MEASURED.finditer(cell)]
    assert not copied, f"{path.name}: measured figures in '{header}': {copied}"


PRESET_ROW = re.compile(r"^\| `([\w-]+)`(?: \(default\))? \|(.*)\|\s*$", re.M)


def _speculation_words(name: str) -> str:
    """What a preset table's speculation cell says, from the preset itself."""
    from serving.config.preset import load_preset

    spec = load_preset(name).speculation
    method = {"mtp": "MTP", "dspark": "DSpark"}[spec.method]
    words = f"{method} k={spec.num_speculative_tokens}"
    if spec.draft_sample_method == "probabilistic":
        words += ", probabilistic"
    if spec.synthetic_acceptance:
        words += ", synthetic acceptance"
    return words


@pytest.mark.parametrize("page", [README, DOCS / "presets.md"], ids=lambda p: p.name)
def test_the_preset_tables_say_what_each_preset_speculates(page):
    """The speculation column is copied by hand: it must say the preset's method, k and
    draft sampling as the preset file has them."""
    from serving.config.preset import list_presets

    rows = {name: cells for name, cells in PRESET_ROW.findall(page.read_text())}
    assert set(list_presets()) <= set(rows), f"{page.name}: presets missing from its table"
    for name in list_presets():
        cells = [cell.strip() for cell in rows[name].split("|")]
        column = 1 if page == README else 3  # README: model+hardware merged into one cell
        assert cells[column] == _speculation_words(name), (page.name, name, cells)
