"""Parse a command line with the installed `hf` CLI's own parser, without running it (test
helper; also run inside the stand-in image by tests/images/test_images.py, so it imports nothing
from this project).

`hf` is huggingface_hub.cli.hf:main, a click group whose commands load lazily; parsing
is click's make_context on the group, then on the resolved command.
"""

from __future__ import annotations

import json
import sys

import click


def parse_hf(argv: list[str]) -> tuple[str, dict]:
    from huggingface_hub.cli.hf import app

    group_ctx = app.make_context("hf", list(argv))
    name, command, rest = app.resolve_command(group_ctx, list(argv))
    command = command.materialize() if hasattr(command, "materialize") else command
    ctx = command.make_context(name, rest, parent=group_ctx)
    return name, ctx.params


if __name__ == "__main__":
    # python3 chart_hf.py ARGV... -> the parsed command and parameters, as JSON
    try:
        name, params = parse_hf(sys.argv[1:])
    except click.ClickException as exc:
        print(json.dumps({"error": exc.format_message()}))
        sys.exit(2)
    print(json.dumps({"command": name, "params": params}, default=str))
