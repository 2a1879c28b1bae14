"""Cost of a first load of a GGUF model (conversion, cache off) with its metadata parsed once (`load_gguf`:
`one_parse`) against the tokenizer and the model loaded one after the other (transformers parses the file's
metadata for the tokenizer, the config and the weights), side by side in one run.

    python benchmarks/gguf_load.py --out benchmarks/results/gguf_load.json

For each model installed from the registry packages (SmolLM2-135M-Instruct, Gemma 3 270M), on one CPU thread,
it times both ways (`rounds` interleaved rounds, the separate way first), counts the `gguf.GGUFReader`s each
made, and checks that both give the same weights and the same tokens for a sentence. The ratio is the median
of (one parse / separate) over rounds. Target: one parse <= 0.6x separate on Gemma 3 270M.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from phaseinterp import __version__
from phaseinterp.backends import gguf as cache
from phaseinterp.measure.outputs import write_atomic
from phaseinterp.measure.provenance import versions

TEXT = "The special magic number is 8735. What is the special magic number?"


def paths() -> dict[str, Path]:
    from phaseinterp.backends.smollm2 import GGUF_FILE, smollm2_dir
    from phaseinterp.families.gemma3.load import gemma3_270m_file

    return {"smollm2": Path(smollm2_dir()) / GGUF_FILE, "gemma3-270m": gemma3_270m_file()}


def counted(load) -> tuple[float, int, object, object]:
    """(seconds, readers made, model, tokenizer) of `load()`."""
    import gguf

    make, count = gguf.GGUFReader, [0]

    def reader(*args, **kwargs):
        count[0] += 1
        return make(*args, **kwargs)

    gguf.GGUFReader = reader
    try:
        start = time.perf_counter()
        model, tokenizer = load()
        return time.perf_counter() - start, count[0], model, tokenizer
    finally:
        gguf.GGUFReader = make


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/gguf_load.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    os.environ[cache.CACHE_ENV] = "off"  # every load converts
    ways = {"separate": lambda path, kw: (cache.load_gguf_model(path, **kw), cache.load_gguf_tokenizer(path)),
            "one_parse": lambda path, kw: cache.load_gguf(path, **kw)}
    out: dict[str, dict] = {}
    for name, path in paths().items():
        kw = {"attn_implementation": "eager"} if name == "gemma3-270m" else {}
        seconds: dict[str, list[float]] = {w: [] for w in ways}
        readers, same = {}, True
        for _ in range(args.rounds):
            loaded = {}
            for way, load in ways.items():
                t, n, model, tokenizer = counted(functools.partial(load, path, kw))
                seconds[way].append(t)
                readers[way] = n
                loaded[way] = (model.state_dict(), tokenizer(TEXT).input_ids)
                del model
            (a, ta), (b, tb) = loaded["separate"], loaded["one_parse"]
            same &= ta == tb and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        ratio = statistics.median(o / s for o, s in zip(seconds["one_parse"], seconds["separate"]))
        out[name] = {"seconds": {w: [round(x, 1) for x in v] for w, v in seconds.items()}, "readers": readers,
                     "same_weights_and_tokens": bool(same), "ratio_one_parse_to_separate": round(ratio, 3)}
        print(name, out[name], flush=True)
    result = {"benchmark": "gguf_load", "target": "one_parse <= 0.6x separate on gemma3-270m",
              "met": out["gemma3-270m"]["ratio_one_parse_to_separate"] <= 0.6, "models": out, "rounds": args.rounds,
              "threads": 1, "machine": platform.machine(), "processor": platform.processor(), "phaseinterp": __version__,
              "versions": versions(), "command": "python benchmarks/gguf_load.py --out " + str(args.out)}
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}: target met: {result['met']}")


if __name__ == "__main__":
    main()
