"""`PhaseBatch`: a phase-stratified set of lookup prompts with every position recorded."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import torch
from jaxtyping import Int
from torch import Tensor

_ROW_FIELDS = ("tokens", "answers", "key_pos", "value_pos", "query_pos", "residue",
               "example_id", "prompt_id", "record_pos")


@dataclass(frozen=True)
class PhaseBatch:
    """Prompts for a phase sweep, one row per scored query.

    All positions are absolute indices into `tokens` (BOS at 0). The model is scored on the
    next-token logits at `query_pos`; a row is correct when their argmax is in `answers`. A task
    with a multi-token answer gives `answer_pos` instead (teacher forcing: the prompt holds the
    answer): the row is correct when the argmax at every `answer_pos[:, j]` is the prompt's next
    token there (exact match of every answer token; `phaseinterp.tasks.scoring`).

    Attributes:
        tokens: prompt token ids.
        answers: accepted answer ids (first value token of every record of the target key;
            column 0 is the target record's own value).
        key_pos: first key token of the target record.
        value_pos: first value token of the target record (`key_pos + key_len`).
        query_pos: position whose next-token logits are scored.
        residue: `key_pos % modulus`.
        example_id: logical example (one key->value mapping, rendered at every residue); the
            cluster for the bootstrap and the permutation test.
        prompt_id: rows with equal `prompt_id` share `tokens` (several queries per prompt).
        record_pos: start positions of all haystack records, in haystack order.
        modulus: residue modulus R.
        key_len: tokens per key. value_len: tokens per value.
        meta: task configuration, seed, split, achieved position moments.
        answer_pos: None (one answer token, scored at `query_pos` against `answers`), or the
            positions whose next token is an answer token, [batch, n_answer_tokens], column 0 ==
            `query_pos`, -1 padding a shorter answer; `tokens[answer_pos + 1]` are the answer.

    Example:
        >>> from phaseinterp.tasks import RecordLookup
        >>> batch = RecordLookup(vocab_size=256, n_records=8, n_demos=2).sample(4, modulus=4)
        >>> len(batch), bool((batch.tokens[torch.arange(len(batch)), batch.value_pos] == batch.answer).all())
        (16, True)
    """

    tokens: Int[Tensor, "batch pos"]
    answers: Int[Tensor, "batch n_answers"]
    key_pos: Int[Tensor, " batch"]
    value_pos: Int[Tensor, " batch"]
    query_pos: Int[Tensor, " batch"]
    residue: Int[Tensor, " batch"]
    example_id: Int[Tensor, " batch"]
    prompt_id: Int[Tensor, " batch"]
    record_pos: Int[Tensor, "batch n_records"]
    modulus: int
    key_len: int = 1
    value_len: int = 1
    meta: dict[str, Any] = field(default_factory=dict)
    answer_pos: Int[Tensor, "batch n_answer_tokens"] | None = None

    def __post_init__(self) -> None:
        n = self.tokens.shape[0]
        if self.tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, pos], got shape {tuple(self.tokens.shape)}")
        for name in self._rows():
            t = getattr(self, name)
            if t.dtype != torch.long:
                raise ValueError(f"{name} must be a LongTensor, got {t.dtype}")
            if t.shape[0] != n:
                raise ValueError(f"{name} has {t.shape[0]} rows, tokens has {n}")
        if self.modulus < 1:
            raise ValueError(f"modulus={self.modulus} out of range [1, inf)")
        if self.answer_pos is not None and (self.answer_pos.ndim != 2 or self.answer_pos.shape[1] < 1):
            raise ValueError(f"answer_pos must be [batch, n_answer_tokens >= 1], got shape {tuple(self.answer_pos.shape)}")

    def _rows(self) -> tuple[str, ...]:
        """The per-row tensor fields this batch has (answer_pos only when given)."""
        return _ROW_FIELDS if self.answer_pos is None else (*_ROW_FIELDS, "answer_pos")

    @property
    def answer(self) -> Int[Tensor, " batch"]:
        """The target record's own value token (`answers[:, 0]`)."""
        return self.answers[:, 0]

    @property
    def n_examples(self) -> int:
        """Number of distinct logical examples."""
        return int(self.example_id.unique().numel())

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, index: int | slice | Tensor | list[int]) -> PhaseBatch:
        """Rows selected by a slice, an index tensor or a boolean mask; an int gives one row."""
        if isinstance(index, int):
            if not -len(self) <= index < len(self):
                raise IndexError(f"row {index} out of range for a batch of {len(self)}")
            index = slice(index % len(self), index % len(self) + 1)
        return replace(self, **{name: getattr(self, name)[index] for name in self._rows()})

    def __iter__(self) -> Iterator[PhaseBatch]:
        """One-row batches; use `minibatches(size)` for larger ones."""
        return self.minibatches(1)

    def minibatches(self, size: int, whole_prompts: bool = False) -> Iterator[PhaseBatch]:
        """Consecutive row slices of at most `size` rows (rows of one prompt stay together when
        `size` is a multiple of the queries per prompt). With `whole_prompts`, a slice never splits
        the consecutive rows of one prompt (`prompt_id`), which a backend scores with one forward:
        as many whole prompts as fit in `size` rows, or one prompt alone when it has more.

        Example:
            >>> from phaseinterp.tasks import RecordLookup
            >>> b = RecordLookup(vocab_size=64, n_records=4, n_demos=1).sample(3, modulus=1)
            >>> b = b[torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])]  # three prompts of three rows each
            >>> [len(m) for m in b.minibatches(4)], [len(m) for m in b.minibatches(4, whole_prompts=True)]
            ([4, 4, 1], [3, 3, 3])
        """
        if size < 1:
            raise ValueError(f"minibatch size={size} out of range [1, inf)")
        if not whole_prompts:
            for start in range(0, len(self), size):
                yield self[start : start + size]
            return
        ids = self.prompt_id.tolist()
        cuts = [i for i in range(1, len(ids)) if ids[i] != ids[i - 1]] + [len(ids)]  # where each prompt's rows end
        start = end = 0
        for cut in cuts:
            if cut - start > size and end > start:  # the next prompt does not fit: close the slice
                yield self[start:end]
                start = end
            end = cut
        if end > start:
            yield self[start:end]

    def to(self, device: torch.device | str) -> PhaseBatch:
        """Copy of the batch with all tensors on `device`."""
        return replace(self, **{name: getattr(self, name).to(device) for name in self._rows()})

    def validate(self) -> PhaseBatch:
        """Check the invariants every generator must keep; return self.

        Checks: residue == key_pos mod R (value_pos mod R when meta["residue_of"] says so);
        value_pos == key_pos + key_len; the answer is the token at value_pos; the target record
        is one of `record_pos`; the query repeats the target key (when the prompt has no template
        footer); positions lie inside the prompt.

        Raises:
            ValueError: naming the first broken invariant.
        """
        T = self.tokens.shape[1]
        rows = torch.arange(len(self))
        checks = {
            # induction batches stratify by the copied token (meta residue_of="value_pos")
            "residue == key_pos % modulus": self.residue == getattr(self, self.meta.get("residue_of", "key_pos")) % self.modulus,
            "value_pos == key_pos + key_len": self.value_pos == self.key_pos + self.key_len,
            "positions in [0, seq_len)": (self.key_pos >= 0) & (self.query_pos < T) & (self.value_pos < T),
            "tokens[value_pos] == answer": self.tokens[rows, self.value_pos] == self.answer,
            "target record in record_pos": (self.record_pos == self.key_pos[:, None]).any(1),
        }
        if not self.meta.get("tail_tokens"):
            k = torch.arange(self.key_len)
            key = self.tokens[rows[:, None], self.key_pos[:, None] + k]
            query = self.tokens[rows[:, None], self.query_pos[:, None] - self.key_len + 1 + k]
            checks["query repeats the target key"] = (key == query).all(1)
        if self.answer_pos is not None:
            a, used = self.answer_pos, self.answer_pos >= 0
            checks["answer_pos[:, 0] == query_pos"] = a[:, 0] == self.query_pos
            checks["answer_pos in [0, seq_len - 1)"] = (~used | (a < T - 1)).all(1)
            checks["answer_pos consecutive, then -1"] = (~used[:, 1:] | (used[:, :-1] & (a[:, 1:] == a[:, :-1] + 1))).all(1)
            checks["tokens[query_pos + 1] == answer"] = self.tokens[rows, (self.query_pos + 1).clamp(max=T - 1)] == self.answer
        for name, ok in checks.items():
            if not bool(ok.all()):
                bad = int((~ok).nonzero()[0, 0])
                raise ValueError(f"PhaseBatch invariant broken at row {bad}: {name}")
        return self

    def describe(self) -> dict[str, Any]:
        """Plain summary: rows, examples, modulus, sequence length and the metadata."""
        return {"rows": len(self), "examples": self.n_examples, "modulus": self.modulus,
                "seq_len": self.tokens.shape[1], **self.meta}
