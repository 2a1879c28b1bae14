"""Render assets/figures/head_map.png, the README's KV-head x phase specialization map, from a shipped
knockout map (default: assets/results/zoo_heads/zoo-w8s8-kv4-s1.json, the zoo's W8/S8 with 4 KV heads,
seed 1, written by `python -m experiments.zoo.heads`).

    python scripts/make_head_map_figure.py [--map FILE] [--out assets/figures/head_map.png]

Reads the JSON only (no model is run): each cell is the absolute accuracy change (pp) when one KV head
is mean-ablated, by needle residue; a dot marks cells whose interval excludes 0. Needs matplotlib
(`pip install matplotlib`); plotly's PNG export would need kaleido and a browser. CPU only, offline.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MAP = ROOT / "assets" / "results" / "zoo_heads" / "zoo-w8s8-kv4-s1.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--map", type=Path, default=DEFAULT_MAP, help="a SpecializationMap JSON (kind, dims, coords, values, lo, hi)")
    p.add_argument("--out", type=Path, default=ROOT / "assets" / "figures" / "head_map.png")
    args = p.parse_args()
    try:
        import matplotlib
    except ImportError as err:
        raise SystemExit("scripts/make_head_map_figure.py needs matplotlib: pip install matplotlib") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    smap = json.loads(args.map.read_text())
    if smap.get("kind") != "SpecializationMap" or smap.get("dims") != ["layer", "kv_head", "residue"]:
        raise SystemExit(f"{args.map}: kind {smap.get('kind')!r}, dims {smap.get('dims')}: allowed a SpecializationMap "
                         "with dims ['layer', 'kv_head', 'residue']")
    values, lo, hi = (np.asarray(smap[k], dtype=float) for k in ("values", "lo", "hi"))
    layers, heads, residues = (smap["coords"][d] for d in ("layer", "kv_head", "residue"))
    grid = values.reshape(len(layers) * len(heads), len(residues))
    excl = ((lo > 0) | (hi < 0)).reshape(grid.shape)
    labels = [f"L{layer}.KV{head}" for layer in layers for head in heads]
    clean = smap["clean"]["accuracy"]

    fig, ax = plt.subplots(figsize=(9, 0.45 * len(labels) + 1.2), dpi=100)
    im = ax.imshow(grid, cmap="RdBu", vmin=-100, vmax=100, aspect="auto")
    ys, xs = np.nonzero(excl)
    ax.scatter(xs, ys, s=6, c="black", marker="o")
    ax.set_xticks(range(len(residues)), [str(r) for r in residues])
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(f"needle residue r (key position mod {smap['clean']['modulus']}); "
                  f"clean accuracy {100 * min(clean):.0f}-{100 * max(clean):.0f}%; dot: interval excludes 0")
    ax.set_title(f"KV-head knockout map, {smap['meta']['label']}: accuracy change by residue")
    fig.colorbar(im, ax=ax, label=smap["quantity"], fraction=0.03)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1024:.0f} KiB) from {args.map}")
    if size > 200 * 1024:
        raise SystemExit(f"{args.out} is {size / 1024:.0f} KiB: keep the README figure under 200 KiB")


if __name__ == "__main__":
    main()
