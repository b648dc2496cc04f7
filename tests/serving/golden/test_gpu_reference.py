"""The CPU log-probabilities the GPU numerics test reads are those of today's golden model.

tests/gpu/data/numeric-cpu.json travels to the GPU machine (it has no CPU backend). If the
golden model changes and the file is not rewritten (``python -m tests.gpu.cpu_reference``),
this fails here, before a GPU run compares against a stale model.
"""

import json

from tests.gpu.cpu_reference import REFERENCE, checkpoint_digest, numeric_model
from tests.gpu.jobs import NUMERIC_MAX_TOKENS, NUMERIC_PROMPTS


def test_reference_is_of_todays_numeric_checkpoint(tmp_path):
    record = json.loads(REFERENCE.read_text())
    assert record["checkpoint_sha256"] == checkpoint_digest(numeric_model(tmp_path))
    assert record["prompts_words"] == [len(p.split()) for p in NUMERIC_PROMPTS]
    assert record["max_tokens"] == NUMERIC_MAX_TOKENS
    for run in record["runs"].values():
        assert [len(r["token_ids"]) for r in run["results"]] == [NUMERIC_MAX_TOKENS] * 2
        # every prompt position but the first was scored: the long prompt passes 2048 tokens
        assert [len(r["prompt_logprobs"]) for r in run["results"]][0] > 2048
