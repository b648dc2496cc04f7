"""Eager metadata kernels against slow references written from the Triton kernels' text.

Triton cannot run here, so each reference is a per-program, per-element loop that
transcribes the kernel's definition; none of them calls the code under test.
"""

import random

import pytest
import torch

from model_overrides.kernels import dsv4_metadata as eager

PAD = -1


def _batch(rng: random.Random, kinds: list[str], block_size: int, max_blocks: int = 8):
    """Requests as (query_len, seq_len): decodes, fresh prefills and chunked prefills."""
    query_lens, seq_lens = [], []
    for kind in kinds:
        if kind == "decode":
            q, ctx = rng.randint(1, 3), rng.randint(1, block_size * 3)
        elif kind == "prefill":
            q, ctx = rng.randint(2, block_size * 2 + 5), 0
        else:  # chunked prefill: a later chunk of a long prompt
            q, ctx = rng.randint(2, block_size + 3), rng.randint(block_size - 2, block_size * 3)
        query_lens.append(q)
        seq_lens.append(q + ctx)
    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    table = torch.randperm(64, generator=torch.Generator().manual_seed(rng.randint(0, 99)))
    block_table = table[: len(kinds) * max_blocks].reshape(len(kinds), max_blocks).to(torch.int32)
    return (
        torch.tensor(qsl, dtype=torch.int32),
        torch.tensor(seq_lens, dtype=torch.int32),
        block_table,
    )


MIXES = [
    ["decode", "decode", "decode"],
    ["prefill"],
    ["decode", "prefill", "chunked"],
    ["chunked", "chunked"],
    ["decode", "decode", "prefill", "prefill", "chunked"],
]


def ref_compressed_slot_mapping(slot_mapping, qsl, seq_lens, bt, bs, ratio, dcp, inter, n):
    out = [PAD] * n
    for b in range(bt.shape[0]):
        qs, qe = int(qsl[b]), int(qsl[b + 1])
        start = int(seq_lens[b]) - (qe - qs)
        for i in range(qe - qs):
            pos = start + i
            slot = int(slot_mapping[qs + i])
            if (pos + 1) % ratio == 0 and slot != PAD:
                local = pos // (inter * dcp) * inter + pos % inter
                c = local // ratio
                out[qs + i] = int(bt[b, c // bs]) * bs + c % bs
    return out


def _compressible_batch(ratio: int, mix: list[str], dcp: int, inter: int, block_size: int):
    """The first seeded batch (stable across processes) in which some token lands on a
    compression boundary at ratio 4, so that the comparison is not all padding."""
    for attempt in range(50):
        rng = random.Random(f"{ratio}-{'-'.join(mix)}-{dcp}-{attempt}")
        qsl, seq_lens, bt = _batch(rng, mix, 64)
        n = int(qsl[-1])
        slot_mapping = torch.arange(n, dtype=torch.int64)
        replayed = torch.randperm(n, generator=torch.Generator().manual_seed(rng.randint(0, 99)))
        slot_mapping[replayed[: n // 5]] = PAD  # replayed tokens
        expected = ref_compressed_slot_mapping(
            slot_mapping, qsl, seq_lens, bt, block_size, ratio, dcp, inter, n
        )
        if ratio == 128 or any(v != PAD for v in expected):
            return qsl, seq_lens, bt, slot_mapping, expected
    raise AssertionError("no batch with a compression boundary in 50 seeds")


@pytest.mark.parametrize("ratio", [4, 128])
@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("dcp,inter", [(1, 1), (2, 128)])
def test_compressed_slot_mapping(ratio, mix, dcp, inter):
    block_size = 64 // ratio if ratio == 4 else 2
    qsl, seq_lens, bt, slot_mapping, expected = _compressible_batch(
        ratio, mix, dcp, inter, block_size
    )
    n = int(qsl[-1])
    out = torch.full((n + 3,), 12345, dtype=torch.int64)
    out.fill_(PAD)  # the caller pre-fills PAD, as get_compressed_slot_mapping does
    eager.compressed_slot_mapping(
        out, slot_mapping, qsl, seq_lens, bt, block_size, ratio, dcp, inter
    )
    assert out[:n].tolist() == expected
    assert out[n:].tolist() == [PAD] * 3
    assert any(v != PAD for v in expected) or ratio == 128


@pytest.mark.parametrize("max_decode_len", [1, 2, 3])
def test_prepare_uniform_decode(max_decode_len):
    seq_lens = torch.tensor([10, 0, 300, 2], dtype=torch.int32)
    bt = torch.arange(4 * 5, dtype=torch.int32).reshape(4, 5)
    n = 4 * max_decode_len
    dsl = torch.full((n + 2,), 77, dtype=torch.int32)
    ebt = torch.full((n + 2, 5), 77, dtype=torch.int32)
    dl = torch.full((n + 2,), 77, dtype=torch.int32)
    eager.prepare_uniform_decode(seq_lens, dsl, bt, ebt, dl, n, max_decode_len)
    for idx in range(n):
        req, local = divmod(idx, max_decode_len)
        assert int(dsl[idx]) == max(int(seq_lens[req]) - max_decode_len + local + 1, 0)
        assert ebt[idx].tolist() == bt[req].tolist()
        assert int(dl[idx]) == 1
    assert dsl[n:].tolist() == [77, 77]  # rows past the decode tokens are untouched


def ref_prefill_chunk(
    qsl, useq, cu, row_start, qs0, qs1, rank, world, inter, ratio, positions=None
):
    ks, ke, t2s = {}, {}, {}
    for b in range(len(useq)):
        qs, qe = int(qsl[b]), int(qsl[b + 1])
        start = int(useq[b]) - (qe - qs)
        for off in range(qe - qs):
            absolute = qs + off
            if not (qs0 <= absolute < qs1):
                continue
            context = start + 1 + off if positions is None else int(positions[absolute]) + 1
            length = context // ratio
            if world > 1:
                base = (length // inter // world) * inter
                rem = min(max(length - base * world - rank * inter, 0), inter)
                length = base + rem
            ks[absolute - qs0] = int(row_start[b])
            ke[absolute - qs0] = int(row_start[b]) + length
        for j in range(int(cu[b]), int(cu[b + 1])):
            t2s[j] = b
    return ks, ke, t2s


@pytest.mark.parametrize("ratio", [4, 128])
@pytest.mark.parametrize("mix", MIXES[1:])
@pytest.mark.parametrize("qslice", [None, (3, 40)])
@pytest.mark.parametrize("dcp", [(0, 1, 1), (1, 2, 2)])
@pytest.mark.parametrize("sharded", [False, True])
def test_build_prefill_chunk_metadata(ratio, mix, qslice, dcp, sharded):
    rng = random.Random(len(mix) * 31 + ratio)
    qsl, useq, _ = _batch(rng, mix, 256)
    comp = (useq // ratio).to(torch.int32)
    cu = torch.zeros(len(mix) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(comp, 0)
    total_q = int(qsl[-1])
    qs0, qs1 = qslice or (0, total_q)
    qs1 = min(qs1, total_q)
    n_out = max(qs1 - qs0, 0)
    ks = torch.full((n_out,), -9, dtype=torch.int32)
    ke = torch.full((n_out,), -9, dtype=torch.int32)
    t2s = torch.full((max(int(cu[-1]), 1),), -9, dtype=torch.int32)
    rank, world, inter = dcp
    # vLLM 0.34's positions (a request's query tokens not its last ones, as under
    # ShardQ): each token's own position, anywhere below its request's length.
    positions = None
    if sharded:
        lens = torch.repeat_interleave(useq, qsl[1:] - qsl[:-1]).tolist()
        positions = torch.tensor([rng.randrange(n) for n in lens], dtype=torch.int64)
    eager.build_prefill_chunk_metadata(
        qsl,
        useq,
        cu,
        cu,
        t2s,
        ks,
        ke,
        qs0,
        qs1,
        rank,
        world,
        inter,
        num_reqs=len(mix),
        COMPRESS_RATIO=ratio,
        positions=positions,
    )
    eks, eke, et2s = ref_prefill_chunk(
        qsl, useq, cu, cu, qs0, qs1, rank, world, inter, ratio, positions
    )
    assert ks.tolist() == [eks[i] for i in range(n_out)]
    assert ke.tolist() == [eke[i] for i in range(n_out)]
    assert [int(t2s[j]) for j in sorted(et2s)] == [et2s[j] for j in sorted(et2s)]


@pytest.mark.parametrize("num_decodes", [0, 2])
@pytest.mark.parametrize("window", [1, 4, 128])
def test_compute_prefill_metadata(num_decodes, window):
    rng = random.Random(window + num_decodes)
    kinds = ["decode"] * num_decodes + ["prefill", "chunked", "chunked"]
    qsl, seq_lens, _ = _batch(rng, kinds, 256)
    replay = torch.tensor([rng.randint(0, 50) for _ in kinds], dtype=torch.int32)
    out = torch.full((5,), -9, dtype=torch.int32)
    eager.compute_prefill_metadata(out, seq_lens, qsl, replay, 3, num_decodes, window)
    for i in range(3):
        j = num_decodes + i
        q = int(qsl[j + 1] - qsl[j])
        visible = max(int(seq_lens[j]) - q - int(replay[j]), 0)
        assert int(out[i]) == q + min(visible, window - 1)
    assert out[3:].tolist() == [-9, -9]


def ref_swa(tokens, width, window, qsl, seq_lens, t2r, valid, bt, bs, replay, left, right, dspark):
    rows, lens = [], []
    for t in tokens:
        if not bool(valid[t]):
            rows.append([PAD] * width)
            lens.append(0)
            continue
        r = int(t2r[t])
        qs, qe = int(qsl[r]), int(qsl[r + 1])
        prefix = int(seq_lens[r]) - (qe - qs)
        if dspark:
            start, end = max(prefix - window, 0), int(seq_lens[r])
        else:
            pos = prefix + t - qs
            la = max(int(left[t]) - (window - 1), 0)
            start = max(max(pos - (window - 1) - la, 0), int(replay[r]))
            end = pos + int(right[t]) + 1
        n = end - start
        lens.append(n)
        row = []
        for o in range(width):
            p = start + o
            row.append(int(bt[r, p // bs]) * bs + p % bs if o < n else PAD)
        rows.append(row)
    return rows, lens


def _token_view(mix, bs, seed):
    rng = random.Random(seed)
    qsl, seq_lens, bt = _batch(rng, mix, bs)
    n = int(qsl[-1])
    t2r = torch.repeat_interleave(torch.arange(len(mix)), qsl[1:] - qsl[:-1]).to(torch.int32)
    valid = torch.ones(n, dtype=torch.bool)
    valid[n - 1] = False  # a padded token
    return qsl, seq_lens, bt, n, t2r, valid, rng


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("window,width", [(4, 8), (16, 16), (128, 136)])
@pytest.mark.parametrize("offset", [0, 2])
@pytest.mark.parametrize("has_image", [False, True])
def test_swa_indices_and_lens(mix, window, width, offset, has_image):
    bs = 16
    qsl, seq_lens, bt, n, t2r, valid, rng = _token_view(mix, bs, window * 7 + len(mix))
    replay = torch.tensor([rng.randint(0, 20) for _ in mix], dtype=torch.int32)
    left = torch.tensor([rng.randint(0, 20) for _ in range(n)], dtype=torch.int32)
    right = torch.tensor([rng.randint(0, 3) for _ in range(n)], dtype=torch.int32)
    if not has_image:
        left = right = torch.zeros(n, dtype=torch.int32)
    count = n - offset
    seq_lens = torch.maximum(seq_lens, torch.zeros_like(seq_lens))
    # Extra room in the block table for widened image windows.
    bt = torch.cat([bt, bt + 64], dim=1)
    idx = torch.full((count, 1, width), 99, dtype=torch.int32)
    lens = torch.full((count,), 99, dtype=torch.int32)
    eager.swa_indices_and_lens(
        idx,
        lens,
        window,
        width,
        left,
        right,
        qsl,
        seq_lens,
        t2r,
        valid,
        bt,
        bs,
        replay,
        num_tokens=count,
        token_offset=offset,
        has_image=has_image,
    )
    rows, elens = ref_swa(
        range(offset, n),
        width,
        window,
        qsl,
        seq_lens,
        t2r,
        valid,
        bt,
        bs,
        replay,
        left,
        right,
        False,
    )
    assert idx[:, 0, :].tolist() == rows
    assert lens.tolist() == elens


@pytest.mark.parametrize("mix", MIXES)
@pytest.mark.parametrize("window,width", [(4, 64), (16, 64)])
def test_dspark_noncausal_swa_indices(mix, window, width):
    bs = 16
    qsl, seq_lens, bt, n, t2r, valid, _ = _token_view(mix, bs, window + 3 * len(mix))
    idx = torch.full((n, width), 99, dtype=torch.int32)
    lens = torch.full((n,), 99, dtype=torch.int32)
    eager.dspark_noncausal_swa_indices(
        idx, lens, window, width, qsl, seq_lens, t2r, valid, bt, bs, num_tokens=n, token_offset=0
    )
    rows, elens = ref_swa(
        range(n), width, window, qsl, seq_lens, t2r, valid, bt, bs, None, None, None, True
    )
    assert idx.tolist() == rows
    assert lens.tolist() == elens


@pytest.mark.parametrize("query_lens", [[3, 0, 5, 1], [1, 1, 1], [7], [0, 4, 0]])
@pytest.mark.parametrize("extra", [0, 3])
def test_token_to_req_indices(query_lens, extra):
    qsl = torch.tensor([0] + list(torch.cumsum(torch.tensor(query_lens), 0)), dtype=torch.int32)
    mapped = int(qsl[-1])
    out = torch.full((mapped + extra + 2,), -9, dtype=torch.int32)
    got = eager.token_to_req_indices(qsl, out, mapped, mapped + extra)
    expected = []
    for t in range(mapped + extra):
        if t >= mapped:
            expected.append(0)
            continue
        # The kernel's binary search: the first request whose end lies past t.
        expected.append(next(r for r in range(len(query_lens)) if int(qsl[r + 1]) > t))
    assert got.tolist() == expected
    assert out[mapped + extra :].tolist() == [-9, -9]
