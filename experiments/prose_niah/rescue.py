"""Does keeping one needle token in the evict cache rescue retrieval? A gate edit, same budget.

Evict under W8/S8 keeps one token of each window (offset K), so which needle token survives depends on the
residue (`survivors.py`). The rescue unit edits the pool weights (`compress_k.hook_gate` and
`compress_v.hook_gate`, one-hot under evict) of every compressed layer and KV head so that the window holding
a chosen needle token keeps that token instead of offset K: the same budget, one token per window, only the
choice in that window moved. `shift` names the token by its offset from the value's first token (0: the
first digit; -2: the token " is" before the value's space, in both models' tokenizers). Each prompt runs
twice: natural and edited; both scored teacher-forced (every answer token the argmax).

    python -m experiments.prose_niah.run rescue --model smollm2 --n 8 --settings evict-W8S8 --shifts 0
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.prose_niah.kept import hooked_logits
from experiments.prose_niah.survivors import N_BOOT, example_interval, kept_offset

#: the predictions stated before the rescue units ran (experiments/prose_niah/run.py): by model and shift, whether
#: keeping that token gains (95% interval above 0) or not (the interval reaches 0 or below), at every length
PREDICTED = {"smollm2": {0: True, -2: False}, "gemma3-270m": {0: False, -2: True}}


def rescue_path(results: Path, model: str, length: int, name: str, layers: str, n: int) -> Path:
    return results / model / f"rescue-T{length}-{name}-L{layers}-n{n}.json"


def keep_token(gate: torch.Tensor, position: int, stride: int) -> torch.Tensor:
    """Pool weights [batch, entry, offset, kv_head] with the window that holds `position` (W = S: one window)
    keeping it alone, every KV head.

    Example:
        >>> g = torch.zeros(1, 3, 4, 2); g[..., 3, :] = 1  # evict: offset 3 of each window of 4
        >>> keep_token(g, 6, 4)[0, :, :, 0].tolist()
        [[0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    """
    gate = gate.clone()
    j = position // stride
    gate[:, j] = 0
    gate[:, j, position - j * stride] = 1
    return gate


def _forward(model, attns: dict, tokens: torch.Tensor, position: int | None, stride: int, keep: int = 0
             ) -> torch.Tensor:
    """Logits [pos, vocab] of one prompt (its last `keep` positions; 0: all), the window of `position` keeping it
    in every compressed layer (None: no edit)."""
    def edit(gate: torch.Tensor, hook) -> torch.Tensor:
        return keep_token(gate, position, stride)

    hooks = [] if position is None else [(branch.hook_gate, edit) for attn in attns.values()
                                         for branch in (attn.compress_k, attn.compress_v)]
    return hooked_logits(model, tokens, hooks, keep)


def _correct(model, attns: dict, tokens: torch.Tensor, answer_pos: torch.Tensor, position: int | None, stride: int
             ) -> bool:
    """Every answer token the argmax, teacher-forced; logits only from the first answer position on (a 4k prompt's
    full logits over Gemma 3's 262k-token vocabulary would take 4 GB)."""
    pos = answer_pos[answer_pos >= 0]
    first = int(pos.min())
    logits = _forward(model, attns, tokens, position, stride, keep=len(tokens) - first)
    return bool((logits[pos - first].argmax(-1) == tokens[pos + 1]).all())


def rescue_unit(model, tok, args, name: str, layers: str, results: Path, setting, layers_of) -> dict[str, Any]:
    """Natural and edited forwards of every prompt (module docstring), written to its file (read back when it
    exists)."""
    from phaseinterp.backends.kv_compression import KVCompression, compressed_layers
    from phaseinterp.backends.presses import apply_attention
    from phaseinterp.measure.outputs import write_atomic
    from phaseinterp.measure.provenance import versions
    from phaseinterp.tasks import ProseNeedle

    path = rescue_path(results, args.model, args.length, name, layers, args.n)
    if path.exists():
        return json.loads(path.read_text())
    spec = setting(name, layers_of(model, layers))
    if not (isinstance(spec, KVCompression) and spec.rule == "evict" and spec.window == spec.stride):
        raise ValueError(f"setting={name!r} is invalid for rescue: allowed an evict rule with W = S ('evict-W8S8')")
    task = ProseNeedle(tok, seq_len=args.length, n_depths=args.n_depths)
    batch = task.sample(args.n, args.modulus, seed=args.seed)
    apply_attention(model, spec)
    attns = compressed_layers(model)
    rows, start = [], time.time()
    try:
        for b in range(len(batch.tokens)):
            tokens, v = batch.tokens[b], int(batch.value_pos[b])
            row = {"residue": int(batch.residue[b]), "example_id": int(batch.example_id[b]), "value_pos": v,
                   "natural": _correct(model, attns, tokens, batch.answer_pos[b], None, spec.stride)}
            for shift in args.shifts:
                row[f"shift{shift}"] = _correct(model, attns, tokens, batch.answer_pos[b], v + shift, spec.stride)
            rows.append(row)
            print(f"rescue {b + 1}/{len(batch.tokens)}: {row}", flush=True)
    finally:
        apply_attention(model, None)
    result = {"model": args.model, "length": args.length, "setting": name, "layers": layers, "n_per_residue": args.n,
              "modulus": args.modulus, "seed": args.seed, "shifts": list(args.shifts),
              "compression": {"class": "KVCompression", **spec.to_dict()}, "task": task.card(), "rows": rows,
              "seconds": round(time.time() - start, 1),
              "command": "python -m experiments.prose_niah.run " + " ".join(args.argv), "versions": versions()}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(result, indent=1) + "\n")
    return result


def gain(rows: list[dict[str, Any]], shift: int, residues: list[int], *, n_boot: int = N_BOOT, seed: int = 0
         ) -> tuple[float, float, float]:
    """(gain, lo, hi) in percentage points: edited minus natural accuracy over the rows at `residues`, the mean
    of each example's difference, 95% percentile interval over resampled examples.

    Example:
        >>> rows = [{"residue": r, "example_id": e, "natural": False, "shift0": r < 2} for e in range(2) for r in range(4)]
        >>> gain(rows, 0, [0, 1])
        (100.0, 100.0, 100.0)
    """
    mine = [x for x in rows if x["residue"] in residues]
    ids = sorted({x["example_id"] for x in mine})
    diff = np.array([np.mean([x[f"shift{shift}"] - x["natural"] for x in mine if x["example_id"] == e]) for e in ids])
    return example_interval(diff, n_boot=n_boot, seed=seed)


def moved_residues(r: dict[str, Any], shift: int) -> list[int]:
    """The residues where keeping the token at `shift` changes the choice of its window (elsewhere evict keeps it
    anyway)."""
    S, K = r["compression"]["stride"], kept_offset(r["compression"])
    return [res for res in range(r["modulus"]) if (res + shift - K) % S != 0]


def agreement(r: dict[str, Any], results: Path) -> str:
    """How the natural forwards compare with the grid unit of the same setting (its largest, whose first examples
    are these prompts): a check of the rescue path against the sweep's."""
    units = sorted(results.glob(f"{r['model']}/T{r['length']}-value-{r['setting']}-L{r['layers']}-n*.json"),
                   key=lambda f: int(f.stem.rsplit("-n", 1)[1]))
    if not units:
        return ""
    c = json.loads(units[-1].read_text())["curve"]
    grid = {(e, res): bool(x) for e, res, x in zip(c["example_id"], c["residue"], c["correct"])}
    shared = [x for x in r["rows"] if (x["example_id"], x["residue"]) in grid]
    same = sum(grid[x["example_id"], x["residue"]] == x["natural"] for x in shared)
    return f" The natural forwards agree with `{units[-1].name}` on {same} of {len(shared)} prompts."


def rescue_lines(results: Path) -> list[str]:
    """One table per rescue file: natural and edited accuracy by residue, and each edit's gain over all residues
    and over those where the edit changes the kept token."""
    out = []
    for f in sorted(results.glob("*/rescue-*.json")):
        r = json.loads(f.read_text())
        R = r["modulus"]
        head = ["residue", "natural", *[f"keep value{s:+d}" for s in r["shifts"]]]
        table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for res in range(R):
            mine = [x for x in r["rows"] if x["residue"] == res]
            table.append("| " + " | ".join([str(res), *[f"{np.mean([x[k] for x in mine]):.2f}" for k in
                                                         ["natural", *[f"shift{s}" for s in r["shifts"]]]]]) + " |")
        gains = []
        for s in r["shifts"]:
            moved = moved_residues(r, s)
            g, lo, hi = gain(r["rows"], s, moved)
            said = PREDICTED.get(r["model"], {}).get(s)
            verdict = ("" if said is None else f" Predicted: {'a gain' if said else 'no gain'}; "
                       f"{'held' if (lo > 0) == said else 'did not hold'}.")
            gains.append(f"- keep value{s:+d} (the token at offset {s} from the value's first): {g:+.1f} pp "
                         f"[{lo:+.1f}, {hi:+.1f}] over the residues where evict keeps another token "
                         f"({', '.join(map(str, moved))}).{verdict}")
        out += [f"**Rescue by one kept token**, {r['model']}, {r['setting']} (layers {r['layers']}), {r['length']} tokens, "
                f"{r['n_per_residue']} prompts per residue (`{f.relative_to(results.parents[2])}`): every compressed layer "
                "and KV head keeps the named needle token in its window instead of the evict offset (same budget). "
                f"Gains: edited minus natural accuracy, per example, 95% interval over {N_BOOT} resampled examples."
                + agreement(r, results), "",
                *table, "", *gains, ""]
    return out
