"""A word-level tokenizer for the golden vocabulary, built locally with `tokenizers`."""

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from serving.golden.design import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, GoldenDesign

_SPACE = "\u2581"
# Chat turns are joined into plain words: the golden model continues from the last word.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }} {% endfor %}"


def build_tokenizer(design: GoldenDesign) -> Tokenizer:
    vocab = {
        tok if tok in SPECIAL_TOKENS else _SPACE + tok: i for i, tok in enumerate(design.vocab)
    }
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS[UNK_ID]))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_SPACE, prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement=_SPACE, prepend_scheme="never")
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def write_tokenizer(design: GoldenDesign, out_dir: Path) -> None:
    build_tokenizer(design).save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "unk_token": SPECIAL_TOKENS[UNK_ID],
        "add_bos_token": False,
        "model_max_length": 4096,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
