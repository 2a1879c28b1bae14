"""A small program on the public API, for tests/test_typing.py: mypy checks it (it is never called),
and every name it reaches through a lazy export must resolve for the type checker."""

from __future__ import annotations

import phaseinterp
from phaseinterp import HookedCompressedTransformer, ModelConfig, load, preset
from phaseinterp.interventions import knockout_map
from phaseinterp.measure import PhaseCurve, phase_sweep
from phaseinterp.model.nsa import NSAConfig
from phaseinterp.plot import map_figure, phase_figure, save_html
from phaseinterp.tasks import PhaseBatch, RecordLookup
from phaseinterp.theory import FlowConfig, TheoryConfig, integrate
from phaseinterp.train import TrainConfig, recipe


def quickstart(path: str) -> PhaseCurve:
    shipped: list[str] = [m.name for m in phaseinterp.models() if m.installed]
    model = phaseinterp.load(path if path else shipped[0])
    task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)
    batch: PhaseBatch = task.sample(64, modulus=8)
    calib = task.sample(64, modulus=8, split="calibration")
    curve = phase_sweep(model, batch)
    smap = knockout_map(model, batch, calib)
    save_html(phase_figure(curve), "curve.html")
    save_html(map_figure(smap), "map.html")
    return curve


def the_other_names() -> None:
    model = HookedCompressedTransformer(phaseinterp.preset("tiny-w4s4"))
    shipped: HookedCompressedTransformer = phaseinterp.load("w4s4")  # a core shipped name: its class
    print(shipped.cfg.strides)
    config: ModelConfig = preset("tiny-w4s4")
    print(model.cfg, config, load, phaseinterp.__version__, phaseinterp.PRESETS, phaseinterp.head_units)
    model_cfg, train_cfg = recipe("w4s4")
    print(model_cfg, isinstance(train_cfg, TrainConfig), NSAConfig, integrate(TheoryConfig(N=64), FlowConfig(), seeds=[0]))
