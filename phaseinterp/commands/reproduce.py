"""`phaseinterp reproduce`: the phase-sensitivity report from the shipped checkpoints, on CPU.

Sections: phase curves and the periodicity table of every shipped checkpoint; knockout
specialization maps (a compressed model and full attention); gate statistics, profiles, the
(static, per-window) plane, gate cycling and gate dynamics; the theory simulator; and the tiny
HuggingFace DeepSeek-V4 through nnsight (phase sweep and completion flip). Every section calls
library functions. A study adds its own sections through `run(args, extra=...)` (the studies' full
report: `python -m experiments.report` in a checkout). A section that fails is reported in the page
and on stderr, and the command exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from phaseinterp import assets

#: The shipped checkpoints: the checkout's assets/checkpoints, PHASEINTERP_HOME's or the wheel's core set.
ASSETS = assets.default("checkpoints")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("reproduce", help="the phase-sensitivity HTML report from the shipped checkpoints",
                              description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("out/report"), help="output folder (default out/report)")
    p.add_argument("--quick", action="store_true", help="smaller samples (about 2 minutes instead of 10)")
    p.add_argument("--checkpoints", type=Path, default=ASSETS, help="folder of *.safetensors with JSON cards")
    p.add_argument("--png", action="store_true", help="also export PNG copies (needs kaleido and a browser)")
    p.set_defaults(func=run)


def _shipped(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.safetensors") if p.with_suffix(".json").is_file())


def _card_batches(path: Path, model, n: int, modulus: int, *, calibration: bool = False):
    """(batch, calibration batch or None) of the checkpoint's card task (`task_from_card`: its
    matched record lookup unless the card names another task), prompts seeded 0: what
    `phaseinterp knockout` / `gates` sample for a carded checkpoint."""
    from phaseinterp.tasks import task_from_card

    card = json.loads(path.with_suffix(".json").read_text())
    task = task_from_card({"protocol": "prefix", **card["data"]["eval_task"]})
    batch = task.sample(n, modulus, seed=0)
    if batch.tokens.shape[1] > model.cfg.n_ctx:
        raise ValueError(f"{path.stem}: prompts at modulus {modulus} exceed the model's n_ctx={model.cfg.n_ctx}")
    return batch, (task.sample(n, modulus, seed=0, split="calibration") if calibration else None)


def duration(seconds: float | None) -> str:
    """A training time as people read it: "45 s", "34 min", "2.5 h" ("-" when the card has none).

    Example:
        >>> duration(2010.4), duration(45.2), duration(9000), duration(None)
        ('34 min', '45 s', '2.5 h', '-')
    """
    if seconds is None or seconds != seconds:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def periodicity_cell(curve, compressed: bool = True) -> str:
    """`periodicity_pp` to one decimal, or a dash with the reason it is undefined (never NaN): no period
    to test (full attention), or the period equals the modulus (one period per curve, nothing to compare)."""
    if curve.periodicity_pp == curve.periodicity_pp:  # not nan
        return f"{curve.periodicity_pp:.1f}"
    if curve.period is None or not compressed:
        return "- (full attention: no stride to test)"
    return f"- (period {curve.period} = modulus {curve.modulus}: one period, nothing to compare)"


def phase_curves(ckpts: list[Path], n: int, n_boot: int):
    import pandas as pd

    from phaseinterp import load
    from phaseinterp.config import period_of
    from phaseinterp.measure import phase_sweep
    from phaseinterp.plot import phase_figure
    from phaseinterp.report import Section
    from phaseinterp.tasks import task_from_card

    models = {path: load(path) for path in ckpts}
    strides = sorted({s for m in models.values() for s in m.cfg.strides})
    modulus = period_of(strides) or 8
    curves, rows = {}, []
    for path, model in models.items():
        name = path.stem
        card = json.loads(path.with_suffix(".json").read_text())
        task = task_from_card(card["data"]["eval_task"])
        batch = task.sample(n, modulus, seed=1)
        period = model.cfg.residue_modulus or modulus
        curve = phase_sweep(model, batch, period=period, n_boot=n_boot, n_perm=n_boot, progress=False, label=name)
        curves[name] = curve
        rows.append({"checkpoint": name, "strides": str(list(model.cfg.strides) or "full"),
                     "train time": duration(card.get("wall_time_s")), "mean %": 100 * curve.mean,
                     "worst %": 100 * curve.worst, "gap pp": curve.gap_pp, "periodicity pp": periodicity_cell(curve, bool(model.cfg.strides)),
                     "p (no phase effect)": curve.p_value})
    text = (f"Record lookup at matched protocol (each checkpoint's card), {n} logical examples per residue mod "
            f"{modulus}, prefix padding. Compressed models show accuracy periodic in the needle position with "
            "period S; full attention is flat. Intervals: logical-example cluster bootstrap.")
    return Section("Phase curves of the shipped checkpoints", text, [pd.DataFrame(rows)],
                   [phase_figure(curves, periods=strides)])


def knockout_maps(ckpts: list[Path], n: int, n_boot: int):
    import pandas as pd

    from phaseinterp import load
    from phaseinterp.analysis.map_summary import unit_summary
    from phaseinterp.interventions import knockout_map
    from phaseinterp.plot import map_figure
    from phaseinterp.report import Section

    picks = [p for p in ckpts if p.stem in ("w4s4", "full")] or ckpts[:1]
    figures, tables = [], []
    for path in picks:
        model = load(path)
        batch, calib = _card_batches(path, model, n, 8, calibration=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            smap = knockout_map(model, batch, calib, n_boot=n_boot, seed=0, label=path.stem, progress=False)
        figures.append(map_figure(smap, title=f"{path.stem}: KV-head knockout ({smap.quantity})"))
        tables.append(pd.DataFrame(unit_summary(smap)).assign(checkpoint=path.stem))
    text = ("Mean-ablation of the query heads that read one KV head, at the final position only, calibration "
            "means from a disjoint split. Compressed models: single KV heads own a few phases; full attention: "
            "knockouts act on all phases alike.")
    return Section("Knockout specialization maps", text, tables, figures)


def gates(ckpts: list[Path], n: int, n_boot: int):
    from phaseinterp import load
    from phaseinterp.analysis import checkpoint_step, gate_dynamics, gate_profiles, gate_statistics
    from phaseinterp.interventions import compressors, gate_cycling
    from phaseinterp.plot import cycling_figure, gate_dynamics_figure, gate_plane_figure, gate_profile_figure
    from phaseinterp.report import Section

    path = next((p for p in ckpts if p.stem == "w4s4"), None) or next(p for p in ckpts if p.stem != "full")
    model = load(path)
    batch, _ = _card_batches(path, model, n, 8)
    tokens = batch.tokens
    stats, profiles = gate_statistics(model, tokens), gate_profiles(model, tokens)
    cycling_layers: dict[int, list[int]] = {}
    for layer, _, comp in compressors(model):
        if comp.kind.learned and 8 % comp.cc.stride == 0 and layer not in cycling_layers.get(comp.cc.stride, []):
            cycling_layers.setdefault(comp.cc.stride, []).append(layer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cycling = [r for _, layers in sorted(cycling_layers.items())
                   for r in gate_cycling(model, batch, None, layers=layers, n_boot=n_boot, seed=0, progress=False)]
    figures = [gate_plane_figure(stats, title=f"{path.stem}: gate concentration"), gate_profile_figure(profiles)]
    if cycling:
        figures.append(cycling_figure(cycling, title=f"{path.stem}: gate cycling"))
    series = path.with_suffix("")
    if series.is_dir():  # shipped intermediate checkpoints: the gates during training
        files = sorted([*series.glob("*.safetensors"), path], key=lambda f: checkpoint_step(f, 10**12))
        figures.append(gate_dynamics_figure(gate_dynamics(files, tokens.cpu()),
                                            title=f"{path.stem}: gate concentration during training"))
    text = ("Effective number of offsets (static = exp H(mean gate), per-window = mean exp H(gate); 1 = one-hot, "
            "W = uniform), gate profiles per phase, and gate cycling (gate parameters rolled by delta, payload "
            "maps fixed) with the predicted shift of the phase curve.")
    return Section(f"Compression gates ({path.stem})", text, [stats], figures)


def theory(quick: bool):
    from phaseinterp.report import Section
    from phaseinterp.theory import FlowConfig, TheoryConfig, run_seeds, run_trajectory

    cfg, flow = TheoryConfig(), FlowConfig()
    traj = run_trajectory(cfg, flow, seed=0)
    seeds = run_seeds(cfg, flow, list(range(5 if quick else 20)))
    text = ("The idealized retrieval model (m = 3 heads, S = 8): gradient flow drives every head to one-hot, "
            "static gates with the value one position after the key; positions no head covers become weak phases.")
    return Section("Theory: gradient flow on the idealized model", text, [seeds.tables["seeds"]],
                   list(traj.figures.values()) + list(seeds.figures.values()))


def deepseek(quick: bool):
    import pandas as pd

    from phaseinterp.backends import backend_for
    from phaseinterp.tasks.niah import deepseek_niah
    from phaseinterp.backends.tiny import tiny_deepseek_v4, word_tokenizer
    from phaseinterp.flip import FillerSpec, completion_flip_text
    from phaseinterp.plot import flip_figure
    from phaseinterp.measure import phase_sweep
    from phaseinterp.plot import phase_figure
    from phaseinterp.report import Section

    tok = word_tokenizer()
    backend = backend_for(tiny_deepseek_v4())
    batch = deepseek_niah(tok, 128).sample(2 if quick else 4, 8, seed=0)
    curve = phase_sweep(backend, batch, period=4, n_boot=200, n_perm=200, progress=False, label="DeepSeek-V4 (tiny)")
    spec = FillerSpec.from_tokenizer(tok, symbol="bab", comment_prefix="bac", newline="bad", n_words=16)
    flip = completion_flip_text(backend, tok, "caf cag cak cal", [" cam", " can"], range(32 if quick else 64),
                                period=4, family="words", filler=spec, n_perm=200)
    text = ("HuggingFace DeepseekV4ForCausalLM (HF code, tiny config with CSA and HCA layers, random weights) "
            "driven through nnsight with the same calls as our models: a text-mode NIAH phase sweep (DeepSeek "
            f"protocol) and a completion-flip sweep. Random weights: no phase effect is expected. {flip.describe()}")
    table = pd.DataFrame({"residue": range(len(curve.accuracy)), "accuracy": curve.accuracy, "n": curve.n})
    return Section("DeepSeek-V4 through nnsight (tiny random model)", text, [table], [phase_figure(curve), flip_figure(flip)])


def run(args: argparse.Namespace, extra: Sequence[tuple[str, Callable[[], Any]]] = ()) -> int:
    """Write the report of `args` (the verb's options); `extra`: (name, section builder) pairs appended
    after the library's own sections."""
    import torch
    from tqdm import tqdm

    from phaseinterp.measure.provenance import versions
    from phaseinterp.report import write_report

    torch.set_num_threads(1)
    ckpts = _shipped(args.checkpoints)
    if not ckpts:
        print(f"phaseinterp reproduce: error: no checkpoints with cards in {args.checkpoints}", file=sys.stderr)
        return 2
    n, n_boot = (16, 200) if args.quick else (64, 1000)
    jobs: list[tuple[str, Callable[[], Any]]] = [
        ("phase curves", lambda: phase_curves(ckpts, 2 * n, n_boot)),
        ("knockout maps", lambda: knockout_maps(ckpts, n, n_boot)),
        ("gates", lambda: gates(ckpts, n, n_boot)),
        ("theory", lambda: theory(args.quick)),
        ("deepseek-v4", lambda: deepseek(args.quick)),
        *extra,
    ]
    from phaseinterp.report import Section

    sections, failed, timings = [], [], {}
    for name, job in tqdm(jobs, desc="report", unit="section"):
        start = time.perf_counter()
        try:
            sections.append(job())
        except Exception as err:  # a failed section is shown, printed and turns the exit code non-zero
            failed.append(name)
            traceback.print_exc()
            sections.append(Section(name, error=f"{type(err).__name__}: {err}"))
        timings[name] = round(time.perf_counter() - start, 1)
    provenance = {"command": " ".join(sys.argv), "quick": args.quick, "checkpoints": [str(p) for p in ckpts],
                  "seconds": timings, "versions": versions()}
    path = write_report(sections, args.out / "report.html", "phaseinterp: phase sensitivity report", provenance)
    if args.png:
        _export_png(sections, args.out)
    print(f"wrote {path} ({', '.join(f'{k} {v}s' for k, v in timings.items())})")
    if failed:
        print(f"phaseinterp reproduce: error: sections failed: {failed}", file=sys.stderr)
        return 1
    return 0


def _export_png(sections, out: Path) -> None:
    try:
        for i, section in enumerate(sections):
            for j, fig in enumerate(section.figures):
                fig.write_image(out / f"figure-{i}-{j}.png")
    except Exception as err:  # kaleido or a browser missing: HTML is complete without PNGs
        print(f"PNG export skipped ({type(err).__name__}: {err}); the HTML report is complete", file=sys.stderr)
