"""The metadata kernels that go through vLLM's kernel dispatcher, launched the way vLLM
launches them: through the JIT owner's real call (launch binding by argument name) or
the real launching function, against our eager functions called directly."""

import subprocess
import sys
import textwrap

from tests.support.paths import ROOT

SCRIPT = textwrap.dedent(
    """
    import torch
    from model_overrides.kernels import dsv4_metadata as eager
    from model_overrides.patches.dsv4_cpu_metadata_kernels import SWAPS
    from model_overrides.patches.module_attr import DispatchedKernel
    from model_overrides.patches.dsv4_cpu_metadata_kernels import triton_has_no_backend
    from vllm.v1.attention.backends.mla import compressor_utils, sparse_swa
    from vllm.v1.attention.ops import metadata

    qsl = torch.tensor([0, 1, 6, 13], dtype=torch.int32)
    seq_lens = torch.tensor([9, 5, 20], dtype=torch.int32)
    block_table = torch.randperm(24, generator=torch.Generator().manual_seed(0))
    block_table = block_table.reshape(3, 8).to(torch.int32)
    slot_mapping = torch.arange(13, dtype=torch.int64)

    def slot_mapping_args():
        out = torch.full((16,), -1, dtype=torch.int64)
        return (out, slot_mapping, qsl, seq_lens, block_table, 4, 4, 1, 1)

    def prefill_args():
        out = torch.full((4,), -9, dtype=torch.int32)
        return (out, seq_lens, qsl, torch.tensor([0, 2, 3], dtype=torch.int32), 2, 1, 4)

    def owners():
        return {
            "slot mapping": (compressor_utils._COMPRESSED_SLOT_MAPPING_KERNEL,
                             slot_mapping_args, eager.compressed_slot_mapping),
            "prefill metadata": (sparse_swa._COMPUTE_PREFILL_METADATA_KERNEL,
                                 prefill_args, eager.compute_prefill_metadata),
        }

    # Upstream, on the CPU: the owners cannot launch their Triton kernels.
    for name, (owner, make, _) in owners().items():
        try:
            owner(*make())
            raise SystemExit(f"{name}: upstream launch did not fail")
        except TypeError as exc:
            assert "Cannot inspect kernel parameters" in str(exc), exc

    dispatched = {n: s for n, s in SWAPS.items() if isinstance(s, DispatchedKernel)}
    assert len(dispatched) == 3, sorted(dispatched)
    for name, swap in dispatched.items():
        assert swap.probe(triton_has_no_backend).need.name == "NEEDED", name
        swap.apply()
        assert swap.verify() is None, (name, swap.verify())
        assert swap.probe(triton_has_no_backend).need.name == "ALREADY_APPLIED", name

    for name, (owner, make, direct) in owners().items():
        via_vllm, ours = make(), make()
        owner(*via_vllm)
        direct(*ours)
        assert torch.equal(via_vllm[0], ours[0]), (name, via_vllm[0], ours[0])
        assert not torch.equal(ours[0], make()[0]), f"{name}: nothing was written"

    # Rebound where it was imported by name, too.
    assert sparse_swa.compute_token_to_req_indices is metadata.compute_token_to_req_indices
    out_a, out_b = (torch.full((16,), -9, dtype=torch.int32) for _ in range(2))
    got = sparse_swa.compute_token_to_req_indices(qsl, out_a, 13, 15)
    assert torch.equal(got, eager.token_to_req_indices(qsl, out_b, 13, 15))
    assert got.tolist()[:7] == [0, 1, 1, 1, 1, 1, 2]
    print("OK")
    """
)


def test_dispatched_metadata_kernels_launch_through_vllm():
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert run.stdout.strip().endswith("OK"), run.stdout[-2000:] + run.stderr[-4000:]
