"""The DSA study: does token-level sparse attention (DeepSeek Sparse Attention) have periodic weak spots?
(issue 33; docs/dsa.md)

    python -m experiments.dsa.study      # assets/checkpoints/dsa/*.json -> assets/results/dsa.{md,json}, docs/dsa.md

Per shipped checkpoint (one seed each), on its card's matched record-lookup task at residues mod R = 8
(the needle key's position mod the S of the compressed zoo), every curve with cluster-bootstrap intervals,
the permutation tests and the spectral share of `phaseinterp.measure` (`PhaseCurve.from_correct`):

- phase curve (accuracy by residue), both padding protocols;
- selection read-out at the query position, per layer: is the needle's value token selected (and the key
  token)? The outcome per row is a curve like accuracy. And which source positions are selected: the
  selection rate of all visible tokens by their own position mod 8 (rows are the (prompt, token) pairs,
  clustered by example; the query is the last position of every row, so this is also the distance from
  the query mod 8);
- selection knockouts (prefix padding): the value token removed from the query's selection in every
  layer (its place refilled by the next-ranked token, `drop_keys(replace=True)`), and the indexer knocked
  out (every query keeps its 16 most recent tokens, `recent_keys`); accuracy curves and the paired
  difference from clean with its cluster-bootstrap interval.

`--render-only` rewrites dsa.md and the numbers block of docs/dsa.md from dsa.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from phaseinterp.measure.gap import GAP_HEADER, GAP_NOTE, gap_text

ROOT = Path(__file__).resolve().parents[2]
#: residues mod R = 8, the S of the compressed zoo. Not 16 (two periods, which the spectral share and the
#: periodicity test need): the 64-token training rows cannot place the needle at 16 residues, and longer
#: rows change what a top-16 selection keeps (16 of 88 tokens instead of 16 of 64). Any phase effect mod 8
#: is a weak spot with a period dividing 8; the dominant period names it.
MODULUS, PERIOD = 8, None
PROTOCOLS = ("prefix", "insequence")
BEGIN, END = "<!-- dsa-results: rendered by python -m experiments.dsa.study -->", "<!-- /dsa-results -->"
DEFAULTS = {"n_per_residue": 128, "n_boot": 2000, "n_perm": 2000}


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _curve(correct, residue, example_id, n_boot: int, n_perm: int, label: str) -> dict[str, Any]:
    from phaseinterp.measure import PhaseCurve, dominant_period

    c = PhaseCurve.from_correct(np.asarray(correct, bool), residue=np.asarray(residue), example_id=np.asarray(example_id),
                                modulus=MODULUS, period=PERIOD, n_boot=n_boot, n_perm=n_perm, label=label)
    s = c.summary()
    return {"mean": s["mean"], "mean_ci": list(s["mean_interval"]), "best": s["best"], "worst": s["worst"],
            "gap_pp": s["gap_pp"], "gap_heldout_pp": s["gap_heldout_pp"], "gap_ci_pp": list(s["gap_interval_pp"]),
            "p_phase": s["p_value"], "spectral_share": s["spectral_share"], "verdict": s["verdict"],
            "dominant_period": dominant_period(c.accuracy), "rate": [float(a) for a in c.accuracy],
            "lo": [float(x) for x in c.boot_lo], "hi": [float(x) for x in c.boot_hi], "rows": s["rows"]}


def paired_difference(a: np.ndarray, b: np.ndarray, cluster: np.ndarray, n_boot: int, seed: int = 0) -> dict[str, float]:
    """Mean of b - a (pp) with a 95% cluster-bootstrap interval (clusters: logical examples)."""
    d = b.astype(float) - a.astype(float)
    _, cid = np.unique(cluster, return_inverse=True)
    sums, counts = np.bincount(cid, weights=d), np.bincount(cid).astype(float)
    m = np.random.default_rng(seed).multinomial(len(sums), np.full(len(sums), 1 / len(sums)), size=n_boot)
    reps = (m @ sums) / (m @ counts)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return {"pp": 100 * float(d.mean()), "lo": 100 * float(lo), "hi": 100 * float(hi)}


def study_checkpoint(card_path: Path, *, n_per_residue: int, n_boot: int, n_perm: int) -> dict[str, Any]:
    """Every measurement of one shipped DSA checkpoint (see the module docstring)."""
    import torch

    from phaseinterp.backends import backend_for
    from phaseinterp.families.dsa.backend import drop_keys, recent_keys
    from phaseinterp.checkpoint import load
    from phaseinterp.tasks import RecordLookup
    from phaseinterp.train.evaluate import rows_for

    card = json.loads(card_path.read_text())
    path = card_path.with_suffix(".safetensors")
    hf = load(path).hf.eval()
    backend = backend_for(hf)
    task_kwargs = rows_for(card["data"]["eval_task"], MODULUS)
    out: dict[str, Any] = {
        "model": card["name"], "seed": card["seed"], "checkpoint": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT)
        else str(path), "sha256": sha256(path), "steps": card["steps"], "cpu_time_s": card.get("cpu_time_s"),
        "final_loss": card["final_metrics"].get("loss"), "n_parameters": card["n_parameters"],
        "index_topk": backend.index_topk, "task": task_kwargs, "curves": {}}

    def correct_of(batch, edits=None) -> np.ndarray:
        rows = []
        for start in range(0, len(batch), 256):
            t, q = batch.tokens[start:start + 256], batch.query_pos[start:start + 256]
            if edits is None:
                logits = backend.final_logits(t, q)
            else:
                with backend.selecting(edits(start, start + len(t))):
                    logits = backend.final_logits(t, q)
            rows.append((logits.argmax(-1)[:, None] == batch.answers[start:start + 256]).any(1))
        return torch.cat(rows).numpy()

    batches = {}
    with torch.no_grad():
        for protocol in PROTOCOLS:
            batch = RecordLookup(**{**task_kwargs, "protocol": protocol}).sample(n_per_residue, MODULUS, seed=0)
            batches[protocol] = batch
            out["curves"][protocol] = _curve(correct_of(batch), batch.residue, batch.example_id, n_boot, n_perm,
                                             f"{card['name']} {protocol}")
        batch = batches["prefix"]
        rows = torch.arange(len(batch))
        value = torch.zeros_like(batch.tokens, dtype=torch.bool)
        value[rows, batch.value_pos] = True
        layers = backend.indexer_layers
        clean = correct_of(batch)
        knocked = {
            "value token replaced": correct_of(batch, lambda a, b: {
                layer: drop_keys(value[a:b], query_pos=batch.query_pos[a:b], replace=True) for layer in layers}),
            "indexer knocked out (16 most recent)": correct_of(batch, lambda a, b: {layer: recent_keys() for layer in layers}),
        }
        out["knockouts"] = {name: {**_curve(c, batch.residue, batch.example_id, n_boot, n_perm, name),
                                   "difference": paired_difference(clean, c, batch.example_id.numpy(), n_boot)}
                            for name, c in knocked.items()}
        out["selection"] = _selection(backend, batch, n_boot, n_perm)
    return out


def _selection(backend, batch, n_boot: int, n_perm: int) -> list[dict[str, Any]]:
    """Per indexer layer, at each row's query position: value and key token selected, and the selection
    rate of every visible token by its position mod R."""
    import torch

    reads = [backend.read_indexer(batch.tokens[s:s + 256]) for s in range(0, len(batch), 256)]
    rows = torch.arange(len(batch))
    out = []
    for layer in backend.indexer_layers:
        sel = torch.cat([r[layer]["selected"] for r in reads])[rows, batch.query_pos]  # [row, key]
        pos = torch.arange(sel.shape[1])
        visible = pos[None, :] <= batch.query_pos[:, None]
        r_idx, k_idx = visible.nonzero(as_tuple=True)
        out.append({
            "layer": layer,
            "value_selected": _curve(sel[rows, batch.value_pos], batch.residue, batch.example_id, n_boot, n_perm,
                                     f"L{layer} value selected"),
            "key_selected": _curve(sel[rows, batch.key_pos], batch.residue, batch.example_id, n_boot, n_perm,
                                   f"L{layer} key selected"),
            "by_source_position": _curve(sel[r_idx, k_idx], k_idx % MODULUS, batch.example_id[r_idx], n_boot, n_perm,
                                         f"L{layer} selected by position"),
            "visible_per_query": float(visible.sum(1).float().mean()),
        })
    return out


# ---- rendering -----------------------------------------------------------------------------------

def _pct(xs) -> str:
    return " ".join(f"{100 * x:.0f}" for x in xs)


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"= {p:.3f}"


def _ci(c: dict) -> str:
    return f"{100 * c['mean']:.1f} [{100 * c['mean_ci'][0]:.1f}, {100 * c['mean_ci'][1]:.1f}]"


def _row(label: str, c: dict, extra: str = "") -> str:
    return (f"| {label} | {_ci(c)} | {gap_text(c['gap_pp'], c['gap_heldout_pp'], c['gap_ci_pp'])} | "
            f"{c['p_phase']:.3f} | {c['verdict']} | {c['dominant_period'] or '-'} | {_pct(c['rate'])} |{extra}")


def learned(r: dict) -> bool:
    return r["curves"]["prefix"]["best"] >= 0.8


def markdown(data: dict) -> str:
    R = data["settings"]["modulus"]
    head = (f"| measurement | mean % [95% CI] | {GAP_HEADER} | p (phase) | verdict | dominant period | "
            f"% by residue 0-{R - 1} |\n|---|---|---|---|---|---|---|")
    lines = ["# DeepSeek Sparse Attention: phase curves, indexer selection and selection knockouts", "",
             f"Written by `{data['command']}` from the checkpoints `python -m experiments.dsa.train` ships "
             f"(assets/checkpoints/dsa). Residue: the needle key's position mod {R} (the rows of the models' training "
             "length cannot place it at two periods of residues, which the periodicity test and the spectral share "
             "need: a phase effect is any difference between residues; dominant period: the smallest d < 8 whose "
             "harmonics carry 90% of the curve's variance, `phaseinterp.measure.dominant_period`, '-' when the curve "
             "is flat or none does). "
             f"{data['settings']['n_per_residue']} examples per residue, {data['settings']['n_boot']} bootstrap "
             f"replicates, {data['settings']['n_perm']} permutations. " + GAP_NOTE + " The selection rows are at the "
             "query position (the last token of every row); \"by its position\" counts every visible token, so its "
             f"residue is also the token's distance from the query mod {R}, and records alternate key and value "
             "tokens: a preference for one role shows there as an alternation with period 2.", ""]
    for r in data["results"]:
        lines += [f"## {r['model']} (seed {r['seed']})", "",
                  f"{r['steps']} steps, {r['cpu_time_s']:.0f} s CPU, final loss {r['final_loss']:.3f}, "
                  f"{r['n_parameters']} parameters, index_topk {r['index_topk']}; "
                  + ("learned" if learned(r) else "**did not learn** (best residue below 80%)") + ".", "", head]
        lines += [_row(f"accuracy, {p} padding", c) for p, c in r["curves"].items()]
        for s in r["selection"]:
            lines += [_row(f"L{s['layer']}: value token selected at the query", s["value_selected"]),
                      _row(f"L{s['layer']}: key token selected at the query", s["key_selected"]),
                      _row(f"L{s['layer']}: any visible token selected, by its position mod {R}", s["by_source_position"])]
        lines += [_row(f"accuracy, {name}", c) for name, c in r["knockouts"].items()]
        lines += ["", "| knockout (prefix padding, every indexer layer) | accuracy change pp [95% CI] |", "|---|---|"]
        lines += [f"| {name} | {c['difference']['pp']:.1f} [{c['difference']['lo']:.1f}, {c['difference']['hi']:.1f}] |"
                  for name, c in r["knockouts"].items()]
        lines.append("")
    lines += ["## Answer", "", answer(data), ""]
    return "\n".join(lines)


def answer(data: dict) -> str:
    """The answer to "does token-level sparse attention have periodic weak spots?", from the numbers."""
    parts = []
    for r in data["results"]:
        c = r["curves"]["prefix"]
        sel = [s["value_selected"] for s in r["selection"]]
        ko = r["knockouts"]["value token replaced"]["difference"]
        state = "learned the lookup" if learned(r) else "did not learn the lookup (best residue below 80%)"
        parts.append(
            f"Seed {r['seed']} ({r['model']}) {state}: accuracy {_ci(c)}%, gap "
            f"{gap_text(c['gap_pp'], c['gap_heldout_pp'], c['gap_ci_pp'])} pp, permutation p {_p(c['p_phase'])} "
            f"({c['verdict']}); in-sequence padding p {_p(r['curves']['insequence']['p_phase'])} "
            f"({r['curves']['insequence']['verdict']}). The query selects the needle's value token in "
            + ", ".join(f"layer {s['layer']} {_ci(v)}% of rows (p {_p(v['p_phase'])}, {v['verdict']})"
                        for s, v in zip(r["selection"], sel))
            + f"; removing it from the selection changes accuracy by {ko['pp']:.1f} pp [{ko['lo']:.1f}, {ko['hi']:.1f}]. "
            "Over all visible tokens, the selection rate by the token's own position mod 8 is "
            + "; ".join(f"{_pct(s['by_source_position']['rate'])}% in layer {s['layer']} (p "
                        f"{_p(s['by_source_position']['p_phase'])})" for s in r["selection"]) + ".")
    flat = [r["curves"][p]["p_phase"] >= 0.05 for r in data["results"] for p in PROTOCOLS]
    n_learned = sum(learned(r) for r in data["results"])
    verdict = ("No phase effect (weak spot) was detected in any seed or padding protocol." if all(flat) else
               f"A phase effect was detected in {len(flat) - sum(flat)} of {len(flat)} (seed, protocol) curves; "
               "its dominant period is in the table.")
    if n_learned == 0:
        verdict += (f" But none of the {len(data['results'])} seeds learned the far lookup (best residue below 80%; "
                    "a model that only excludes the demonstrated values scores 25% on this task), so flat accuracy "
                    "curves are weak evidence: a model that fails at every residue has no weak residue to show. "
                    "The selection read-outs and knockouts that follow do not depend on that.")
    elif n_learned < len(data["results"]):
        verdict += f" {n_learned} of {len(data['results'])} seeds learned the far lookup (best residue at least 80%)."
    return verdict + " " + " ".join(parts)


def docs_block(data: dict) -> str:
    return f"{BEGIN}\n{answer(data)}\n{END}"


def render_docs(page: str, data: dict) -> str:
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(page):
        raise ValueError(f"docs/dsa.md has no block {BEGIN!r} ... {END!r} to render into")
    return pattern.sub(lambda _: docs_block(data), page)


def write(data: dict, out: Path, docs: Path | None) -> None:
    from phaseinterp.measure.outputs import write_atomic
    from phaseinterp.measure.provenance import dumps

    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "dsa.json", dumps(data) + "\n")
    write_atomic(out / "dsa.md", markdown(data))
    if docs is not None and docs.is_file():
        write_atomic(docs, render_docs(docs.read_text(), data))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoints", type=Path, default=ROOT / "assets" / "checkpoints" / "dsa")
    p.add_argument("--out", type=Path, default=ROOT / "assets" / "results")
    p.add_argument("--docs", type=Path, default=ROOT / "docs" / "dsa.md", help="page whose numbers block is rendered")
    p.add_argument("--n-per-residue", type=int, default=DEFAULTS["n_per_residue"])
    p.add_argument("--n-boot", type=int, default=DEFAULTS["n_boot"])
    p.add_argument("--n-perm", type=int, default=DEFAULTS["n_perm"])
    p.add_argument("--render-only", action="store_true", help="rewrite dsa.md and docs/dsa.md from dsa.json")
    args = p.parse_args(argv)
    if args.render_only:
        write(json.loads((args.out / "dsa.json").read_text()), args.out, args.docs)
        return 0
    import torch

    from phaseinterp.measure.provenance import versions

    torch.set_num_threads(1)
    cards = sorted(args.checkpoints.glob("*.json"))
    if not cards:
        raise ValueError(f"no DSA checkpoint cards (*.json) in {str(args.checkpoints)!r}: run python -m experiments.dsa.train")
    settings = {"n_per_residue": args.n_per_residue, "n_boot": args.n_boot, "n_perm": args.n_perm, "modulus": MODULUS,
                "period": PERIOD}
    default = args.checkpoints == ROOT / "assets" / "checkpoints" / "dsa"
    command = "python -m experiments.dsa.study" + ("" if default else f" --checkpoints {args.checkpoints}")
    results = sorted((study_checkpoint(c, n_per_residue=args.n_per_residue, n_boot=args.n_boot, n_perm=args.n_perm)
                      for c in cards), key=lambda r: r["seed"])
    data = {"command": command, "settings": settings, "versions": versions(), "results": results}
    write(data, args.out, args.docs if default else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
