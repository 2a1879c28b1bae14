"""All-layer KV-head knockout maps at the cost of a forward, compressed caches included (issue 43),
and the training-free compressed layer against the layer it replaces; ratios measured in one run.

    python benchmarks/compressed_maps.py --out benchmarks/results/compressed_maps.json

On one CPU thread it measures, each as a ratio to one clean forward of the same batch (logits at
the query positions only, no cache), time and peak memory (peak bytes of live tensors,
`attention.tensor_peak_bytes`) of `knockout_map` over every layer and KV head, method "auto":

- (a) plain SmolLM2-135M at 128 and 256 tokens (the KV-cache path, `backends.kv_cache`);
- (b) SmolLM2-135M with training-free W8/S8 mean compression of every layer (local 16) at 256 and
  1,024 tokens (the same path through `backends.compressed_final`);
- (c) the tiny random DeepSeek-V4 (`backends.tiny.tiny_deepseek_v4`: sliding, CSA, HCA, CSA) at
  500 tokens, the longest induction prompt of distinct tokens its 512-token vocabulary allows (the
  decode path, `families.deepseek_v4.decode_final`);

(e) a tiny random DeepSeek-V3.2 (DSA: 4 layers, `families.dsa.tiny_dsa_spec`, 512-token vocabulary,
  index_topk 64) at 500 tokens (the DSA final-position path, `families.dsa.final`: the indexer's keys
  of the prefix kept);

and (d) the forward of one SmolLM2 attention layer (layer 0's weights) with and without W8/S8
compression at 256 and 1,024 tokens. Each timed run follows its own clean forward; a time ratio is
the median of those paired ratios over `--repeats` interleaved rounds (stable when other processes
share the CPU). Maps run `--max-rows` rows per unit chunk (default 64: 16 units of 4 rows), which
bounds the chunk's logits [units, rows, vocab]; the prefix is held once, not per unit. The path
each map took is recorded (`meta["intervention"]["path"]`). Targets: map <= 1.5x (time) and
<= 1.3x (memory) a clean forward; the compressed layer <= 1x the plain layer.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention import tensor_peak_bytes  # noqa: E402

from phaseinterp import __version__  # noqa: E402
from phaseinterp.backends import KVCompression, backend_for, compress_attention, restore_attention  # noqa: E402
from phaseinterp.interventions import calibrate, knockout_map  # noqa: E402
from phaseinterp.measure.outputs import write_atomic  # noqa: E402
from phaseinterp.measure.provenance import versions  # noqa: E402
from phaseinterp.tasks.induction import induction_final_batch  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(xs: list[float]) -> float:
    return float(sorted(xs)[len(xs) // 2])


def map_vs_clean(name: str, backend, model, batch, calib_batch, args) -> dict:
    """Time and memory of an all-layer KV-head map against one clean forward of the same batch."""
    calib = calibrate(backend, calib_batch)
    qpos = batch.query_pos[:, None]

    def clean():
        return model(input_ids=batch.tokens, use_cache=False, logits_to_keep=qpos).logits

    def kmap():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # units that change nothing at some rows
            return knockout_map(backend, batch, calib, n_boot=args.n_boot, max_rows=args.max_rows, progress=False)

    with torch.no_grad():
        clean()  # warm up
        meta = kmap().meta["intervention"]
        mem_clean, mem_map = tensor_peak_bytes(clean), tensor_peak_bytes(kmap)
        t_clean, t_map, ratios = [], [], []
        for _ in range(args.repeats):
            a, b = timed(clean), timed(kmap)
            t_clean.append(a)
            t_map.append(b)
            ratios.append(b / a)
    row = {"case": name, "rows": len(batch), "seq_len": int(batch.tokens.shape[1]), "units": backend.cfg.n_layers
           * backend.cfg.n_kv_heads, "path": meta["path"], "fallback": meta.get("fallback"),
           "seconds": {"clean_forward": t_clean, "map": t_map}, "time_ratio": median(ratios),
           "peak_bytes": {"clean_forward": mem_clean, "map": mem_map}, "memory_ratio": mem_map / mem_clean}
    print(json.dumps({k: row[k] for k in ("case", "seq_len", "rows", "path", "time_ratio", "memory_ratio")}), flush=True)
    return row


def layer_rows(model, args) -> list[dict]:
    """One attention layer's forward, compressed (W8/S8 mean, local 16) against plain."""
    from transformers.masking_utils import create_causal_mask

    rows = []
    spec = KVCompression(8, 8, "mean", local=16, layers=(0,))
    for T in args.layer_seq_len:
        x = torch.randn(args.layer_rows, T, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
        pos = torch.arange(T)[None]
        pe = model.model.rotary_emb(x, pos)
        mask = create_causal_mask(config=model.config, inputs_embeds=x, attention_mask=None, cache=None,
                                  position_ids=pos)
        fns = {}
        for kind in ("plain", "compressed"):
            restore_attention(model)
            if kind == "compressed":
                compress_attention(model, spec)
            attn = model.model.layers[0].self_attn
            fns[kind] = (lambda a=attn, x=x, pe=pe, mask=mask: a(x, position_embeddings=pe, attention_mask=mask))
        restore_attention(model)
        seconds: dict[str, list[float]] = {"plain": [], "compressed": []}
        peak = {}
        with torch.no_grad():
            for kind in fns:
                compress_attention(model, spec) if kind == "compressed" else restore_attention(model)
                fns[kind]()
                peak[kind] = tensor_peak_bytes(fns[kind])
            for _ in range(args.repeats):
                for kind in fns:  # interleaved
                    compress_attention(model, spec) if kind == "compressed" else restore_attention(model)
                    seconds[kind].append(timed(fns[kind]))
        restore_attention(model)
        ratio = median([c / p for c, p in zip(seconds["compressed"], seconds["plain"])])
        row = {"case": "layer W8/S8 mean L16 vs plain (SmolLM2 layer 0)", "rows": args.layer_rows, "seq_len": T,
               "seconds": seconds, "time_ratio": ratio, "peak_bytes": peak,
               "memory_ratio": peak["compressed"] / peak["plain"]}
        print(json.dumps({k: row[k] for k in ("case", "seq_len", "rows", "time_ratio", "memory_ratio")}), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n-per-residue", type=int, default=1, help="prompts per residue (rows = this x modulus)")
    parser.add_argument("--modulus", type=int, default=4)
    parser.add_argument("--plain-seq-len", type=int, nargs="*", default=[128, 256])
    parser.add_argument("--compressed-seq-len", type=int, nargs="*", default=[256, 1024])
    parser.add_argument("--v4-seq-len", type=int, nargs="*", default=[500],
                        help="induction prompts need distinct token ids: 500 is the longest the tiny vocab (512) allows")
    parser.add_argument("--dsa-seq-len", type=int, nargs="*", default=[500],
                        help="induction prompts of distinct tokens: 500 is the longest a 512-token vocab allows")
    parser.add_argument("--layer-seq-len", type=int, nargs="*", default=[256, 1024])
    parser.add_argument("--layer-rows", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--max-rows", type=int, default=64,
                        help="rows per batched unit computation: units per chunk = this / rows; the chunk's logits "
                             "[units, rows, vocab] are the map's largest tensor besides the prefix")
    parser.add_argument("--out", default="benchmarks/results/compressed_maps.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: list[dict] = []
    command = "python benchmarks/compressed_maps.py " + " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(args).items())

    def save() -> None:  # after every row: a killed run keeps what it measured
        result = {"benchmark": "compressed_maps", "device": "cpu", "threads": 1, "python": platform.python_version(),
                  "phaseinterp": __version__, "versions": versions(), "command": command,
                  "target": {"map_time_ratio": 1.5, "map_memory_ratio": 1.3, "layer_ratio": 1.0}, "rows": rows}
        write_atomic(Path(args.out), json.dumps(result, indent=2))

    batches = lambda T, **kw: (induction_final_batch(args.n_per_residue, T, args.modulus, seed=1, **kw),  # noqa: E731
                               induction_final_batch(args.n_per_residue, T, args.modulus, seed=2, **kw))
    if args.plain_seq_len or args.compressed_seq_len or args.layer_seq_len:
        from phaseinterp.backends.smollm2 import load_smollm2, smollm2_backend

        model, _ = load_smollm2()
        for T in args.plain_seq_len:
            rows.append(map_vs_clean("(a) SmolLM2-135M plain", smollm2_backend(model), model, *batches(T), args))
            save()
        compress_attention(model, KVCompression(8, 8, "mean", local=16))
        for T in args.compressed_seq_len:
            rows.append(map_vs_clean("(b) SmolLM2-135M W8/S8 mean L16, all layers", smollm2_backend(model), model,
                                     *batches(T), args))
            save()
        restore_attention(model)
        rows += layer_rows(model, args)
        save()
    if args.v4_seq_len:
        from phaseinterp.backends.tiny import tiny_deepseek_v4

        v4 = tiny_deepseek_v4(seed=0)
        for T in args.v4_seq_len:
            rows.append(map_vs_clean("(c) tiny DeepSeek-V4 (sliding, CSA, HCA, CSA)", backend_for(v4), v4,
                                     *batches(T, vocab=(4, 512)), args))
            save()
    if args.dsa_seq_len:
        from phaseinterp.families.dsa import tiny_dsa_spec

        dsa = tiny_dsa_spec(512, n_layers=4, index_topk=64, n_ctx=max(args.dsa_seq_len)).build(seed=0).hf.eval()
        for T in args.dsa_seq_len:
            rows.append(map_vs_clean("(e) tiny DeepSeek-V3.2 DSA (4 layers, index_topk 64)", backend_for(dsa), dsa,
                                     *batches(T, vocab=(4, 512)), args))
            save()
    save()


if __name__ == "__main__":
    main()
