"""`phaseinterp train`: pretrain a model on the synthetic lookup + language mixture.

    phaseinterp train --preset w4s4 --out runs/w4s4
    phaseinterp train --recipe rule --window 6 --stride 6 --out runs/w6s6   # any compressor, by the recipe rule
    phaseinterp train --config run.json --steps 500 --out runs/mine
    phaseinterp train --preset w4s4 --out runs/w4s4 --resume          # continue the newest checkpoint
    phaseinterp train --preset hf-deepseek-v4 --out runs/hf-v4        # a tiny HF DeepseekV4ForCausalLM
    phaseinterp train --hf-config config.json --steps 500 --out runs/hf   # any HF causal LM config, random init
    torchrun --nproc_per_node 2 -m phaseinterp.cli train --preset w4s4 --out runs/w4s4-ddp
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

DESCRIPTION = """Train a model and write OUT/run.json, OUT/metrics.jsonl, OUT/checkpoints/ and
OUT/card.json. --preset takes a training recipe (see `phaseinterp.train.RECIPES`: the shipped
checkpoints) or a model preset (trained with the default TrainConfig, its mixture over the model's
whole vocabulary). --recipe rule builds model and training config for any compressor by the
recipe rule (--window, --stride, --gate, --kv-heads, --no-rope, --layout, --aligned-start, --min-undemonstrated,
--d-head and the paper's variants --no-offset-bias, --payload shared, --rope-dims, --no-qk-norm;
docs/training.md). --config takes a JSON file
{"model": PRESET_NAME or ModelConfig fields or an HF model {"architecture": ..., "hf_config": {...}},
"train": TrainConfig fields (with "mixture")}. --hf-config takes a HuggingFace config.json (or a
folder holding one) and trains that causal LM from a random init with the default TrainConfig
(the mixture's vocabulary capped at 256 tokens).
Under torchrun every process trains on its share of each global batch (DDP; gloo on CPU)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("train", help="pretrain on the synthetic lookup + language mixture",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", help="training recipe or model preset name")
    src.add_argument("--config", type=Path, help="JSON file with 'model' and 'train'")
    src.add_argument("--recipe", choices=("rule",), help="'rule': the recipe rule for --window/--stride/... "
                     "(phaseinterp.train.rule)")
    src.add_argument("--hf-config", type=Path, metavar="FILE",
                     help="HuggingFace config.json (or its folder): train that causal LM from a random init")
    p.add_argument("--out", type=Path, required=True, help="run folder")
    rule = p.add_argument_group("recipe rule (with --recipe rule)")
    rule.add_argument("--window", type=int, help="W: tokens folded into one entry")
    rule.add_argument("--stride", type=int, help="S: tokens between window starts")
    rule.add_argument("--gate", help="scalar (default), vector or uniform (deepseek-csa: vector)")
    rule.add_argument("--kv-heads", type=int, help="KV heads per layer: 1 (default), 2, 4 or a multiple of 4")
    rule.add_argument("--width", type=int, help="d_model of the rule (default 64; 256 on a GPU)")
    rule.add_argument("--d-head", type=int, help="head size (default: the rule's, 64; full attention 16)")
    rule.add_argument("--no-offset-bias", action="store_true", help="no gate offset bias b_i (a paper variant)")
    rule.add_argument("--payload", choices=("per_offset", "shared"), help="payload maps C_i: per_offset (default) or shared")
    rule.add_argument("--rope-dims", type=int, metavar="N", help="partial RoPE on N trailing channels of each head")
    rule.add_argument("--no-qk-norm", action="store_true", help="no QK-norm (a paper variant)")
    rule.add_argument("--no-rope", action="store_true", help="no RoPE in the compressed layers")
    rule.add_argument("--layout", help="generic (default; needs --window/--stride), deepseek-csa or full")
    rule.add_argument("--aligned-start", action=argparse.BooleanOptionalAction, default=None,
                      help="start phase-aligned: every final query's key at one seed-drawn phase for the first 2000 "
                      "steps (default: the rule's choice, on for windows >= 12 and uniform gates)")
    rule.add_argument("--aligned-modulus", type=int, metavar="R",
                      help="the aligned start's phase is one residue mod R (default: the rule's table modulus)")
    rule.add_argument("--min-undemonstrated", type=int, metavar="K",
                      help="records each training row leaves undemonstrated (default: the rule's, 1); 3 removes the "
                      "exclusion shortcut (docs/training.md)")
    p.add_argument("--steps", type=int, help="optimizer steps (default: the recipe's)")
    p.add_argument("--seed", type=int, help="seed (default: the recipe's)")
    p.add_argument("--batch-size", type=int, help="global batch size")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints")
    p.add_argument("--log-every", type=int, help="steps between metrics lines")
    p.add_argument("--device", help="'auto' (default: CUDA when available), 'cpu', 'cuda', 'cuda:N'")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="CHECKPOINT",
                   help="continue from CHECKPOINT, or with no value from the newest checkpoint in --out")
    p.add_argument("--until", type=int, help="stop after this step (checkpointed); resume later with --resume")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (default 1)")
    p.add_argument("--compile", action="store_true", help="run the forward pass through torch.compile (TrainConfig.compile)")
    p.add_argument("--eval-examples", type=int, default=512,
                   help="logical examples per residue for the card's phase curve (default 512; 0: no card)")
    p.add_argument("--ship", type=Path, metavar="DIR",
                   help="also copy the final weights, card and metrics to DIR/NAME.* (e.g. assets/checkpoints)")
    p.add_argument("--ship-intermediate", action="store_true", help="with --ship: also every earlier checkpoint")
    p.add_argument("--name", help="name of the run in its card and when shipped (default: --preset or the config file stem)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def resolve(args: argparse.Namespace):
    """(name, ModelConfig, TrainConfig) from the arguments."""
    from phaseinterp.families import config_from_dict
    from phaseinterp.presets import PRESETS, preset
    from phaseinterp.train import RECIPES, Mixture, TrainConfig, recipe

    rule_args = [f"--{k.replace('_', '-')}" for k in ("window", "stride", "gate", "kv_heads", "layout", "width", "d_head", "payload", "rope_dims",
                                                      "aligned_start", "aligned_modulus", "min_undemonstrated")
                 if getattr(args, k, None) is not None]
    rule_args += [f"--{flag}" for flag in ("no-rope", "no-offset-bias", "no-qk-norm") if getattr(args, flag.replace("-", "_"), False)]
    if getattr(args, "recipe", None) is None and rule_args:
        raise ValueError(f"{' '.join(rule_args)} apply only with --recipe rule")
    if getattr(args, "recipe", None) is not None:
        name, model_cfg, tcfg = _from_rule(args)
    elif args.preset is not None:
        name = args.preset
        if name in RECIPES:
            model_cfg, tcfg = recipe(name)
        elif name in PRESETS:
            model_cfg = preset(name)
            tcfg = TrainConfig(mixture=Mixture(vocab_size=model_cfg.vocab_size))
        else:
            raise ValueError(f"--preset {name!r} is invalid: allowed a recipe {sorted(RECIPES)} or a model preset {sorted(PRESETS)}")
    elif getattr(args, "hf_config", None) is not None:
        model_cfg = _hf_spec(args.hf_config)
        name = args.hf_config.stem if args.hf_config.is_file() else args.hf_config.name
        tcfg = TrainConfig(mixture=Mixture(vocab_size=min(model_cfg.vocab_size, 256), seq_len=min(64, model_cfg.n_ctx)))
    else:
        name = args.config.stem
        try:
            spec = json.loads(args.config.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"--config {str(args.config)!r} is not a readable JSON file: {e}") from e
        if not isinstance(spec, dict) or set(spec) - {"model", "train"} or "model" not in spec:
            raise ValueError(f"--config {str(args.config)!r} must be a JSON object with keys 'model' (required) and 'train'")
        model = spec["model"]
        model_cfg = preset(model) if isinstance(model, str) else config_from_dict(model)
        train = dict(spec.get("train", {}))
        train.setdefault("mixture", {"vocab_size": model_cfg.vocab_size})
        tcfg = TrainConfig.from_dict(train)
    overrides = {"steps": args.steps, "seed": args.seed, "batch_size": args.batch_size, "lr": args.lr,
                 "checkpoint_every": args.checkpoint_every, "log_every": args.log_every, "device": args.device,
                 "compile": True if getattr(args, "compile", False) else None}
    changes = {k: v for k, v in overrides.items() if v is not None}
    if "steps" in changes and changes["steps"] < tcfg.warmup_steps:
        changes["warmup_steps"] = max(0, changes["steps"] // 10)
    if changes:
        tcfg = tcfg.replace(**changes)
    return args.name or name, model_cfg, tcfg


def _from_rule(args: argparse.Namespace):
    """(name, ModelConfig, TrainConfig) of --recipe rule, seeded by --seed (default 0)."""
    from phaseinterp.train import rule

    seed = 0 if args.seed is None else args.seed
    kv_heads, layout = args.kv_heads or 1, args.layout or "generic"
    width = rule.WIDTH if args.width is None else args.width
    model_cfg, tcfg = rule.rule_recipe(args.window, args.stride, gate=args.gate, kv_heads=kv_heads,
                                      rope=not args.no_rope, layout=layout, width=width, seed=seed, aligned=args.aligned_start,
                                      min_undemonstrated=args.min_undemonstrated, d_head=args.d_head,
                                      offset_bias=not args.no_offset_bias, payload=args.payload or "per_offset",
                                      rope_dims=args.rope_dims, qk_norm=not args.no_qk_norm,
                                      aligned_modulus=args.aligned_modulus)
    aligned = tcfg.mixture.aligned_steps > 0
    first = model_cfg.layers[0]
    default_aligned = rule.aligned_by_rule(None if first == "full" else first)
    shape = layout if layout != "generic" else f"w{args.window}s{args.stride}"
    extras = "".join([f"-{args.gate}" if args.gate not in (None, "scalar") else "", f"-kv{kv_heads}" if kv_heads != 1 else "",
                      "-norope" if args.no_rope else "", f"-d{width}" if width != rule.WIDTH else "",
                      f"-h{args.d_head}" if args.d_head is not None else "",
                      "-nobias" if args.no_offset_bias else "", "-shared" if args.payload == "shared" else "",
                      f"-rope{args.rope_dims}" if args.rope_dims is not None else "", "-noqknorm" if args.no_qk_norm else "",
                      "" if aligned == default_aligned else ("-aligned" if aligned else "-unaligned"),
                      f"-mod{args.aligned_modulus}" if args.aligned_modulus is not None else "",
                      "" if args.min_undemonstrated in (None, rule.MIN_UNDEMONSTRATED) else f"-undemo{args.min_undemonstrated}"])
    return f"rule-{shape}{extras}-s{seed}", model_cfg, tcfg


def _hf_spec(path: Path):
    """HFModelSpec of a HuggingFace config.json (a file, or a folder holding config.json)."""
    from transformers import AutoConfig

    from phaseinterp.families.hf_causal_lm import HFModelSpec

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"--hf-config {str(path)!r} is not a readable HuggingFace config: {e}") from e
    return HFModelSpec.from_config(config)


def run(args: argparse.Namespace) -> int:
    """Train (and card, ship); errors become one line through the CLI boundary (phaseinterp/cli.py)."""
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    import torch

    from phaseinterp.train import train
    from phaseinterp.train.card import make_card, ship, write_card

    if args.threads < 1:
        raise ValueError(f"--threads={args.threads} is invalid: allowed an integer >= 1")
    if args.eval_examples < 0:
        raise ValueError(f"--eval-examples={args.eval_examples} is invalid: allowed an integer >= 0")
    if args.ship_intermediate and args.ship is None:
        raise ValueError("--ship-intermediate needs --ship DIR")
    torch.set_num_threads(args.threads)
    name, model_cfg, tcfg = resolve(args)
    result = train(model_cfg, tcfg, args.out, resume=args.resume, until=args.until, progress=not args.no_progress, name=name)
    if result.rank != 0 or result.step < tcfg.steps:
        return 0
    if args.eval_examples:
        card = make_card(result, model_cfg, tcfg, name=name, eval_examples=args.eval_examples,
                         world_size=result.world_size)
        write_card(card, args.out / "card.json")
        c = card["phase_curve"]
        print(f"{name}: step {result.step}, loss {card['final_metrics'].get('loss', float('nan')):.4f}, "
              f"lookup accuracy mean {c['mean']:.3f} worst {c['worst']:.3f} gap {c['gap_pp']:.1f} pp, "
              f"wall {card['wall_time_s']:.0f} s -> {args.out / 'card.json'}")
    if args.ship is not None:
        for path in ship(args.out, args.ship, name, intermediate=args.ship_intermediate):
            print(f"shipped {path}")
    return 0
