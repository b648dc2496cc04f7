"""The house rule on commit subjects (CONTRIBUTING.md): at most 72 characters. History before
the rule's last slip is kept as it is (records name its commits), so the check starts after
it; a shallow clone checks the commits it has."""

import subprocess

from tests.support.paths import ROOT

MAX_SUBJECT = 72
# The newest commit whose subject broke the rule; every commit after it keeps it.
LAST_SLIP = "b390056"


def _subjects() -> list[str]:
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)

    since = (
        f"{LAST_SLIP}..HEAD"
        if git("cat-file", "-e", f"{LAST_SLIP}^{{commit}}").returncode == 0
        else "HEAD"
    )
    found = git("log", "--format=%h %s", since)
    assert found.returncode == 0, found.stderr
    return found.stdout.splitlines()


def test_every_commit_subject_since_the_rule_fits_72_characters():
    subjects = _subjects()
    long = [line for line in subjects if len(line.split(" ", 1)[1]) > MAX_SUBJECT]
    assert not long, long
