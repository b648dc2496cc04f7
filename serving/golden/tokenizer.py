"""A word-level tokenizer for the golden vocabulary, built locally with `tokenizers`."""

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from serving.golden.design import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, GoldenDesign

_SPACE = "\u2581"
# DSV4's chat layout in non-thinking mode, for clients that use the HF template;
# vLLM's `deepseek_v4` tokenizer mode encodes chats itself, ending the same way.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}<｜Assistant｜></think>{{ message['content'] }}"
    "{{ eos_token }}{% else %}<｜User｜>{{ message['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜></think>{% endif %}"
)


def build_tokenizer(design: GoldenDesign, words: list[str] | None = None) -> Tokenizer:
    """The golden vocabulary, and ``words`` after it (a bench model's larger vocabulary)."""
    vocab = {
        tok if tok in SPECIAL_TOKENS else _SPACE + tok: i
        for i, tok in enumerate([*design.vocab, *(words or [])])
    }
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS[UNK_ID]))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_SPACE, prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement=_SPACE, prepend_scheme="never")
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def write_tokenizer(
    design: GoldenDesign,
    out_dir: Path,
    words: list[str] | None = None,
    max_length: int = 4096,
) -> None:
    build_tokenizer(design, words).save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "unk_token": SPECIAL_TOKENS[UNK_ID],
        "add_bos_token": False,
        "model_max_length": max_length,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
