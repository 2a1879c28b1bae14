"""One API, three models: a phase sweep, a KV-head knockout map, a head-output patching map and a
completion-flip sweep on a tiny random HF DeepSeek-V4, a tiny random HF Qwen3 and our own
checkpoint, with the same calls (`measure.phase_sweep`, `interventions.knockout_map`,
`interventions.activation_patching` take our model, a backend or a raw HF model alike).

    python scripts/same_api_demo.py [--checkpoint PATH] [--out DIR] [--seq-len 128] [--n-per-residue 2]

Without --checkpoint, "our checkpoint" is the hand-set planted model (KV head h owns phase 2h)
written with `model.save` and read back with `phaseinterp.load`. The HF models have random
weights, so their accuracy is about 0 and their knockout maps are undefined (nan): the point is
that every call runs unchanged on every model. Our model runs through TransformerLens hooks and
the incremental fast path, the HF models through nnsight (`backend_for`, picked inside the
calls). Everything is seeded; CPU only.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import beartype  # noqa: E402,F401  (before nnsight)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import phaseinterp  # noqa: E402
from phaseinterp.backends import backend_for  # noqa: E402
from phaseinterp.backends.tiny import tiny_deepseek_v4, tiny_qwen3, word_tokenizer  # noqa: E402
from phaseinterp.tasks.niah import deepseek_niah  # noqa: E402
from phaseinterp.flip import FillerSpec, completion_flip, completion_flip_text  # noqa: E402
from phaseinterp.interventions import activation_patching, knockout_map, mapping_swap, planted_model  # noqa: E402
from phaseinterp.measure import phase_sweep  # noqa: E402
from phaseinterp.plot import flip_figure, save_html  # noqa: E402
from phaseinterp.tasks import RecordLookup  # noqa: E402
from phaseinterp.units import Unit  # noqa: E402

STRIDE, MODULUS = 4, 8  # DeepSeek-V4 CSA stride; residues mod 8 as in the paper


def our_checkpoint(path: str | None, out: Path):
    if path is None:
        path = out / "planted-w4s4.safetensors"
        planted_model(64, stride=STRIDE, key_offsets=(0, 2)).save(str(path))
    return phaseinterp.load(path)


def fmt(values: np.ndarray) -> str:
    return "[" + " ".join("  nan" if np.isnan(v) else f"{v:5.1f}" for v in values) + "]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", help="our checkpoint (default: the planted model, saved and reloaded)")
    p.add_argument("--out", type=Path, help="folder for curves, maps and figures (default: a temp folder)")
    p.add_argument("--seq-len", type=int, default=128, help="text-NIAH context length for the HF models")
    p.add_argument("--n-per-residue", type=int, default=2, help="logical examples per residue")
    args = p.parse_args()
    torch.set_num_threads(1)
    out = args.out or Path(tempfile.mkdtemp(prefix="phaseinterp-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    tok = word_tokenizer()
    niah = deepseek_niah(tok, args.seq_len)  # DeepSeek protocol: 4-token records, middle target, fixed query
    ours = our_checkpoint(args.checkpoint, out)
    lookup = RecordLookup(vocab_size=ours.cfg.vocab_size, n_records=8, n_demos=2)
    runs = [("deepseek-v4 (tiny, random, HF code)", tiny_deepseek_v4(), None, niah),
            ("qwen3 (tiny, random, HF code)", tiny_qwen3(), STRIDE, niah),
            ("ours (checkpoint)", ours, None, lookup)]
    for name, model, stride, task in runs:
        t0 = time.perf_counter()
        batch = task.sample(args.n_per_residue, MODULUS, seed=0)
        calib = task.sample(args.n_per_residue, MODULUS, seed=0, split="calibration")
        # the same three calls on every model: ours, or a raw HF model (wrapped with backend_for inside)
        curve = phase_sweep(model, batch, period=STRIDE, progress=False, n_boot=200, n_perm=200, label=name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "knockout changed no output" on random models, nan maps
            kmap = knockout_map(model, batch, calib, level="kv_head", n_boot=200, label=name)
            pmap = activation_patching(model, mapping_swap(batch), unit="z", level="kv_head")
        slug = name.split()[0]
        curve.to_json(out / f"{slug}-curve.json")
        kmap.save(out / f"{slug}-knockout.json")
        pmap.save(out / f"{slug}-patching.json")
        backend = backend_for(model, stride=stride)  # only for its shape card (cfg) below
        c = backend.cfg
        via = f"{type(backend).__name__} (nnsight)" if kmap.meta["intervention"]["engine"] == "nnsight" else \
            "TransformerLens hooks"
        print(f"\n== {name}: {c.model_class} via {via}, {c.n_layers} layers, "
              f"{c.n_heads} heads / {c.n_kv_heads} KV heads, strides {c.strides}, "
              f"gates {[u.name for u in backend.units('gate')]}")
        print(f"   task: {batch.meta['task']} x{len(batch)} rows, seq_len {batch.tokens.shape[1]}, "
              f"key_len {batch.key_len}, value_len {batch.value_len}, query at {batch.query_pos.unique().tolist()}")
        print(f"   phase sweep accuracy (%) by residue mod {MODULUS}: {fmt(100 * curve.accuracy)}")
        print(f"   knockout map {dict(zip(kmap.dims, kmap.values.shape))} "
              f"({kmap.meta['intervention']['engine']}, {kmap.meta['intervention']['method']}):")
        for li, layer in enumerate(kmap.coords["layer"]):
            for ki, kv in enumerate(kmap.coords["kv_head"]):
                print(f"     {Unit('kv_head', layer, kv).name} rel. change (%): {fmt(kmap.values[li, ki])}")
        print(f"   patching map, mapping swap, z at the final position "
              f"({pmap.meta['intervention']['engine']}, {pmap.meta['intervention']['method']}):")
        for li, layer in enumerate(pmap.coords["layer"]):
            for ki, kv in enumerate(pmap.coords["kv_head"]):
                print(f"     {Unit('kv_head', layer, kv).name} restored:        {fmt(pmap.values[li, ki])}")
        print(f"   ({time.perf_counter() - t0:.1f} s)")
    # completion flip on the tiny DeepSeek-V4 (text) and on our checkpoint (tokens)
    ds = backend_for(runs[0][1])
    spec = FillerSpec.from_tokenizer(tok, symbol="bab", comment_prefix="bac", newline="bad", n_words=16)
    flip = completion_flip_text(ds, tok, "caf cag cak cal", [" cam", " can"], range(64), period=STRIDE,
                                family="words", filler=spec, n_perm=500)
    save_html(flip_figure(flip), out / "deepseek-flip.html", include_plotlyjs="cdn")
    flip.save(out / "deepseek-flip.json")
    print(f"\n== completion flip, deepseek-v4 tiny random (words filler, L = 0..63): {flip.describe()}")
    # two records with key 5, three tokens apart; the checkpoint stores a record only when its key
    # sits at phase 0 or 2, so exactly one of them is retrievable, and which one flips with L
    pspec = FillerSpec(symbol=60, words=tuple(range(50, 60)), comment_prefix=(61,), newline=62)
    pflip = completion_flip(backend_for(ours), [5, 40, 7, 5, 41, 5], [40, 41], range(64), filler=pspec,
                            period=STRIDE, head=[0], n_perm=500)
    print(f"== completion flip, our checkpoint (symbol filler, L = 0..63): {pflip.describe()}")
    print(f"\nwrote curves, maps and flip results to {out}")


if __name__ == "__main__":
    main()
