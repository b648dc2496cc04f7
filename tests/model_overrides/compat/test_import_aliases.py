"""The finder that serves a moved module under its old path
(model_overrides/compat/import_aliases.py)."""

import json
import subprocess
import sys

import pytest

from model_overrides.compat import import_aliases


@pytest.fixture
def finder():
    found = import_aliases.install({"email.dsv4_old_json": "json", "tabnanny": "json"})
    yield found
    sys.meta_path.remove(found)
    sys.modules.pop("email.dsv4_old_json", None)
    sys.modules.pop("tabnanny", None)


def test_a_missing_old_path_imports_the_new_module(finder):
    from email import dsv4_old_json  # type: ignore[attr-defined]

    assert dsv4_old_json is json
    assert dsv4_old_json.JSONDecoder is json.JSONDecoder


def test_a_module_still_at_its_old_path_is_left_alone(finder):
    sys.modules.pop("tabnanny", None)
    import tabnanny

    assert tabnanny is not json and hasattr(tabnanny, "check")


def test_installing_twice_adds_one_finder(finder):
    again = import_aliases.install(finder.moved)
    assert again is finder
    assert sum(f is finder for f in sys.meta_path) == 1


def test_the_pth_line_installs_it_at_interpreter_start(tmp_path):
    # What docker/install.sh writes into the image's site-packages.
    (tmp_path / "dsv4_vllm_aliases.pth").write_text(import_aliases.PTH_LINE)
    code = (
        "import site, sys; site.addsitedir(sys.argv[1]); "
        "import model_overrides.compat.import_aliases as a; "
        "print(a.installed())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"
