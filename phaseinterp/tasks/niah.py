"""Text-mode NIAH on real tokenizers with the DeepSeek-V4 protocol, at any context length.

The paper's DeepSeek-V4 test: 128K-token prompts holding 16,000 four-token key-value records
(two-token keys, two-token values), the target key near the middle, the query position fixed,
and target positions matched in mean and variance across residues mod 8. `deepseek_niah` builds
that protocol for any `seq_len` on top of `phaseinterp.tasks.TextRecordLookup` (which verifies
every position by re-tokenizing), with the record density of the paper (16,000 / 131,072) unless
`n_records` is given. `single_token_words` finds word lists a tokenizer keeps as single tokens;
`text_record_lookup` builds the registry's "text_record_lookup" task from a tokenizer (or its folder).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from phaseinterp.tasks.text import TextRecordLookup

PAPER_DENSITY = 16_000 / 131_072  # records per token in the paper's 128K prompts


def single_token_words(tokenizer: Any, n: int, *, exclude: Sequence[str] = (), probe: str | None = None,
                       separator: str = " ", seed: int = 0, min_chars: int = 2) -> list[str]:
    """`n` distinct alphabetic words that are exactly one token after `probe + separator`.

    Candidates are the tokenizer's vocabulary entries, decoded; a word qualifies when it is
    lowercase ASCII letters (at least `min_chars`) and re-tokenizes to the same single id in
    context. The result is a seeded random sample, in a fixed order.

    Raises:
        ValueError: when the vocabulary holds fewer than `n` such words.

    Example:
        >>> from phaseinterp.backends.tiny import word_tokenizer
        >>> words = single_token_words(word_tokenizer(), 300)
        >>> keys, values, filler = words[:60], words[60:260], words[260:]
        >>> len(words), words[:3]
        (300, ['hot', 'cet', 'ged'])
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} is invalid: allowed an integer >= 1")
    skip = set(exclude)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    words = sorted({tokenizer.decode([i]).strip() for _, i in vocab if i not in special})
    words = [w for w in words if len(w) >= min_chars and w.isascii() and w.isalpha() and w.islower() and w not in skip]
    rng = np.random.default_rng(seed)
    rng.shuffle(words)
    probe = probe if probe is not None else (words[0] if words else "")
    base = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    out: list[str] = []
    for w in words:
        if w == probe:
            continue
        ids = list(tokenizer(probe + separator + w, add_special_tokens=False)["input_ids"])
        if ids[: len(base)] == base and len(ids) == len(base) + 1:
            out.append(w)
            if len(out) == n:
                return out
    raise ValueError(f"n={n} is out of range: the tokenizer has only {len(out)} single-token lowercase words "
                     f"(min_chars={min_chars}); lower n or give word lists")


def deepseek_niah(tokenizer: Any, seq_len: int, *, n_records: int | None = None, keys: Sequence[str] | None = None,
                  values: Sequence[str] | None = None, filler: Sequence[str] | None = None, n_demos: int = 8,
                  protocol: str = "prefix", chat_template: bool = False, seed: int = 0, **task_kwargs: Any
                  ) -> TextRecordLookup:
    """The DeepSeek-V4 NIAH protocol (four-token records, target in the middle, fixed query) as a
    text-mode task for `tokenizer` at context length `seq_len`.

    Args:
        tokenizer: a HuggingFace tokenizer (BOS, or its chat template with `chat_template`).
        seq_len: prompt length in tokens (template included).
        n_records: haystack records; default `seq_len * 16000 / 131072` (the paper's density),
            at least 8.
        keys, values, filler: word lists (each word one token in context); default drawn from the
            tokenizer's vocabulary with `single_token_words` (n_records keys, 2 n_records values).
        n_demos, protocol, chat_template: as in `TextRecordLookup` / `RecordLookup`.
        seed: seed of the default word lists.
        **task_kwargs: further `RecordLookup` arguments (spread, target_index, ...).

    Example:
        >>> from phaseinterp.backends.tiny import word_tokenizer
        >>> task = deepseek_niah(word_tokenizer(), 512)  # the paper: 131072 tokens
        >>> task.sample(2, modulus=8).tokens.shape       # the paper: 256 prompts per residue mod 8
        torch.Size([16, 512])
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 16:
        raise ValueError(f"seq_len={seq_len!r} is invalid: allowed an integer >= 16")
    n = max(8, int(seq_len * PAPER_DENSITY)) if n_records is None else n_records
    if keys is None or values is None or filler is None:
        words = single_token_words(tokenizer, 3 * n + 16, seed=seed)
        keys = keys if keys is not None else words[:n]
        values = values if values is not None else words[n : 3 * n]
        filler = filler if filler is not None else words[3 * n :]
    return TextRecordLookup(tokenizer, keys, values, filler, chat_template=chat_template, key_len=2, value_len=2,
                            n_records=n, n_demos=n_demos, protocol=protocol, seq_len=seq_len, **task_kwargs)


def text_record_lookup(tokenizer: Any, keys: Sequence[str] | None = None, values: Sequence[str] | None = None,
                       filler: Sequence[str] | None = None, *, n_records: int = 64, word_seed: int = 0,
                       **options: Any) -> TextRecordLookup:
    """The registry's builder of "text_record_lookup": `tokenizer` an object or a HuggingFace
    tokenizer folder / name (loaded offline with `AutoTokenizer`); word lists default to
    `single_token_words` (n_records keys, 2 n_records values, 16 filler words; `word_seed`)."""
    if isinstance(tokenizer, str) or tokenizer is None:
        if not tokenizer:
            raise ValueError("tokenizer=None is invalid: allowed a HuggingFace tokenizer or the folder holding one")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    if keys is None or values is None or filler is None:
        words = single_token_words(tokenizer, 3 * n_records + 16, seed=word_seed)
        keys = keys if keys is not None else words[:n_records]
        values = values if values is not None else words[n_records : 3 * n_records]
        filler = filler if filler is not None else words[3 * n_records :]
    return TextRecordLookup(tokenizer, keys, values, filler, n_records=n_records, **options)
