"""Text mode: record lookup from word lists for a real (HuggingFace) tokenizer.

Every key, value and filler word must be exactly one token in context (after a separator);
prompts are built at the token level as in `RecordLookup`, rendered to text, and re-tokenized
(with BOS or the chat template) to check that the tokens, and therefore every recorded
absolute position, are what the model will see.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from jaxtyping import Int
from torch import Tensor

from phaseinterp.tasks.batch import PhaseBatch
from phaseinterp.tasks.pools import TokenPools
from phaseinterp.tasks.record_lookup import RecordLookup


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _single_token_ids(tokenizer: Any, words: Sequence[str], role: str, probe: str, sep: str) -> np.ndarray:
    """Id of each word as it tokenizes after `probe + sep`; ValueError if it is not one token."""
    base = _encode(tokenizer, probe)
    unk = getattr(tokenizer, "unk_token_id", None)
    ids = []
    for word in words:
        got = _encode(tokenizer, probe + sep + word)
        if got[: len(base)] != base or len(got) != len(base) + 1:
            pieces = tokenizer.convert_ids_to_tokens(got[len(base):] if got[: len(base)] == base else got)
            raise ValueError(
                f"{role} {word!r} is not a single token: it tokenizes to {pieces} in context; the "
                f"record-lookup protocol needs single-token {role}s (use several words per "
                f"{role} with key_len/value_len > 1)")
        if unk is not None and got[-1] == unk:
            raise ValueError(f"{role} {word!r} is unknown to the tokenizer (maps to {tokenizer.unk_token!r})")
        ids.append(got[-1])
    if len(set(ids)) != len(ids):
        raise ValueError(f"two {role} words map to the same token id")
    return np.array(ids, dtype=np.int64)


class TextRecordLookup:
    """`RecordLookup` on a real tokenizer, with positions verified by re-tokenization.

    Args:
        tokenizer: a HuggingFace tokenizer (callable, `convert_ids_to_tokens`, optionally
            `apply_chat_template`).
        keys, values, filler: word lists (disjoint; each word one token in context).
        chat_template: wrap the prompt as a user message with the tokenizer's chat template
            and the generation prompt; the answer is scored at the last template token.
        separator: text between consecutive words.
        **task_kwargs: passed to `RecordLookup` (n_records, n_demos, protocol, seq_len, ...).

    Without a chat template the prompt is the tokenizer's BOS (added by its post-processor,
    or written as text when the post-processor adds none) followed by the words.

    Example:
        >>> from phaseinterp.backends.tiny import word_tokenizer
        >>> from phaseinterp.tasks.niah import single_token_words
        >>> tok = word_tokenizer()
        >>> words = single_token_words(tok, 300)
        >>> keys, values, filler = words[:60], words[60:260], words[260:]
        >>> task = TextRecordLookup(tok, keys, values, filler, n_records=16, n_demos=2)
        >>> batch = task.sample(4, modulus=4)
        >>> batch.tokens.shape, task.text(batch.tokens[0])[:24]
        (torch.Size([16, 49]), '<s> hev hop cuh bat gog ')
    """

    #: The task's registry name (`phaseinterp.tasks.TASK_KINDS`).
    name = "text_record_lookup"

    def __init__(self, tokenizer: Any, keys: Sequence[str], values: Sequence[str], filler: Sequence[str],
                 *, chat_template: bool = False, separator: str = " ", **task_kwargs: Any) -> None:
        overlap = (set(keys) & set(values)) | (set(keys) & set(filler)) | (set(values) & set(filler))
        if overlap:
            raise ValueError(f"word lists must be disjoint; shared: {sorted(overlap)[:5]}")
        if not filler:
            raise ValueError("filler word list is empty")
        self.tokenizer, self.chat_template, self.separator = tokenizer, chat_template, separator
        self.words = {"keys": list(keys), "values": list(values), "filler": list(filler)}
        self.task_kwargs = dict(task_kwargs)
        if chat_template and getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("chat_template=True but the tokenizer has no chat template")
        probe = filler[0]
        ids = {role: _single_token_ids(tokenizer, words, role, probe, separator)
               for role, words in (("key", keys), ("value", values), ("filler", filler))}
        self._words = {int(i): w for role, words in (("key", keys), ("value", values), ("filler", filler))
                       for i, w in zip(ids[role], words)}
        self._manual_bos = False
        head, tail = self._frame(list(filler[:3]), ids["filler"][:3])
        pools = TokenPools(keys=ids["key"], values=ids["value"], filler=ids["filler"], head=head, tail=tail)
        self.task = RecordLookup(vocab_size=len(tokenizer), pools=pools, **task_kwargs)

    def _wrap(self, content: str) -> tuple[str, bool]:
        """Full prompt text and whether the tokenizer should add special tokens."""
        if self.chat_template:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                      tokenize=False, add_generation_prompt=True)
            return text, False
        if self._manual_bos:
            return self.tokenizer.bos_token + self.separator + content, False
        return content, True

    def _tokenize(self, content: str) -> list[int]:
        text, special = self._wrap(content)
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def _frame(self, probe_words: list[str], probe_ids: np.ndarray) -> tuple[list[int], list[int]]:
        """Template ids before (head) and after (tail) the content, from a probe prompt."""
        full = self._tokenize(self.separator.join(probe_words))
        if not self.chat_template and self.tokenizer.bos_token_id is not None and full[:1] != [self.tokenizer.bos_token_id]:
            self._manual_bos = True
            full = self._tokenize(self.separator.join(probe_words))
        probe = list(probe_ids)
        for start in range(len(full) - len(probe) + 1):
            if full[start : start + len(probe)] == probe:
                return full[:start], full[start + len(probe) :]
        raise ValueError(f"could not find the prompt content {probe} in its tokenization {full}; "
                         "the template changes how the first words tokenize")

    def text(self, tokens: Int[Tensor, " pos"] | Sequence[int]) -> str:
        """The prompt text (template included) whose tokenization is `tokens`."""
        ids = [int(t) for t in tokens]
        pools = self.task.pools
        body = ids[len(pools.head) : len(ids) - len(pools.tail)]
        return self._wrap(self.separator.join(self._words[i] for i in body))[0]

    def verify(self, batch: PhaseBatch) -> PhaseBatch:
        """Re-tokenize every prompt's text and check it gives back the batch's tokens.

        Raises:
            ValueError: naming the prompt and the first position where the tokens differ.
        """
        pools = self.task.pools
        seen: set[int] = set()
        for row, pid in enumerate(batch.prompt_id.tolist()):
            if pid in seen:
                continue
            seen.add(pid)
            want = batch.tokens[row].tolist()
            body = want[len(pools.head) : len(want) - len(pools.tail)]
            got = self._tokenize(self.separator.join(self._words[i] for i in body))
            if got != want:
                at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                raise ValueError(f"re-tokenizing prompt {pid} changed position {at}: expected "
                                 f"{want[at:at + 3]}, got {got[at:at + 3]} (lengths {len(want)} vs {len(got)})")
        return batch

    def card(self) -> dict[str, Any]:
        """`{"task": "text_record_lookup", "tokenizer": its name or path, word lists, options}`; the
        tokenizer is named by `name_or_path` (an object without one cannot be rebuilt from the card)."""
        return {"task": self.name, "tokenizer": getattr(self.tokenizer, "name_or_path", None) or None,
                **self.words, "chat_template": self.chat_template, "separator": self.separator, **self.task_kwargs}

    def sample(self, n_per_residue: int, modulus: int, **kwargs: Any) -> PhaseBatch:
        """`RecordLookup.sample`, then `verify` (the positions survive re-tokenization)."""
        batch = self.task.sample(n_per_residue, modulus, **kwargs)
        batch.meta["text_mode"] = {"chat_template": self.chat_template, "separator": self.separator}
        return self.verify(batch)


TASKS = {"record_lookup": RecordLookup, "text_record_lookup": TextRecordLookup}
