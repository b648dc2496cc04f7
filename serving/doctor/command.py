"""`dsv4-serve doctor preflight|status|dump-script`: arguments and the run.

Exit codes: 0 the install can work / the release serves (warnings allowed), 1 at least one
failure (✘), 2 the doctor could not check (bad input, unreachable or refusing cluster,
malformed dump): then one line on stderr says why.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.chart import derived_files
from serving.doctor.errors import DoctorError, Unavailable
from serving.doctor.progress import Progress

EXIT_CANNOT_CHECK = 2


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n", "--namespace", help="the release's namespace (default: the context's)"
    )
    source = parser.add_argument_group("cluster")
    source.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    source.add_argument("--context", help="kubeconfig context (default: the current one)")
    source.add_argument(
        "--from-dump",
        metavar="DIR",
        type=Path,
        help="read `kubectl get -o yaml` files instead of a cluster (see `doctor dump-script`)",
    )
    source.add_argument(
        "--request-timeout", type=float, default=10.0, help="seconds to connect (default 10)"
    )
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", choices=["text", "json"], default="text")
    out.add_argument("--no-color", action="store_true", help="no colors (also: NO_COLOR=1)")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    out.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="doctor_command", required=True, metavar="COMMAND")
    pre = sub.add_parser(
        "preflight",
        help="can this cluster run PRESET? (before helm install)",
        description="Render the chart with your values and check the cluster against what "
        "it would install. Exit 0: can work, 1: cannot, 2: could not check.",
    )
    pre.add_argument("preset", help="a GPU preset (serving/presets), as the chart's `preset`")
    pre.add_argument("--platform", choices=["cuda", "rocm"], help="default: the preset's")
    pre.add_argument("--release", default="dsv4", help="helm release name (default dsv4)")
    pre.add_argument(
        "-f", "--values", action="append", default=[], metavar="FILE", help="chart values file"
    )
    pre.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="chart value, as helm"
    )
    pre.add_argument("--helm", help="helm binary (default: $HELM, .cache/tools/helm, PATH)")
    pre.add_argument("--chart", type=Path, default=derived_files.CHART_DIR, help="chart directory")
    pre.add_argument(
        "--image-arch",
        action="append",
        metavar="ARCH",
        help="architectures your image is built for (default: amd64, as `make images`)",
    )
    _common(pre)
    pre.set_defaults(doctor=_lazy("preflight"))

    st = sub.add_parser(
        "status",
        help="what an installed release is doing, what is wrong, what to do",
        description="Explain an installed release: RayService, RayCluster, pods, download "
        "Job, Serve application, and MTP/TTFT from Prometheus. Exit 0: serving or "
        "starting, 1: broken, 2: could not check.",
    )
    st.add_argument("release", help="helm release name")
    st.add_argument("--prometheus", metavar="URL", help="Prometheus HTTP API for MTP/TTFT")
    st.add_argument("--log-lines", type=int, default=20, help="log lines per failing container")
    _common(st)
    st.set_defaults(doctor=_lazy("status"))

    dump = sub.add_parser(
        "dump-script", help="print a shell script that collects a dump for --from-dump"
    )
    dump.add_argument("-n", "--namespace", default="dsv4")
    dump.add_argument("--release", default="dsv4")
    dump.set_defaults(doctor=_dump_script)


def _lazy(name: str) -> Callable[[argparse.Namespace, Progress], Any]:
    # The checks (and the `kubernetes` client under them) load only when the doctor runs:
    # every `dsv4-serve` command builds this parser.
    def call(args: argparse.Namespace, progress: Progress) -> Any:
        try:
            from serving.doctor import runner
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] == "kubernetes":
                raise DoctorError(
                    "the doctor needs the kubernetes client: pip install 'dsv4-serve[doctor]' "
                    "(in a checkout: pip install -e '.[doctor]')"
                ) from None
            raise
        return getattr(runner, name)(args, progress)

    return call


def _dump_script(args: argparse.Namespace, progress: Progress) -> None:
    from serving.doctor.dump_script import script

    sys.stdout.write(script(args.namespace, args.release))


def run(args: argparse.Namespace) -> int:
    progress = Progress(sys.stderr, enabled=not getattr(args, "quiet", False))
    try:
        produced = args.doctor(args, progress)
    except DoctorError as exc:
        progress.done()
        print(f"dsv4-serve doctor: error: {exc}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    except Unavailable as exc:
        progress.done()
        print(f"dsv4-serve doctor: error: {exc.reason}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    except KeyboardInterrupt:
        progress.done()
        print("dsv4-serve doctor: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback for a user; --debug shows it
        progress.done()
        if getattr(args, "debug", False):
            raise
        print(
            f"dsv4-serve doctor: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_CANNOT_CHECK
    if produced is None:
        return 0
    from serving.doctor.findings import exit_code
    from serving.doctor.report import as_json, as_text

    header, findings = produced
    if args.output == "json":
        sys.stdout.write(as_json(header, findings) + "\n")
    else:
        color = sys.stdout.isatty() and not args.no_color and not os.environ.get("NO_COLOR")
        sys.stdout.write(as_text(header, findings, sys.stdout, color))
    return exit_code(findings)
