"""Shared test fixtures: tiny configs and a model with non-trivial random weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from phaseinterp import CompressionConfig, HookedCompressedTransformer, ModelConfig


def tiny_cfg(layers, **kw) -> ModelConfig:
    base = dict(vocab_size=97, d_model=32, n_layers=len(layers), n_heads=4, n_kv_heads=2, d_head=8, d_mlp=48, n_ctx=256)
    base.update(kw)
    return ModelConfig(layers=tuple(layers), **base)


def noisy_model(cfg: ModelConfig, seed: int = 0, std: float = 0.4) -> HookedCompressedTransformer:
    """Random weights large enough that every path (gates, biases, sinks, norms) matters."""
    model = HookedCompressedTransformer(cfg, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * std)
    return model.eval()


COMPRESSED_VARIANTS = {
    "w4s4-scalar": CompressionConfig(window=4, stride=4, local_window=6),
    "w8s4-vector-tied": CompressionConfig(window=8, stride=4, gate="vector", kv="tied", local_window=5),
    "w6s4-shared-tail": CompressionConfig(window=6, stride=4, payload="shared", gate_maps="shared", local_window="tail"),
    "w4s2-uniform-nobias-norope": CompressionConfig(window=4, stride=2, gate="uniform", rope="none", local_window=3),
    "csa-sink-partial": CompressionConfig(
        window=8, stride=4, gate="vector", kv="tied", layout="deepseek-csa", rope="partial", rope_dims=4,
        rope_style="interleaved", sink=True, local_window=7,
    ),
    "w4s4-offset1-2chunkings": CompressionConfig(window=4, stride=4, grid_offset=1, chunkings=2, local_window=5),
    "w8s4-vector-offset3-4chunkings-tail": CompressionConfig(window=8, stride=4, gate="vector", grid_offset=3, chunkings=4,
                                                             local_window="tail"),
    "hca-noneentrynorm-L0": CompressionConfig(window=5, stride=5, layout="hca", entry_norm=False, local_window=0, sink=True),
}


def assert_final_path_equals_hooks(backend, batch, units, calib, *, atol: float = 1e-4, clean_atol: float = 1e-5,
                                   moved: float = 1e-2):
    """A knockout through the backend's final-position path equals the full-forward (hooks) path on
    `units`: clean logits to `clean_atol`, knocked-out logits to `atol`, and every unit's edit moves
    the logits by more than `moved` (so the equality is not that of two no-ops)."""
    from phaseinterp.interventions import knockout_logits

    c1, fast, m1 = knockout_logits(backend, batch, units, calib, max_rows=24, progress=False)
    c2, slow, m2 = knockout_logits(backend, batch, units, calib, method="hooks", progress=False)
    assert (m1, m2) == ("incremental", "hooks")
    torch.testing.assert_close(c1, c2, atol=clean_atol, rtol=clean_atol)
    assert (slow - c2[None]).abs().amax((1, 2)).min() > moved  # every unit's edit moves the logits
    torch.testing.assert_close(fast, slow, atol=atol, rtol=atol)


ROOT = Path(__file__).resolve().parents[1]


def copy_sources(dst: Path, files: tuple[str, ...] = ("pyproject.toml", "README.md", "LICENSE")) -> Path:
    """`files` and the `phaseinterp/` package copied from the checkout into `dst`, to build a wheel there: a build in
    the checkout rewrites its phaseinterp.egg-info, which tests in the other worker (pytest -n 2) read."""
    for name in files:
        shutil.copy(ROOT / name, dst / name)
    shutil.copytree(ROOT / "phaseinterp", dst / "phaseinterp", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


#: Script source that makes a subprocess SIGKILL itself at its k-th journal unit write: "after" the
#: write, "during" it (half the unit left under its temporary name) or "pause" (sleeps, holding its
#: --out, until the test kills it). The script defines `mode` and `k` before this text.
KILL_AT_JOURNAL_WRITE = r"""
import os, signal, time
from pathlib import Path
from phaseinterp.measure import journal
real, count = journal.write_atomic, [0]

def write_atomic(path, data):
    path = Path(path)
    if path.name == "journal.json":
        return real(path, data)
    count[0] += 1
    if mode == "during" and count[0] == k:
        (path.parent / f".{path.stem}.tmp-{os.getpid()}{path.suffix}").write_bytes(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    out = real(path, data)
    if mode == "after" and count[0] == k:
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "pause" and count[0] == k:
        time.sleep(600)
    return out

journal.write_atomic = write_atomic
"""
