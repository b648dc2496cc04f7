"""Ray Serve's config-file format for a preset: what `serve run`, `dsv4-serve up` and
KubeRay's ``serveConfigV2`` all deploy."""

from typing import Any

import yaml

from serving.config.build_args import BuildArgs, resolve

APP_NAME = "dsv4"
IMPORT_PATH = "serving.app:build"


def serve_config(args: BuildArgs, host: str = "0.0.0.0", port: int = 8000) -> dict[str, Any]:
    resolve(args)  # fail here, with the field named, rather than inside the cluster
    app_args = args.model_dump(exclude_defaults=True)
    app_args["preset"] = args.preset
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": host, "port": port},
        "applications": [
            {"name": APP_NAME, "route_prefix": "/", "import_path": IMPORT_PATH, "args": app_args}
        ],
    }


def render(args: BuildArgs, host: str = "0.0.0.0", port: int = 8000) -> str:
    return yaml.safe_dump(serve_config(args, host, port), sort_keys=False)
