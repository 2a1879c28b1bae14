"""Progress bars: every intervention loop shows one tqdm bar counting its units (our model, an HF
backend), `progress=False` is silent, the chunks a bar advances over change no result."""

import pytest
import torch

from phaseinterp.backends import backend_for
from phaseinterp.backends.tiny import tiny_qwen3
from phaseinterp.interventions import (activation_patching, gate_attribution, gate_cycling, knockout_logits,
                                       knockout_map, mapping_swap, run_units)
from phaseinterp.progress import check_progress, in_chunks
from phaseinterp.tasks import RecordLookup
from phaseinterp.units import head_units
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg


@pytest.fixture(scope="module")
def setup():
    model = noisy_model(tiny_cfg(["full", COMPRESSED_VARIANTS["w4s4-scalar"], "full"]), seed=1)
    task = RecordLookup(vocab_size=97, n_records=6, n_demos=1)
    return model, task.sample(2, 4, seed=0), task.sample(2, 4, seed=0, split="calibration")


def bar_of(capsys, call) -> str:
    """stderr of `call()` (its bars), after checking that the same call with progress=False is silent."""
    capsys.readouterr()
    quiet = call(False)
    assert capsys.readouterr().err == ""
    loud = call(True)
    return quiet, loud, capsys.readouterr().err


def test_knockout_map_counts_its_units_on_both_paths(setup, capsys):
    model, batch, calib = setup
    n = len(head_units(model.cfg, "kv_head"))  # 3 layers x 2 KV heads
    for method in ("incremental", "hooks"):
        quiet, loud, err = bar_of(capsys, lambda p, method=method: knockout_map(model, batch, calib, method=method, n_boot=20,
                                                                               max_rows=2 * len(batch), progress=p))
        assert "knockout" in err and f"{n}/{n}" in err, (method, err)
        assert (quiet.values == loud.values).all()


def test_chunks_of_the_bar_change_no_logit(setup):
    model, batch, calib = setup
    units = head_units(model.cfg, "kv_head")
    for method in ("incremental", "hooks"):
        _, one, _ = knockout_logits(model, batch, units, calib, method=method, max_rows=10**6, progress=False)
        _, chunked, _ = knockout_logits(model, batch, units, calib, method=method, max_rows=len(batch), progress=False)
        torch.testing.assert_close(chunked, one, atol=1e-5, rtol=1e-5)
    assert in_chunks(lambda s: torch.arange(7)[s], 7, 3, progress=False, desc="x").tolist() == list(range(7))


def test_patching_attribution_cycling_and_run_units_show_a_bar(setup, capsys):
    model, batch, _ = setup
    pair = mapping_swap(batch)
    n = 12  # 3 layers x 4 heads
    for method in ("incremental", "hooks"):
        _, _, err = bar_of(capsys, lambda p, method=method: activation_patching(model, pair, method=method, n_boot=20,
                                                                max_rows=4 * len(batch), progress=p))
        assert "patching z" in err and f"{n}/{n}" in err
    quiet, loud, err = bar_of(capsys, lambda p: gate_attribution(model, batch, override="uniform", progress=p))
    cells = 2 * 2 * 4  # one compressed layer: K and V branches x 2 KV heads x 4 offsets
    assert "gate attribution" in err and f"{cells}/{cells}" in err
    assert quiet.spearman == loud.spearman
    _, _, err = bar_of(capsys, lambda p: gate_cycling(model, batch, [1, 2], n_boot=20, progress=p))
    assert "gate cycling" in err and "3/3" in err  # the baseline and two deltas
    zero = {"blocks.0.attn.hook_z": torch.zeros_like}
    _, _, err = bar_of(capsys, lambda p: run_units(model, batch.tokens, batch.query_pos, [{}, zero, zero],
                                                   max_rows=len(batch), progress=p))
    assert "units" in err and "3/3" in err


def test_hf_backend_knockout_shows_a_bar(capsys):
    backend = backend_for(tiny_qwen3(seed=0))
    task = RecordLookup(vocab_size=512, n_records=6, n_demos=1)
    batch, calib = task.sample(1, 4, seed=0), task.sample(1, 4, seed=0, split="calibration")
    n = len(head_units(backend.cfg, "kv_head"))
    _, _, err = bar_of(capsys, lambda p: knockout_map(backend, batch, calib, n_boot=20, max_rows=len(batch), progress=p))
    assert f"{n}/{n}" in err


def test_nsa_branch_knockout_shows_a_bar(capsys):
    pytest.importorskip("native_sparse_attention_pytorch")
    from phaseinterp.interventions.nsa_branches import branch_knockout
    from phaseinterp.model.nsa import NSAConfig, NSATransformer

    model = NSATransformer(NSAConfig(vocab_size=64, d_model=32, compress_block=8, compress_stride=8, num_selected=1,
                                     sliding_window=8), seed=0).eval()
    batch = RecordLookup(vocab_size=64, n_records=6, n_demos=2, seq_len=48).sample(1, 8, seed=0)
    _, _, err = bar_of(capsys, lambda p: branch_knockout(model, batch, branches=["select"], n_boot=20, batch_size=4,
                                                         progress=p))
    forwards = -(-len(batch) // 4) * (1 + 2)  # per batch chunk: clean, then 2 layers x 1 branch
    assert "branch knockout" in err and f"{forwards}/{forwards}" in err


def test_progress_must_be_a_bool(setup, unchecked):
    model, batch, calib = setup
    with pytest.raises(ValueError, match="progress='yes' is invalid: allowed True or False"):
        check_progress("yes")
    with pytest.raises(ValueError, match="progress=1 is invalid"):
        knockout_map(model, batch, calib, n_boot=20, progress=1)


def test_the_sweep_bar_has_the_same_meaning(setup, capsys, unchecked):
    from phaseinterp.measure import phase_sweep

    model, batch, _ = setup
    _, _, err = bar_of(capsys, lambda p: phase_sweep(model, batch, batch_size=4, n_boot=20, n_perm=20, progress=p))
    n = -(-len(batch) // 4)
    assert "phase sweep" in err and f"{n}/{n}" in err
    with pytest.raises(ValueError, match="progress='no' is invalid: allowed True or False"):
        phase_sweep(model, batch, progress="no")
