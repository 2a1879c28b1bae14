"""Specialization among KV heads in a zoo member (docs/paper.md, claim 4): the KV-head x residue knockout
map of each seed, in absolute percentage points with bootstrap intervals.

    python -m experiments.zoo.heads                                   # w8s8-kv4, seeds 0 and 1
    python -m experiments.zoo.heads --member w8s8 --n-per-residue 64

For each shipped seed: the clean curve by residue mod 16 (two periods of S = 8, on rows long
enough to place every residue), the knockout map, which KV head owns which residues (knockout
<= -THRESHOLD pp), the weak residues (clean < 50%) and whether they are the ones no head owns.
Writes assets/results/zoo_heads_MEMBER.{md,json} and one map per seed (JSON, CSV, HTML).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--member", default="w8s8-kv4")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--n-per-residue", type=int, default=128)
    p.add_argument("--threshold", type=float, default=30.0, help="pp lost for a head to own a residue (default 30)")
    p.add_argument("--checkpoints", type=Path, default=Path("assets/checkpoints/zoo"))
    p.add_argument("--out", type=Path, default=Path("assets/results"))
    args = p.parse_args(argv)

    import torch

    import phaseinterp
    from phaseinterp.interventions import knockout_map
    from phaseinterp.measure.provenance import jsonable, versions
    from phaseinterp.plot import map_figure, save_html
    from phaseinterp.tasks import RecordLookup
    from phaseinterp.train.evaluate import rows_for
    from phaseinterp.train.rule import table_period

    torch.set_num_threads(1)
    found = {}
    for seed in args.seeds:
        path = args.checkpoints / f"zoo-{args.member}-s{seed}.safetensors"
        if not path.is_file():
            print(f"skipped seed {seed}: {path} is not shipped")
            continue
        model = phaseinterp.load(path).eval()
        card = json.loads(path.with_suffix(".json").read_text())
        R = table_period(model.cfg.residue_modulus)
        kw = rows_for(card["data"]["eval_task"], R)
        task = RecordLookup(**kw)
        batch = task.sample(args.n_per_residue, R, seed=0)
        calib = task.sample(args.n_per_residue, R, seed=0, split="calibration")
        smap = knockout_map(model, batch, calib, change="absolute", label=f"zoo-{args.member}-s{seed}")
        clean = np.array(smap.clean["accuracy"], dtype=float)
        owners = smap.coverage(args.threshold)
        owned = sorted({r for rs in owners.values() for r in rs})
        weak = [int(r) for r in np.flatnonzero(clean < 0.5)]
        found[seed] = {"task": kw, "modulus": R, "clean": clean.tolist(), "owners": owners, "weak": weak,
                       "weak_unowned": sorted(set(weak) - set(owned)), "weak_owned": sorted(set(weak) & set(owned)),
                       "values": smap.values.tolist(), "lo": smap.lo.tolist(), "hi": smap.hi.tolist()}
        stem = args.out / "zoo_heads" / f"zoo-{args.member}-s{seed}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        smap.save(stem.with_suffix(".json"))
        smap.save(stem.with_suffix(".csv"))
        save_html(map_figure(smap, title=f"zoo-{args.member}-s{seed}: KV-head knockout, absolute change (pp)"),
                  stem.with_suffix(".html"), root=args.out)  # one plotly.js for the results folder: offline
        print(f"seed {seed}: clean {np.round(100 * clean).astype(int).tolist()}")
        print(f"   owners (<= -{args.threshold:g} pp): {owners}; weak {weak}; weak and unowned {found[seed]['weak_unowned']}")
    if not found:
        print("nothing to do: no shipped seeds")
        return 1
    lines = [f"# KV-head specialization: zoo-{args.member} (docs/paper.md, claim 4)", "",
             f"Reproduce: `python -m experiments.zoo.heads --member {args.member}`. Knockout of the query heads reading one "
             "KV head at the final position (calibration means from a disjoint split), absolute change in accuracy "
             f"(pp) with a paired cluster-bootstrap 95% interval, {args.n_per_residue} logical examples per residue. A "
             f"head *owns* a residue when its knockout costs >= {args.threshold:g} pp; *weak* residues have clean "
             "accuracy < 50%. Maps: `assets/results/zoo_heads/`.", ""]
    for seed, f in found.items():
        lines += [f"## seed {seed}", "", "clean accuracy (%) by residue mod "
                  f"{f['modulus']}: " + " ".join(f"{100 * a:.0f}" for a in f["clean"]), "",
                  "| layer.kv_head | " + " | ".join(f"r={r}" for r in range(f["modulus"])) + " | owns |",
                  "|" + "---|" * (f["modulus"] + 2)]
        vals, lo, hi = np.array(f["values"]), np.array(f["lo"]), np.array(f["hi"])
        for li in range(vals.shape[0]):
            for h in range(vals.shape[1]):
                unit = f"{li}.{h}"
                cells = " | ".join(f"{vals[li, h, r]:.0f} [{lo[li, h, r]:.0f}, {hi[li, h, r]:.0f}]" for r in range(f["modulus"]))
                lines.append(f"| {unit} | {cells} | {f['owners'].get(unit, [])} |")
        lines += ["", f"weak residues: {f['weak']}; weak and owned by no head: {f['weak_unowned']}; weak but owned: "
                  f"{f['weak_owned']}", ""]
    if len(found) == 2:
        a, b = (set(f["weak"]) for f in found.values())
        lines += [f"Weak residues shared by both seeds: {sorted(a & b)}; only one seed: {sorted(a ^ b)}.", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"zoo_heads_{args.member}.md").write_text("\n".join(lines))
    (args.out / f"zoo_heads_{args.member}.json").write_text(
        json.dumps(jsonable({"member": args.member, "threshold_pp": args.threshold, "n_per_residue": args.n_per_residue,
                             "seeds": found, "versions": versions()}), indent=1) + "\n")
    print(f"wrote {args.out / f'zoo_heads_{args.member}.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
