"""python -m model_overrides [status]: the patch status table for the installed vLLM."""

import argparse
import sys

from model_overrides.registry import Outcome
from model_overrides.status import collect, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_overrides")
    parser.add_argument("command", nargs="?", default="status", choices=["status"])
    parser.parse_args(argv)
    statuses = collect()
    print(render(statuses))
    bad = [s for s in statuses if s.outcome in (Outcome.FAILED, Outcome.UNRECOGNISED)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
