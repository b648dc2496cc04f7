"""What the golden model computes, defined independently of vLLM.

Tokens are one-hot directions of the hidden space. Every attention output
projection (``wo_b``) and every expert down projection (``w2``) is zero, so each
layer adds nothing and the residual stream carries the input token's embedding
to the head. The head maps each token's direction to its successor, so greedy
decoding walks a fixed ring of words. The MTP layer sees the token the target just
produced; its ``e_proj`` is a permutation that is the identity on "agreeing"
tokens, so on those the draft proposes exactly the target's next token.
"""

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

# DeepSeek-V4's own special tokens, so vLLM's `deepseek_v4` chat encoder works on the
# golden tokenizer. A chat prompt ends in "</think>" (or "<think>"), whose successor
# is the first word: chat replies walk the ring from there.
SPECIAL_TOKENS = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜▁pad▁｜>",
    "<unk>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
)
BOS_ID, EOS_ID, PAD_ID, UNK_ID = range(4)
THINK_END_ID = SPECIAL_TOKENS.index("</think>")
HIDDEN_SIZE = 256
VOCAB_SIZE = HIDDEN_SIZE  # one-hot embeddings need vocab <= hidden
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def _word_list(count: int) -> list[str]:
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words = sorted({a + b for a in syllables for b in syllables})
    # random.Random(int) is stable across Python versions: same words everywhere.
    return random.Random(20260430).sample(words, count)


# "designed": every layer adds nothing, so text and MTP acceptance are known exactly.
# "numeric": attention, experts and hyper-connections write into the residual stream,
#   so attention, compressor, indexer, MoE and mHC numerics reach the logits; the text
#   is deterministic but not designed (for comparing kernel paths with each other).
# "clamp": experts and hyper-connections live, attention still silent, and routed
#   up/gate projections large enough that SwiGLU's clamp (swiglu_limit) bites on about
#   1% of elements (for comparing vLLM's MoE with a plain-torch statement of DSV4's).
VARIANTS = ("designed", "numeric", "clamp")
# How the checkpoint stores the weights: "bf16" as designed; "fp8" in DeepSeek-V4's FP8
# release format (serving/golden/fp8.py), the same model through vLLM's quantized path.
WEIGHT_FORMATS = ("bf16", "fp8")
# Which words the MTP draft gets wrong: "random", a draft_agreement share of them at
# random; "families", the ring cut into three arcs whose acceptance is designed (FAMILIES).
DRAFT_PATTERNS = ("random", "families")
# Arc of the word ring -> the labels repeated along it (A: the draft agrees, D: it does not).
# A step accepts the run of A's from the last token on, so "high" accepts every draft,
# "zero" none, and "half" ("ADD": a step at an A accepts one, lands on a D, accepts none)
# accepts half the first drafts and no later one. The target's ring is the same in every
# pattern, so the greedy text is too; only the draft changes.
FAMILIES = {"high": "A", "half": "ADD", "zero": "D"}
_FAMILY_ARC_WORDS = 81  # words per arc (a multiple of 3, so "half" closes on its pattern)
# The final norm turns a token's one-hot direction into one of length sqrt(HIDDEN_SIZE) at
# its entry, so a head entry w gives the logit 16 w.
HEAD_INPUT_SCALE = math.sqrt(HIDDEN_SIZE)
# A spread target (next_token_choices > 1): the successor's logit and how far below it the
# other choices sit. Both are exact in bf16 once divided by 16, and the 0 logits of the
# other words then hold under 1e-11 of the probability.
SPREAD_TOP_LOGIT = 32.0
SPREAD_LOGIT_GAP = 1.0
MAX_NEXT_TOKEN_CHOICES = 8
DRAFT_LOGIT_SCALES = (0.5, 1.0, 2.0)  # powers of two: the norm weight stays exact
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")


@dataclass(frozen=True)
class GoldenDesign:
    draft_agreement: float = 1.0
    seed: int = 0
    variant: str = "designed"
    weight_format: str = "bf16"
    draft_pattern: str = "random"
    # Words the target's next-token distribution spreads over: 1, it is certain (the
    # successor); c > 1, the next c words of the ring, the successor one logit above the
    # rest. Greedy text is the same; at temperature 1 a walk steps 1 to c words ahead. The
    # MTP drafter shares the head and sees the same token, so its distribution is the
    # target's scaled by draft_logit_scale: what greedy and probabilistic drafting then
    # accept is known (expected_acceptance_rates).
    next_token_choices: int = 1
    # The drafter's logits over the target's (its final norm's weight, so exact in bf16 for
    # a power of two): 1 gives q = p; 0.5 a flatter q, so that probabilistic drafts are
    # accepted with sum_x min(p, q) < 1 and vLLM's ratio test is exercised, not bypassed.
    draft_logit_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.draft_pattern not in DRAFT_PATTERNS:
            raise ValueError(
                f"draft_pattern must be one of {', '.join(DRAFT_PATTERNS)}, "
                f"got {self.draft_pattern!r}"
            )
        if self.draft_pattern == "families" and self.draft_agreement != 1.0:
            raise ValueError("draft_agreement applies to draft_pattern 'random' only")
        if not 0.0 <= self.draft_agreement <= 1.0:
            raise ValueError(f"draft_agreement must be in [0, 1], got {self.draft_agreement}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.weight_format not in WEIGHT_FORMATS:
            raise ValueError(
                f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, "
                f"got {self.weight_format!r}"
            )

        if not 1 <= self.next_token_choices <= MAX_NEXT_TOKEN_CHOICES:
            raise ValueError(
                f"next_token_choices must be in [1, {MAX_NEXT_TOKEN_CHOICES}], "
                f"got {self.next_token_choices}"
            )
        if self.draft_logit_scale != 1.0 and (
            not self.spread or self.draft_logit_scale not in DRAFT_LOGIT_SCALES
        ):
            raise ValueError(
                "draft_logit_scale needs next_token_choices > 1 and one of "
                f"{', '.join(map(str, DRAFT_LOGIT_SCALES))}, got {self.draft_logit_scale}"
            )
        if self.spread and (
            self.variant != "designed"
            or self.weight_format != "bf16"
            or self.draft_pattern != "random"
            or self.draft_agreement != 1.0
        ):
            raise ValueError(
                "next_token_choices > 1 needs the designed bf16 variant with every draft "
                "input kept (draft_agreement 1, draft_pattern random)"
            )

    @property
    def spread(self) -> bool:
        return self.next_token_choices > 1

    @property
    def attention_live(self) -> bool:
        return self.variant == "numeric"

    @property
    def experts_live(self) -> bool:
        return self.variant in ("numeric", "clamp")

    @cached_property
    def words(self) -> list[str]:
        return _word_list(VOCAB_SIZE - len(SPECIAL_TOKENS))

    @property
    def vocab(self) -> list[str]:
        return list(SPECIAL_TOKENS) + self.words

    @property
    def first_word_id(self) -> int:
        return len(SPECIAL_TOKENS)

    def successor(self, token_id: int) -> int:
        """The target's greedy next token: the next word on the ring."""
        first, n = self.first_word_id, len(self.words)
        if token_id < first:
            return first
        return first + (token_id - first + 1) % n

    def choices(self, token_id: int) -> list[int]:
        """The tokens a spread target may put after ``token_id``, its favourite first."""
        out, token = [], token_id
        for _ in range(self.next_token_choices if token_id >= self.first_word_id else 1):
            token = self.successor(token)
            out.append(token)
        return out

    def next_token_logits(self, token_id: int) -> dict[int, float]:
        """The head's non-zero logits after ``token_id`` (every other word's logit is 0)."""
        if not self.spread:
            raise ValueError("next_token_logits describes a spread target (next_token_choices > 1)")
        top, *rest = self.choices(token_id)
        return {top: SPREAD_TOP_LOGIT} | {t: SPREAD_TOP_LOGIT - SPREAD_LOGIT_GAP for t in rest}

    def next_token_probs(self, token_id: int, scale: float = 1.0) -> dict[int, float]:
        """The target's distribution after ``token_id`` at temperature 1, or with ``scale``
        the drafter's (softmax over the whole vocabulary; the zero-logit words' share is
        left out: under 1e-11 for the target, under 1e-4 at scale 0.5)."""
        logits = {t: v * scale for t, v in self.next_token_logits(token_id).items()}
        top = max(logits.values())
        zero_words = VOCAB_SIZE - len(logits)
        norm = sum(math.exp(v - top) for v in logits.values()) + zero_words * math.exp(-top)
        return {t: math.exp(v - top) / norm for t, v in logits.items()}

    def draft_probs(self, token_id: int) -> dict[int, float]:
        """The MTP drafter's distribution after it saw ``token_id``: the shared head's
        logits scaled by draft_logit_scale."""
        return self.next_token_probs(token_id, self.draft_logit_scale)

    def expected_acceptance_rates(self, k: int, draft_sample_method: str) -> list[float]:
        """Accepted drafts at each of k positions per draft step, at temperature 1.

        vLLM's rejection sampler accepts a draft x with probability min(1, p(x) / q(x)):
        a greedy draft is the drafter's argmax with q treated as one-hot, so it is accepted
        with p(argmax q); a probabilistic draft is sampled from q and accepted with
        sum_x min(p(x), q(x)) in all. The drafter's q is the target's logits scaled by
        draft_logit_scale (q = p at 1), and every word has the same distributions up to a
        shift, so a position is reached with the previous one's probability times that
        acceptance."""
        if draft_sample_method not in DRAFT_SAMPLE_METHODS:
            raise ValueError(
                f"draft_sample_method must be one of {', '.join(DRAFT_SAMPLE_METHODS)}, "
                f"got {draft_sample_method!r}"
            )
        if not self.spread:
            raise ValueError("expected_acceptance_rates describes a spread target")
        p = self.next_token_probs(self.first_word_id)
        q = self.draft_probs(self.first_word_id)  # the drafter sees the same token
        if draft_sample_method == "greedy":
            accept = p[max(q, key=q.__getitem__)]
        else:
            accept = sum(min(p[t], q[t]) for t in p)
        return [accept ** (i + 1) for i in range(k)]

    @cached_property
    def disagreeing_tokens(self) -> frozenset[int]:
        """Word ids on which the MTP draft is deliberately wrong."""
        word_ids = list(range(self.first_word_id, VOCAB_SIZE))
        if self.draft_pattern == "families":
            return frozenset(
                token
                for family, labels in FAMILIES.items()
                for i, token in enumerate(self.family_arc(family))
                if labels[i % len(labels)] == "D"
            )
        count = round((1.0 - self.draft_agreement) * len(word_ids))
        return frozenset(random.Random(self.seed + 7).sample(word_ids, count))

    def family_arc(self, family: str) -> list[int]:
        """The word ids of one family's arc, in ring order (families pattern)."""
        index = list(FAMILIES).index(family)  # ValueError names an unknown family
        start = self.first_word_id + index * _FAMILY_ARC_WORDS
        return list(range(start, start + _FAMILY_ARC_WORDS))

    def family_prompt(self, family: str, offset: int = 0, words: int = 2) -> str:
        """A prompt whose greedy walk starts at the family's arc (its last word there).

        Its continuation stays inside the arc for ``family_span(offset)`` tokens, so a
        request of at most that many tokens meets only the family's designed drafts."""
        last = self.family_arc(family)[3 * offset]  # a multiple of 3: "half" starts on an A
        first = self.first_word_id
        ids = [first + (last - first - words + 1 + i) % len(self.words) for i in range(words)]
        return " ".join(self.vocab[i] for i in ids)

    def family_span(self, offset: int = 0, k: int = 3) -> int:
        """Tokens a family prompt may ask for and stay in its arc with k drafts looked at."""
        return _FAMILY_ARC_WORDS - 3 * offset - k - 1

    def draft_input_map(self, token_id: int) -> int:
        """The token whose direction the MTP ``e_proj`` maps ``token_id`` to."""
        if token_id not in self.disagreeing_tokens:
            return token_id
        # A different word: its successor then differs from the target's.
        return self.successor(self.successor(token_id))

    def draft(self, token_id: int) -> int:
        """The MTP layer's proposal after the target produced ``token_id``."""
        return self.successor(self.draft_input_map(token_id))

    def greedy(self, prompt_ids: list[int], max_tokens: int) -> list[int]:
        out, last = [], prompt_ids[-1]
        for _ in range(max_tokens):
            last = self.successor(last)
            out.append(last)
        return out

    def token_ids(self, text: str) -> list[int]:
        index = {w: i for i, w in enumerate(self.vocab)}
        return [index.get(w, UNK_ID) for w in text.lower().split()]

    def render(self, ids: list[int]) -> str:
        """Text of generated word ids, as the tokenizer's decoder renders it."""
        return "".join(" " + self.vocab[i] for i in ids)

    def continuation(self, prompt: str, max_tokens: int) -> str:
        """Expected greedy completion text of a plain (completions API) prompt."""
        return self.render(self.greedy(self.token_ids(prompt), max_tokens))

    def chat_reply(self, max_tokens: int) -> str:
        """Expected greedy chat reply: DSV4's chat encoding ends every prompt in a marker."""
        return self.render(self.greedy([THINK_END_ID], max_tokens))

    def expected_spec_counters(
        self, prompt: str, max_tokens: int, k: int, k_schedule: Sequence[int] | None = None
    ) -> dict[str, object]:
        """vLLM's spec-decode counters for one greedy request, by simulating MTP with k drafts.

        After prefill produces the first token, each step drafts a chain of k tokens
        from the last token, the target accepts the longest correct prefix and adds
        one token of its own. Seen in vLLM 0.32 on the CPU and on an H200 alike: after a
        one-token prompt the first draft step has every draft rejected (README, "Verified
        on a GPU"), so that step is simulated as one.

        ``k_schedule`` (repeated): the drafts proposed at the end of each step, the
        prefill step first, for a lone request under a guard that varies k; a step
        verifies what the step before proposed, and a step after a 0 drafts nothing.
        """
        if self.spread:
            raise ValueError("a spread target is sampled: see expected_acceptance_rates")
        schedule = list(k_schedule) if k_schedule else [k]
        prompt_ids = self.token_ids(prompt)
        last = self.successor(prompt_ids[-1])
        produced, drafts, draft_tokens, per_pos = 1, 0, 0, [0] * k
        step, proposed = 0, min(schedule[0], k)
        while produced < max_tokens:
            step += 1
            verify, proposed = proposed, min(schedule[step % len(schedule)], k)
            if verify == 0:
                produced += 1
                last = self.successor(last)
                continue
            drafts += 1
            draft_tokens += verify
            proposal, cur, accepted = last, last, 0
            if drafts == 1 and len(prompt_ids) == 1:
                produced += 1
                last = self.successor(cur)
                continue
            for pos in range(verify):
                proposal = self.draft(proposal)
                if accepted == pos and proposal == self.successor(cur):
                    accepted += 1
                    per_pos[pos] += 1
                    cur = proposal
            produced += accepted + 1
            last = self.successor(cur)
        return {
            "vllm:spec_decode_num_drafts": drafts,
            "vllm:spec_decode_num_draft_tokens": draft_tokens,
            "vllm:spec_decode_num_accepted_tokens": sum(per_pos),
            "vllm:spec_decode_num_accepted_tokens_per_pos": per_pos,
        }
