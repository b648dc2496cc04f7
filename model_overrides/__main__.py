"""python -m model_overrides [status | check [--platform P] [--strict] | matrix [--version V]]."""

import argparse
import sys

from model_overrides.registry import Outcome


def _status() -> int:
    from model_overrides.status import collect, render

    statuses = collect()
    print(render(statuses))
    bad = [s for s in statuses if s.outcome in (Outcome.FAILED, Outcome.UNRECOGNISED)]
    return 1 if bad else 0


def _check(platform: str, strict: bool) -> int:
    from model_overrides.contracts.check_runner import run_check
    from model_overrides.status import installed_vllm

    variants, findings = run_check(platform)
    print(
        f"DSV4 contract (HC state, vLLM PR #42930; SwiGLU clamp) on "
        f"{installed_vllm()}, platform {platform}"
    )
    if not variants:
        print("no DeepSeek-V4 variant found in this vLLM")
        return 1 if strict else 0
    for v in variants:
        print(f"\n[{v.name}] ({v.how}{'; ' + '; '.join(v.notes) if v.notes else ''})")
        for f in v.findings:
            first, *more = f.detail.split("\n")
            print(f"  {'ok  ' if f.ok else 'FAIL'}  {f.rule:<28} {first}")
            for line in more:  # a clamp finding's kernels and citations
                print(f"{'':<36} {line}")
    failed = [f for f in findings if not f.ok]
    print(f"\n{len(findings) - len(failed)} of {len(findings)} rules hold")
    return 1 if strict and failed else 0


def main(argv: list[str] | None = None) -> int:
    from model_overrides.kernels import kernel_library

    try:
        kernel_library.force_if_requested()  # before anything loads vLLM's kernels
    except kernel_library.ForceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="python -m model_overrides")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("status", help="the patch status table for the installed vLLM")
    check = sub.add_parser(
        "check", help="check the HC-state and SwiGLU-clamp contracts on every DSV4 variant"
    )
    check.add_argument("--platform", choices=["cuda", "rocm", "cpu", "xpu", "all"], default="all")
    check.add_argument("--strict", action="store_true", help="exit 1 on any violation")
    matrix = sub.add_parser(
        "matrix", help="patch verdicts and the contract on every supported vLLM, each in its env"
    )
    matrix.add_argument("--version", action="append", help="one supported version (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "matrix":
        from model_overrides.compat import vllm_matrix

        wanted = args.version or list(vllm_matrix.SUPPORTED)
        unknown = [v for v in wanted if v not in vllm_matrix.SUPPORTED]
        if unknown:
            print(
                f"error: not a supported vLLM: {unknown}; supported: "
                f"{', '.join(vllm_matrix.SUPPORTED)}",
                file=sys.stderr,
            )
            return 2
        return vllm_matrix.main(wanted)
    if args.command == "check":
        return _check(args.platform, args.strict)
    return _status()


if __name__ == "__main__":
    sys.exit(main())
