"""`up` refuses, before deploying, a preset whose GPUs the local Ray node does not have:
Ray Serve LLM asks for ``accelerator_type:<type>`` and, on a node without it, the replica
waits for the autoscaler for ever (an H100 run of gpu-golden, which asks for H200s, only
logged "No available node types can fulfill resource request" until its deadline)."""

from serving.config.preset import load_preset
from serving.local.local_up import missing_accelerator

# ray.cluster_resources() on the lent H100 machine, and on this CPU machine.
H100_NODE = {"CPU": 16.0, "GPU": 1.0, "memory": 9.1e10, "accelerator_type:H100": 1.0}
H200_NODE = {"CPU": 16.0, "GPU": 1.0, "memory": 9.1e10, "accelerator_type:H200": 1.0}
CPU_NODE = {"CPU": 4.0, "memory": 1.2e10, "node:127.0.0.1": 1.0}


def test_a_preset_for_h200_gpus_is_refused_on_an_h100_node_by_name():
    why = missing_accelerator(load_preset("gpu-golden"), H100_NODE)
    assert why == (
        "preset 'gpu-golden' asks Ray for H200 GPUs (accelerator_type:H200); this node has "
        "H100 (1 GPU): run it on a node with H200 GPUs or use --set accelerator.type=H100 "
        "where the model fits this GPU"
    )
    on_cpu = missing_accelerator(load_preset("gpu-golden"), CPU_NODE)
    assert on_cpu is not None and on_cpu.endswith(
        "no accelerator type (0 GPU): run it on a node with H200 GPUs or use a preset for this GPU"
    )


def test_a_node_with_the_type_or_a_cpu_preset_passes():
    assert missing_accelerator(load_preset("gpu-golden"), H200_NODE) is None
    assert missing_accelerator(load_preset("cpu-tiny"), CPU_NODE) is None
    assert missing_accelerator(load_preset("cpu-tiny"), H100_NODE) is None


def test_the_type_named_by_the_hint_is_one_the_preset_takes_and_ray_places():
    preset = load_preset("gpu-golden", [{"accelerator": {"type": "H100"}}])
    assert missing_accelerator(preset, H100_NODE) is None
    assert "accelerator_type:H100" in missing_accelerator(preset, H200_NODE)
