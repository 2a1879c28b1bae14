"""`phaseinterp flip`: completion-flip sweep on a checkpoint (token ids) or a HF model folder (text)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from phaseinterp.commands._common import add_guard_args, add_period_arg

DESCRIPTION = """Vary a filler of L tokens before a fixed prompt and record each candidate next token's
probability per L; report whether the preferred candidate follows L mod P. Writes DIR/flip.json and
DIR/flip.html. Our checkpoints take token ids (--prompt-ids, --candidate-ids, --symbol-id,
--word-ids); a HF model folder (--hf PATH, with its tokenizer) takes text (--prompt, --candidates)."""


def _ids(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("flip", help="completion flip: preferred next token vs filler length", description=DESCRIPTION)
    p.add_argument("checkpoint", nargs="?", help="phaseinterp checkpoint or shipped model name, e.g. w4s4 (token-id mode)")
    p.add_argument("--hf", help="HF model folder with a tokenizer (text mode)")
    p.add_argument("--prompt", help="text prompt (text mode)")
    p.add_argument("--candidates", nargs="+", help="candidate continuations, each one token (text mode)")
    p.add_argument("--prompt-ids", help="prompt token ids, e.g. 5,40,7 (token-id mode)")
    p.add_argument("--candidate-ids", help="candidate ids, e.g. 40,41 (token-id mode)")
    p.add_argument("--symbol-id", type=int, help="filler symbol id (token-id mode)")
    p.add_argument("--word-ids", help="filler word ids, e.g. 50-59 (token-id mode)")
    p.add_argument("--bos-id", type=int, default=0, help="token before the filler (token-id mode, default 0)")
    p.add_argument("--family", choices=["symbol", "words", "comment"], default="symbol")
    p.add_argument("--lengths", default="0-63", help="filler lengths, e.g. 0-63 (default)")
    add_period_arg(p, "P for the period analysis, required (4 for DeepSeek-V4 CSA)")
    p.add_argument("--n-perm", type=int, default=2000)
    p.add_argument("--out", type=Path, required=True, help="output directory")
    add_guard_args(p, result="flip.json")
    p.set_defaults(func=run)


def flip(args: argparse.Namespace):
    from phaseinterp.flip import FillerSpec, completion_flip, completion_flip_text

    lengths = _ids(args.lengths)
    if args.period is None:
        raise ValueError("--period P is required: the period of the analysis (4 for DeepSeek-V4 CSA)")
    if (args.checkpoint is None) == (args.hf is None):
        raise ValueError("give a CHECKPOINT (token ids) or --hf PATH (text), exactly one")
    if args.hf is not None:
        from transformers import AutoTokenizer

        from phaseinterp.backends import load_pretrained

        if not args.prompt or not args.candidates:
            raise ValueError("text mode needs --prompt and --candidates")
        backend = load_pretrained(args.hf, device_map=None)
        tok = AutoTokenizer.from_pretrained(args.hf)
        return completion_flip_text(backend, tok, args.prompt, args.candidates, lengths, period=args.period,
                                    family=args.family, n_perm=args.n_perm)
    import phaseinterp
    from phaseinterp.backends import backend_for

    if not (args.prompt_ids and args.candidate_ids and args.symbol_id is not None and args.word_ids):
        raise ValueError("token-id mode needs --prompt-ids, --candidate-ids, --symbol-id and --word-ids")
    spec = FillerSpec(symbol=args.symbol_id, words=tuple(_ids(args.word_ids)))
    return completion_flip(backend_for(phaseinterp.load(args.checkpoint)), _ids(args.prompt_ids),
                           _ids(args.candidate_ids), lengths, filler=spec, family=args.family, period=args.period,
                           head=[args.bos_id], n_perm=args.n_perm)


def run(args: argparse.Namespace) -> int:
    result = flip(args)  # errors: one line through the CLI boundary (phaseinterp/cli.py)
    args.out.mkdir(parents=True, exist_ok=True)
    from phaseinterp.plot import flip_figure, save_html

    save_html(flip_figure(result), args.out / "flip.html")
    result.save(args.out / "flip.json")  # last: the folder is finished once it exists
    print(result.describe())
    return 0
