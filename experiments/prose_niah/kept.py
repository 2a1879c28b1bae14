"""What a static chunk press keeps, and whether keeping the value's own chunk instead retrieves.

SmolLM2's static chunk press at 1 chunk of 8 (all 30 layers, n8) retrieved at residues 3 and 4 only. Values
whose 4 digits straddle a chunk boundary (residues 5-7) were predicted lost; residues 0-2, whose value fits
one chunk, were not. Two readings, stated before this unit ran: (a) selection: the question's attention
picks another chunk (e.g. the one holding the needle's key phrase "special magic number is", which shares
a chunk with the value only when the value starts late in its chunk); (b) capacity: the value's chunk is
kept but one chunk is not enough (the tokens before the value are needed too). For each prompt, the
natural forward reads `hook_keep` of every pressed layer and KV head at the first decoded query (which
chunk the press kept), and an oracle forward edits `hook_keep` so that every layer and head keeps the
chunk of the value's first token instead (same budget: one chunk). (a) predicts the oracle retrieves at
residues 0-4; (b) predicts it does not.

    python -m experiments.prose_niah.run kept --model smollm2 --n 4 --settings chunk-S8k1-static --layers 0-29

Gemma 3 270M's static chunk press (every layer, n8) then showed SmolLM2's pattern (0.75-0.88 at residues 3
and 4, at most 0.25 elsewhere). Prediction, stated before its kept unit ran (n2, every layer; on a sliding
layer the oracle edits only the queries whose window holds the value's chunk): SmolLM2's reading, selection
at residues 0-2 and budget at 5-7.

    python -m experiments.prose_niah.run kept --model gemma3-270m --n 2 --settings chunk-S8k1-static --layers all
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch

#: where a kept chunk sits relative to the needle (shares over pressed layers x KV heads)
PLACES = ("value_first", "value_whole", "key_phrase_end", "needle_start")


def kept_path(results, model: str, length: int, name: str, layers: str, n: int):
    return results / model / f"kept-T{length}-{name}-L{layers}-n{n}.json"


def _chunks(keep_row: torch.Tensor, candidate: torch.Tensor, S: int) -> list[int]:
    """The grid chunks a kept row [key] selected among the `candidate` keys."""
    return sorted({int(i) // S for i in torch.nonzero(keep_row & candidate).flatten()})


def keep_chunk(keep: torch.Tensor, prefill: int, candidate: torch.Tensor, chunk: int, S: int,
               window: int | None = None) -> torch.Tensor:
    """`keep` [batch, kv_head, query, key] with every query >= `prefill` keeping grid chunk `chunk` (its
    `candidate` keys) in place of what the press selected; sink, local window and decoded keys unchanged. On a
    sliding layer (`window`) only the queries that see the whole chunk are edited: the others keep the
    press's choice (the chunk is hidden from them).

    Example:
        >>> keep = torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()
        >>> keep_chunk(keep, 4, torch.arange(6) < 3, 0, 2)[0, 0, 4:].int().tolist()
        [[1, 1, 0, 1, 1, 0], [1, 1, 0, 1, 1, 1]]
        >>> keep_chunk(keep, 4, torch.arange(6) < 3, 0, 2, window=5)[0, 0, 4:].int().tolist()  # query 5 sees 1..5
        [[1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    """
    keep = keep.clone()
    t = torch.arange(keep.shape[-2], device=keep.device)
    rows = (t >= prefill) & ((chunk * S >= t - window + 1) if window is not None else True)
    wanted = candidate & (torch.arange(keep.shape[-1], device=keep.device) // S == chunk)
    edited = keep[:, :, rows]
    edited[..., candidate] = wanted[candidate]
    keep[:, :, rows] = edited
    return keep


def score(logits: torch.Tensor, tokens: torch.Tensor, answer_pos: torch.Tensor) -> tuple[bool, float]:
    """(every answer token is the argmax, summed log-probability of the answer tokens), teacher-forced."""
    pos = answer_pos[answer_pos >= 0]
    logp = logits[pos].float().log_softmax(-1).gather(-1, tokens[pos + 1][:, None])
    return bool((logits[pos].argmax(-1) == tokens[pos + 1]).all()), float(logp.sum())


def hooked_logits(model, tokens: torch.Tensor, hooks: list[tuple[Any, Any]], keep: int = 0) -> torch.Tensor:
    """Logits [pos, vocab] of one prompt (its last `keep` positions; 0: all) with each (hook point, fn) of `hooks`
    added for the forward and removed after it, also on error."""
    for point, fn in hooks:
        point.add_hook(fn)
    try:
        with torch.no_grad():
            return model(tokens[None], use_cache=False, logits_to_keep=keep).logits[0]
    finally:
        for point, _ in hooks:
            point.remove_hooks()


def _forward(model, attns: dict, tokens: torch.Tensor, hook_of) -> torch.Tensor:
    """Logits [pos, vocab] of one prompt with `hook_of(layer)` on every pressed layer's `hook_keep`."""
    return hooked_logits(model, tokens, [(attn.hook_keep, hook_of(layer)) for layer, attn in attns.items()])


def _prompt(model, attns: dict, batch, b: int, P: int, S: int, candidate: torch.Tensor) -> dict[str, Any]:
    """Row `b`: the natural forward (which chunks each layer and KV head kept) and the oracle forward."""
    tokens, v, k = batch.tokens[b], int(batch.value_pos[b]), int(batch.key_pos[b])
    seen: dict[int, list[list[int]]] = {}

    def record(layer: int):
        def hook(keep: torch.Tensor, hook) -> torch.Tensor:
            seen[layer] = [_chunks(keep[0, g, P], candidate, S) for g in range(keep.shape[1])]
            return keep
        return hook

    natural = score(_forward(model, attns, tokens, record), tokens, batch.answer_pos[b])
    def edit(layer: int):
        return lambda keep, hook: keep_chunk(keep, P, candidate, v // S, S, attns[layer].sliding_window)

    oracle = score(_forward(model, attns, tokens, edit), tokens, batch.answer_pos[b])
    chunks = [c for layer in sorted(seen) for c in seen[layer]]  # [layer x head] lists of kept chunks
    value = set(range(v, v + int((batch.answer_pos[b] >= 0).sum())))

    def share(positions: set[int]) -> float:
        return float(np.mean([all(p // S in c for p in positions) for c in chunks]))

    return {"residue": int(batch.residue[b]), "example_id": int(batch.example_id[b]), "value_pos": v, "key_pos": k,
            "natural": natural[0], "oracle": oracle[0], "natural_logprob": round(natural[1], 4),
            "oracle_logprob": round(oracle[1], 4),
            "offset_counts": {str(o): int(n) for o, n in zip(*np.unique([x - v // S for c in chunks for x in c],
                                                                        return_counts=True))},
            "shares": {"value_first": share({v}), "value_whole": share(value), "key_phrase_end": share({v - 1}),
                       "needle_start": share({k})}}


def kept_unit(model, tok, args, name: str, layers: str, results, setting, layers_of) -> dict[str, Any]:
    """Natural and oracle forwards of every prompt (module docstring), written to its file (read back when
    it exists)."""
    from phaseinterp.backends.presses import SelectionPress, apply_attention, pressed_layers
    from phaseinterp.measure.outputs import write_atomic
    from phaseinterp.measure.provenance import versions
    from phaseinterp.tasks import ProseNeedle

    path = kept_path(results, args.model, args.length, name, layers, args.n)
    if path.exists():
        return json.loads(path.read_text())
    task = ProseNeedle(tok, seq_len=args.length, n_depths=args.n_depths)
    batch = task.sample(args.n, args.modulus, seed=args.seed)
    press = setting(name, layers_of(model, layers), batch)
    if not (isinstance(press, SelectionPress) and press.kind == "chunk" and press.prefill is not None):
        raise ValueError(f"setting={name!r} is invalid for kept: allowed a static chunk press ('chunk-SykB-static')")
    apply_attention(model, press)
    attns = pressed_layers(model)
    P, S, T = press.prefill, press.chunk, batch.tokens.shape[1]
    i = torch.arange(T)
    candidate = (i >= press.sink) & (i < P - press.local)  # what the press selects among (the rest is kept anyway)
    rows, start = [], time.time()
    try:
        for b in range(len(batch.tokens)):
            rows.append(_prompt(model, attns, batch, b, P, S, candidate))
            print(f"kept {b + 1}/{len(batch.tokens)}: {rows[-1]}", flush=True)
    finally:
        apply_attention(model, None)
    result = {"model": args.model, "length": args.length, "setting": name, "layers": layers, "n_per_residue": args.n,
              "modulus": args.modulus, "seed": args.seed, "compression": {"class": "SelectionPress", **press.to_dict()},
              "task": task.card(), "rows": rows, "by_residue": by_residue(rows, args.modulus),
              "seconds": round(time.time() - start, 1), "command": "python -m experiments.prose_niah.run " + " ".join(args.argv),
              "versions": versions()}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(result, indent=1) + "\n")
    return result


def by_residue(rows: list[dict[str, Any]], modulus: int) -> list[dict[str, Any]]:
    """Per residue: natural and oracle accuracy (prompts), and the mean share of layer x head kept sets that
    hold each place of the needle.

    Example:
        >>> r = {"residue": 1, "natural": False, "oracle": True, "shares": dict.fromkeys(PLACES, 0.5)}
        >>> by_residue([r, {**r, "oracle": False}], 2)[1]["oracle"]
        0.5
    """
    out = []
    for r in range(modulus):
        mine = [x for x in rows if x["residue"] == r]
        out.append({"residue": r, "n": len(mine),
                    "natural": float(np.mean([x["natural"] for x in mine])) if mine else None,
                    "oracle": float(np.mean([x["oracle"] for x in mine])) if mine else None,
                    **{p: float(np.mean([x["shares"][p] for x in mine])) if mine else None for p in PLACES}})
    return out


def reading(by_res: list[dict[str, Any]]) -> str:
    r"""What the oracle says of each weak residue: selection (the oracle retrieves where the press fails) or
    budget (both fail; "no single chunk holds the value" when no kept chunk holds all of it).

    Example:
        >>> row = dict.fromkeys(PLACES, 0.2)
        >>> print(reading([{"residue": 0, "n": 4, "natural": 0.0, "oracle": 1.0, **row},
        ...          {"residue": 1, "n": 4, "natural": 0.0, "oracle": 0.0, **row, "value_whole": 0.0}]).replace("; ", ";\n"))
        selection at residue(s) 0 (the oracle keeps the value's chunk and retrieves where the press does not);
        budget at residue(s) 1 (the oracle fails too;
        no single chunk holds the whole value)
    """
    weak = [b for b in by_res if b["n"] and b["natural"] < 0.5]
    selection = [b["residue"] for b in weak if b["oracle"] >= 0.5]
    budget = [b for b in weak if b["oracle"] < 0.5]
    parts = []
    if selection:
        parts.append(f"selection at residue(s) {', '.join(map(str, selection))} (the oracle keeps the value's chunk "
                     "and retrieves where the press does not)")
    if budget:
        split = all(b["value_whole"] == 0 for b in budget)
        parts.append(f"budget at residue(s) {', '.join(str(b['residue']) for b in budget)} (the oracle fails too"
                     + ("; no single chunk holds the whole value)" if split else ")"))
    return "; ".join(parts) or "no weak residue (press accuracy >= 0.5 at every residue)"
