"""Completion-flip sweep: does the preferred next token depend on the filler length L mod P?

For a fixed prompt and candidate next tokens, the model reads `head + filler(L) + prompt` for each
L in a range; the next-token probabilities of the candidates at the last position are recorded.
Shifting the prompt by L tokens moves every prompt token's phase by L mod P (P the period: the
compressor stride, or the lcm of the strides) without changing its content, so a preference that
flips with L mod P is a phase effect (the paper: DeepSeek-V4-Flash-Base
preferred the right token iff L mod 4 in {2, 3}, in 60 of 64 cases).

Period analysis (`FlipResult.summary`), on the log-odds x(L) = log p(c0) - log p(c1):
- rule: the residues r = L mod P where c0 wins in most L, and how many L the rule "c0 wins iff
  L mod P in rule" gets right;
- share: the variance of x over L explained by L mod P, sum_r n_r (mean_r - mean)^2 / sum (x - mean)^2,
  with its expectation (P - 1)/(n - 1) for structureless data and a permutation p-value.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from phaseinterp.config import renamed_keyword
from phaseinterp.families.resolve import model_class
from phaseinterp.flip.filler import FAMILIES, FillerSpec
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import dumps, versions


@dataclass(frozen=True)
class FlipResult:
    """Candidate probabilities per filler length, with the period analysis.

    Attributes:
        lengths: filler lengths L. probs: [n_lengths, n_candidates] next-token probabilities
            (softmax over the full vocabulary). candidates: token ids. labels: their names.
        period: P of the analysis. family: filler family. head_len, prompt_len: tokens before the
            filler and after it. n_perm, seed: permutation test. config: provenance.
    """

    lengths: np.ndarray
    probs: np.ndarray
    candidates: tuple[int, ...]
    labels: tuple[str, ...]
    period: int
    family: str
    head_len: int
    prompt_len: int
    n_perm: int = 2000
    seed: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def residues(self) -> np.ndarray:
        """L mod P per length."""
        return self.lengths % self.period

    @property
    def preferred(self) -> np.ndarray:
        """Index of the most probable candidate per length."""
        return self.probs.argmax(1)

    @property
    def log_odds(self) -> np.ndarray:
        """log p(candidate 0) - log p(candidate 1) per length."""
        p = np.clip(self.probs, 1e-30, None)
        return np.log(p[:, 0]) - np.log(p[:, 1])

    def residue_table(self) -> pd.DataFrame:
        """Per residue r = L mod P: lengths, mean probability of each candidate, share of lengths
        where candidate 0 wins, mean log-odds."""
        rows = []
        for r in range(self.period):
            m = self.residues == r
            row = {"residue": r, "n": int(m.sum())}
            for j, name in enumerate(self.labels):
                row[f"p[{name}]"] = float(self.probs[m, j].mean()) if m.any() else float("nan")
            row["c0_wins"] = float((self.preferred[m] == 0).mean()) if m.any() else float("nan")
            row["log_odds"] = float(self.log_odds[m].mean()) if m.any() else float("nan")
            rows.append(row)
        return pd.DataFrame(rows)

    def rule(self) -> tuple[list[int], int, int]:
        """(residues where candidate 0 wins in most lengths, lengths the rule gets right, lengths)."""
        wins = self.preferred == 0
        rule = [r for r in range(self.period) if (self.residues == r).any() and wins[self.residues == r].mean() > 0.5]
        agree = int((np.isin(self.residues, rule) == wins).sum())
        return rule, agree, len(self.lengths)

    def share(self, x: np.ndarray | None = None) -> float:
        """Variance of the log-odds over L explained by L mod P (nan when it does not vary)."""
        x = self.log_odds if x is None else x
        total = ((x - x.mean()) ** 2).sum()
        if total <= 1e-24:
            return float("nan")
        between = sum((self.residues == r).sum() * (x[self.residues == r].mean() - x.mean()) ** 2
                      for r in range(self.period) if (self.residues == r).any())
        return float(between / total)

    def summary(self) -> dict[str, Any]:
        """Rule, agreement, share with its baseline and permutation p-value (seeded)."""
        rule, agree, n = self.rule()
        share = self.share()
        rng = np.random.default_rng(self.seed)
        x = self.log_odds
        null = np.array([self.share(rng.permutation(x)) for _ in range(self.n_perm)])
        p = float((1 + np.sum(null >= share - 1e-12)) / (1 + self.n_perm)) if np.isfinite(share) else float("nan")
        return {"period": self.period, "family": self.family, "candidates": list(self.labels), "rule": rule,
                "agree": agree, "lengths": n, "share": share,
                "share_baseline": (self.period - 1) / (n - 1) if n > 1 else float("nan"), "p_value": p}

    def describe(self) -> str:
        """One line, e.g. "'a' preferred iff L mod 4 in [2, 3]: 60 of 64 lengths; share 0.81 (p=0.0005)"."""
        s = self.summary()
        return (f"{self.labels[0]!r} preferred over {self.labels[1]!r} iff L mod {self.period} in {s['rule']}: "
                f"{s['agree']} of {s['lengths']} lengths; variance share of L mod {self.period}: {s['share']:.2f} "
                f"(structureless {s['share_baseline']:.2f}, p={s['p_value']:.4f})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        return d

    def save(self, path: str | Path) -> Path:
        """Write the result (with its summary and provenance) as JSON."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> FlipResult:
        """Read a result written by `save` (also one written before `stride` was renamed `period`)."""
        d = json.loads(Path(path).read_text())
        d.pop("summary", None)
        if "stride" in d and "period" not in d:
            d["period"] = d.pop("stride")
        d["lengths"], d["probs"] = np.array(d["lengths"]), np.array(d["probs"], dtype=np.float64)
        d["candidates"], d["labels"] = tuple(d["candidates"]), tuple(d["labels"])
        return cls(**d)


def _logits_fn(model: Any) -> Callable[[Tensor], Tensor]:
    def run(tokens: Tensor) -> Tensor:
        with torch.no_grad():
            out = model(tokens)
        return getattr(out, "logits", out)

    return run


def completion_flip(model: Any, prompt: Sequence[int] | Int[Tensor, " prompt"], candidates: Sequence[int],
                    lengths: Sequence[int], *, filler: FillerSpec, family: str = "symbol", period: int | None = None,
                    head: Sequence[int] = (), labels: Sequence[str] | None = None, batch_size: int = 16,
                    pad_id: int | None = None, n_perm: int = 2000, seed: int = 0, **deprecated: Any) -> FlipResult:
    """Probability of each candidate next token after `head + filler(L) + prompt`, for every L.

    Sequences of different lengths run together, right-padded: a causal model's logits at a row's
    last real token do not depend on later pad tokens, so padding changes no number.

    Args:
        model: any tokens -> logits callable (a backend, our model, a HF model).
        prompt: the fixed prompt's token ids (it ends where the candidate would come next).
        candidates: candidate next-token ids (at least 2; candidate 0 is the "right" one).
        lengths: filler lengths L (each 0 or at least the family's minimum).
        filler: token ids for the families. family: "symbol", "words" or "comment".
        period: P for the period analysis (required; the compressor stride, 4 for DeepSeek-V4 CSA).
            The old name `stride=` still works, with a DeprecationWarning.
        head: tokens before the filler (BOS); phases count from the first of them.
        labels: names of the candidates (default their ids).
        batch_size: sequences per forward. pad_id: right-padding token (default the filler symbol).
        n_perm, seed: permutation test of the summary.

    Example:
        >>> spec = FillerSpec(symbol=5, words=(7, 8, 9), comment_prefix=(3,), newline=4)
        >>> oracle = lambda t: torch.nn.functional.one_hot(t.roll(-1, 1), 16).float()
        >>> r = completion_flip(oracle, [10, 11], [12, 13], range(8), filler=spec, period=4, n_perm=10)
        >>> r.probs.shape
        (8, 2)
    """
    period = renamed_keyword("completion_flip", deprecated, "stride", "period", period)
    if period is None:
        raise TypeError("completion_flip() missing required keyword argument: 'period'")
    prompt = [int(t) for t in (prompt.tolist() if isinstance(prompt, Tensor) else prompt)]
    candidates = [int(c) for c in candidates]
    head = [int(t) for t in head]
    lengths = [int(x) for x in lengths]
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is invalid: allowed {list(FAMILIES)}")
    if not prompt:
        raise ValueError("prompt is empty: allowed one or more token ids")
    if len(candidates) < 2 or len(set(candidates)) != len(candidates):
        raise ValueError(f"candidates={candidates} is invalid: allowed two or more distinct token ids")
    if not lengths or len(set(lengths)) != len(lengths):
        raise ValueError(f"lengths={lengths} is invalid: allowed one or more distinct lengths")
    if isinstance(period, bool) or not isinstance(period, int) or period < 1:
        raise ValueError(f"period={period!r} is invalid: allowed an integer >= 1")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is out of range: allowed >= 1")
    labels = tuple(str(c) for c in candidates) if labels is None else tuple(labels)
    if len(labels) != len(candidates):
        raise ValueError(f"labels has {len(labels)} names for {len(candidates)} candidates")
    seqs = [head + filler.tokens(family, L) + prompt for L in lengths]  # validates every L
    pad = filler.symbol if pad_id is None else pad_id
    run = _logits_fn(model)
    probs = []
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start : start + batch_size]
        T = max(len(s) for s in chunk)
        tokens = torch.tensor([s + [pad] * (T - len(s)) for s in chunk])
        logits = run(tokens)
        last = torch.tensor([len(s) - 1 for s in chunk], device=logits.device)
        p = logits[torch.arange(len(chunk), device=logits.device), last].float().softmax(-1)
        probs.append(p[:, candidates].cpu())
    config = {"prompt": prompt, "head": head, "pad_id": pad, "filler": asdict(filler), "versions": versions(),
              "model": model_class(model)}
    return FlipResult(np.array(lengths), torch.cat(probs).double().numpy(), tuple(candidates), labels, period,
                      family, len(head), len(prompt), n_perm, seed, config)


def completion_flip_text(model: Any, tokenizer: Any, prompt: str, candidates: Sequence[str], lengths: Sequence[int],
                         *, period: int | None = None, family: str = "symbol", filler: FillerSpec | None = None,
                         **kwargs: Any) -> FlipResult:
    """`completion_flip` from text: the prompt is tokenized once (without special tokens, after the
    tokenizer's BOS when it has one); each candidate must add exactly one token to the prompt.
    `period` as in `completion_flip` (the old name `stride=` still works, with a DeprecationWarning).

    Example:
        >>> r = completion_flip_text(backend, tok, "x = torch.float8_e4m3", ["fn", "fnuz"], range(64), period=4)  # doctest: +SKIP
        >>> r.describe()  # doctest: +SKIP
    """
    if "stride" in kwargs:
        period = renamed_keyword("completion_flip_text", {"stride": kwargs.pop("stride")}, "stride", "period", period)
    ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    cands = []
    for c in candidates:
        full = list(tokenizer(prompt + c, add_special_tokens=False)["input_ids"])
        if full[: len(ids)] != ids or len(full) != len(ids) + 1:
            raise ValueError(f"candidate {c!r} is invalid: after the prompt it must add exactly one token, "
                             f"it adds {tokenizer.convert_ids_to_tokens(full[len(ids):])}")
        cands.append(full[-1])
    head = [tokenizer.bos_token_id] if getattr(tokenizer, "bos_token_id", None) is not None else []
    filler = FillerSpec.from_tokenizer(tokenizer) if filler is None else filler
    kwargs.setdefault("labels", list(candidates))
    return completion_flip(model, ids, cands, lengths, filler=filler, family=family, period=period, head=head,
                           **kwargs)
