"""NSA's final-position path (`families.nsa.final`): knockout and patching equal to one full forward
per unit for several compression / selection geometries, rows at different query positions."""

import dataclasses

import pytest
import torch

pytest.importorskip("native_sparse_attention_pytorch")

from phaseinterp.families.nsa.backend import NSABackend  # noqa: E402
from phaseinterp.interventions import head_units  # noqa: E402
from phaseinterp.model.nsa import NSATransformer  # noqa: E402
from phaseinterp.model.nsa.config import NSAConfig  # noqa: E402
from phaseinterp.tasks import RecordLookup  # noqa: E402
from tests.helpers import assert_final_path_equals_hooks


def tiny(W: int, S: int, k: int) -> NSATransformer:
    cfg = NSAConfig(vocab_size=64, d_model=32, compress_block=W, compress_stride=S, num_selected=k, sliding_window=8,
                    compress_mlp_expand_factor=32 / (W * 16))
    model = NSATransformer(cfg, seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the library zero-initializes these; random values exercise every term
        for name, p in model.named_parameters():
            scale = 0.5 if any(s in name for s in ("intrablock", "mem_kv", "strategy_combine")) else 0.3
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model


@pytest.mark.parametrize("W,S,k", [(8, 8, 2), (16, 8, 1), (8, 4, 3), (8, 8, 0)])
def test_nsa_knockout_at_the_final_position_equals_full_forwards(W, S, k):
    backend = NSABackend(tiny(W, S, k))
    assert backend.incremental_ok() and backend.incremental_fallback() is None
    task = RecordLookup(vocab_size=64, n_records=12, n_demos=1)
    batch = task.sample(2, 4, seed=0)
    T = batch.tokens.shape[1]
    batch = dataclasses.replace(batch, query_pos=T - 1 - torch.arange(len(batch)) % 5 * 2)  # blocks close and not
    calib = task.sample(2, 4, seed=0, split="calibration")
    units = head_units(backend.cfg, "kv_head") + head_units(backend.cfg, "head")
    assert_final_path_equals_hooks(backend, batch, units, calib)
