"""Every layout's gateway caps a request's output budget at the engine's context: the app
our builder returns goes through Ray Serve's own ``build_app`` (no cluster), and what
reaches the gateway is read where it is handed over (``wrap_app`` for the ingress layouts,
the engine replica's bound ``gateway`` for the direct path)."""

import json
import os
import subprocess
import sys

from serving.config.preset import load_preset
from tests.support.paths import ROOT

PROBE = """
import json, sys
import serving.gateway.stack as stack
from ray.serve._private.build_app import build_app
from serving.app import build

wrapped = []
real = stack.wrap_app

def spy(app, models, options, **kwargs):
    wrapped.append(options.max_output_tokens)
    return real(app, models, options, **kwargs)

stack.wrap_app = spy
out = {}
for name, sets in json.loads(sys.argv[1]).items():
    wrapped.clear()
    built = build_app(build({"preset": "h200-flash-mtp", "set": sets}), name="dsv4")
    bound = [d.init_kwargs["gateway"]["max_output_tokens"] for d in built.deployments
             if "gateway" in (d.init_kwargs or {})]
    out[name] = {"wrapped": list(wrapped), "bound": bound}
print(json.dumps(out))
"""

LAYOUTS = {
    "direct": ["serving.path=direct"],
    "ingress": ["serving.path=ingress"],
    "disaggregated": [
        "serving.path=ingress",
        "disaggregation.connector=mooncake",
        "deployment.autoscaling=null",
    ],
}


def test_every_layout_caps_the_output_budget_at_the_context():
    context = load_preset("h200-flash-mtp").engine_kwargs()["max_model_len"]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(LAYOUTS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # The direct path's replica wraps vLLM's app itself, from the options bound to it.
    assert seen["direct"] == {"wrapped": [], "bound": [context]}
    for layout in ("ingress", "disaggregated"):
        assert seen[layout]["wrapped"] == [context], (layout, seen[layout])
