"""Which needle tokens the evict rule keeps at each residue, and the survivor gap.

Evict under W8/S8 keeps one token of each window, the positions K mod 8 (K = 7 for `evict`, 0 for `evict0`).
With the value's first token at residue r, the needle's kept tokens are those at offsets k from it with
(r + k) = K mod 8: at four of the eight residues one of the value's four digit tokens survives, at the other
four only tokens of the key phrase or the full stop do. An evict unit's survivor gap is its accuracy at the
residues where a value token survives minus its accuracy at the others, per example (one prompt rendered at
every residue), with a cluster-bootstrap interval over examples.

    python -m experiments.prose_niah.run survivors --model smollm2   # the needle's tokens by residue (tokenizer only)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

N_BOOT = 10000
#: the smallest unit (prompts per residue) the survivors table shows
MIN_N = 8


def surviving(kept: int, stride: int, value_len: int, modulus: int) -> list[int]:
    """The residues (of the value's first token) where one of its `value_len` tokens sits at a kept position
    (kept mod stride).

    Example:
        >>> surviving(7, 8, 4, 8), surviving(0, 8, 4, 8)
        ([4, 5, 6, 7], [0, 5, 6, 7])
    """
    return [r for r in range(modulus) if any((r + k - kept) % stride == 0 for k in range(value_len))]


def kept_offset(compression: dict[str, Any]) -> int:
    """The position an evict unit keeps in each window (its last, W - 1, unless the rule names another); windows
    start every S tokens, so the kept positions are this offset mod S."""
    return compression["window"] - 1 if compression.get("offset") is None else compression["offset"]


def example_interval(diff: np.ndarray, *, n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(mean, lo, hi) in percentage points of per-example differences (fractions), with the 95% percentile interval
    of `n_boot` resamples of the examples.

    Example:
        >>> example_interval(np.array([0.5, 0.5, 0.5]))
        (50.0, 50.0, 50.0)
    """
    draws = np.random.default_rng(seed).integers(0, len(diff), size=(n_boot, len(diff)))
    lo, hi = np.percentile(diff[draws].mean(axis=1), [2.5, 97.5])
    return round(100 * float(diff.mean()), 2), round(100 * float(lo), 2), round(100 * float(hi), 2)


def survivor_gap(unit: dict[str, Any], value_len: int, *, n_boot: int = N_BOOT, seed: int = 0
                 ) -> tuple[float, float, float]:
    """(gap, lo, hi) in percentage points: accuracy where a value token survives minus accuracy elsewhere, the
    mean over examples of each example's difference, and the 95% percentile interval of resampled examples.

    Example:
        >>> curve = {"modulus": 8, "correct": [r >= 4 for r in range(8)] * 2, "residue": list(range(8)) * 2,
        ...          "example_id": [0] * 8 + [1] * 8}
        >>> survivor_gap({"curve": curve, "compression": {"window": 8, "stride": 8, "offset": None}}, 4)
        (100.0, 100.0, 100.0)
    """
    c = unit["curve"]
    correct, residue, example = (np.asarray(c[k]) for k in ("correct", "residue", "example_id"))
    inside = np.isin(residue, surviving(kept_offset(unit["compression"]), unit["compression"]["stride"], value_len,
                                        c["modulus"]))
    ids = np.unique(example)
    diff = np.array([correct[(example == e) & inside].mean() - correct[(example == e) & ~inside].mean() for e in ids])
    return example_interval(diff, n_boot=n_boot, seed=seed)


def gap_above_zero(value_len: int):
    """A prediction's check (`predictions.Check`): the unit's survivor gap interval lies above 0."""
    def check(acc: np.ndarray, said: str, unit: dict[str, Any]) -> bool:
        return survivor_gap(unit, value_len)[1] > 0

    return check


def survivors_path(results: Path, model: str) -> Path:
    return results / model / "survivors-W8S8.json"


def read_survivors(results: Path, model: str) -> dict[str, Any] | None:
    path = survivors_path(results, model)
    return json.loads(path.read_text()) if path.exists() else None


def write_survivors(tok: str, args: Any, results: Path, modulus: int) -> dict[str, Any]:
    """The needle's tokens of one prompt per residue, with their positions: which of them an evict rule keeps
    follows from its kept offset (the renderer's table). Tokenizer only; written to `survivors_path`."""
    from phaseinterp.measure.outputs import write_atomic
    from phaseinterp.measure.provenance import versions
    from phaseinterp.tasks import ProseNeedle

    task = ProseNeedle(tok, seq_len=args.length, n_depths=args.n_depths)
    batch = task.sample(1, modulus, seed=args.seed)
    value_len = int((batch.answer_pos[0] >= 0).sum())
    rows = []
    for b in range(len(batch.tokens)):
        k, v = int(batch.key_pos[b]), int(batch.value_pos[b])
        ids = batch.tokens[b, k: v + value_len + 1].tolist()  # the key phrase, the value, the token after it
        word = "digit" if value_len == task.value_digits else "value token"  # one token per digit, or not
        names = [repr(task.text([t])) for t in ids[: v - k]] + [f"{word} {i + 1}" for i in range(value_len)]
        rows.append({"residue": int(batch.residue[b]), "first_position": k, "value_offset": v - k,
                     "tokens": names + [repr(task.text([ids[-1]]))]})
    out = {"model": args.model, "length": args.length, "modulus": modulus, "seed": args.seed, "value_len": value_len,
           "task": task.card(), "rows": rows,
           "command": "python -m experiments.prose_niah.run " + " ".join(args.argv), "versions": versions()}
    path = survivors_path(results, args.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(out, indent=1) + "\n")
    return out


def kept_tokens(row: dict[str, Any], kept: int, stride: int) -> list[str]:
    """The needle tokens of a survivors row at positions `kept` mod `stride`.

    Example:
        >>> kept_tokens({"first_position": 14, "tokens": ["'a'", "'b'", "digit 1", "digit 2", "'.'"]}, 7, 8)
        ["'b'"]
    """
    return [t for i, t in enumerate(row["tokens"]) if (row["first_position"] + i - kept) % stride == 0]


def survivor_lines(rows: list[dict[str, Any]], gone: dict[str, int], key, results: Path) -> list[str]:
    """Per model with a survivors file: a table of the needle tokens each evict offset keeps at each residue beside
    the accuracy of its evict units (value anchor, each setting's largest unit, at least `MIN_N` prompts per
    residue), and each unit's survivor gap."""
    out = []
    for model in sorted({u["model"] for u in rows}):
        found = read_survivors(results, model)
        mine = [u for u in rows if u["model"] == model and u["anchor"] == "value" and key(u) not in gone
                and u["n_per_residue"] >= MIN_N and (u.get("compression") or {}).get("rule") == "evict"]
        if found is None or not mine:
            continue
        stride = mine[0]["compression"]["stride"]
        by_offset: dict[int, list[dict[str, Any]]] = {}  # the units of each kept offset (mod S), shortest first
        for u in sorted((u for u in mine if u["compression"]["stride"] == stride), key=lambda u: u["length"]):
            by_offset.setdefault(kept_offset(u["compression"]) % stride, []).append(u)
        by_offset = dict(sorted(by_offset.items()))
        head = ["residue"]
        for k, group in by_offset.items():
            head += [f"offset {k} keeps"] + [f"{u['setting']} T{u['length']} n{u['n_per_residue']}" for u in group]
        table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r, row in enumerate(found["rows"]):
            cells = [str(row["residue"])]
            for k, group in by_offset.items():
                cells += [", ".join(kept_tokens(row, k, stride)) or "-"] + [f"{u['curve']['accuracy'][r]:.2f}" for u in group]
            table.append("| " + " | ".join(cells) + " |")
        gaps = []
        for u in (u for group in by_offset.values() for u in group):
            gap, lo, hi = survivor_gap(u, found["value_len"])
            where = surviving(kept_offset(u["compression"]), stride, found["value_len"], u["curve"]["modulus"])
            gaps.append(f"- {key(u)}: {gap:+.1f} pp [{lo:+.1f}, {hi:+.1f}] (residues {', '.join(map(str, where))} "
                        "against the other four)")
        source = survivors_path(results, model).relative_to(results.parents[2])
        out += [f"**Which needle tokens survive evict, by residue** ({model}; the needle's tokens from `{source}`, one "
                f"prompt per residue; evict keeps the positions K mod {stride}; units of at least {MIN_N} prompts per "
                "residue). The survivor gap: accuracy where a value token survives minus accuracy at the other residues, "
                f"per example, 95% interval over {N_BOOT} resampled examples. Read after these units' results, except "
                "where a prediction above names the unit.", "", *table, "", *gaps, ""]
    return out
