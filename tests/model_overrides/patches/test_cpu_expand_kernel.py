"""The rejection sampler's expand override goes through vLLM's kernel dispatcher, whether
the CPU platform registered its kernels before our plugin ran or after it."""

import subprocess
import sys
import textwrap

import pytest

from tests.support.paths import ROOT

ORDERS = {
    # vLLM's normal order: the plugin at start-up, the platform at model-runner init.
    "plugin first": "patch.apply(); current_platform.register_triton_kernel_overrides()",
    # A late plugin load: the platform's stand-in is in place and gets replaced.
    "platform first": "current_platform.register_triton_kernel_overrides(); patch.apply()",
}


@pytest.mark.parametrize("order", ORDERS)
def test_expand_override_is_the_registered_kernel(order: str):
    code = textwrap.dedent(
        f"""
        from vllm.platforms import current_platform
        from vllm.v1.sample import rejection_sampler
        from model_overrides.kernels.sampling import expand_to_tokens
        from model_overrides.patches import cpu_expand_kernel as patch

        assert patch.probe().need.name == "NEEDED", patch.probe()
        {ORDERS[order]}
        assert rejection_sampler.expand_kernel.func is expand_to_tokens
        assert patch.verify() is None, patch.verify()
        assert patch.expands_floats(rejection_sampler.expand_kernel[(1,)])
        print("OK")
        """
    )
    env_run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert env_run.stdout.strip().endswith("OK"), env_run.stdout[-2000:] + env_run.stderr[-4000:]
