"""The recipe rule (`phaseinterp.train.rule`), the sparse-start and aligned-start curricula, the
exclusion-shortcut counts and the trainer's fast path. The zoo trained with the rule is a study:
experiments/zoo/test_zoo.py."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from phaseinterp import HookedCompressedTransformer
from phaseinterp.cli import main
from phaseinterp.tasks import RecordLookup
from phaseinterp.train import Mixture, make_batch
from phaseinterp.train.data import IGNORE
from phaseinterp.train.loop import batch_sums
from phaseinterp.train.recipes import MIXTURE
from phaseinterp.train.rule import ALIGNED_STEPS, aligned_phase, rule_recipe, table_period

ROOT = Path(__file__).resolve().parents[1]


def test_the_rule_builds_what_was_asked():
    cfg, tcfg = rule_recipe(6, 3, gate="vector", kv_heads=2, rope=False, seed=5)
    cc = cfg.compression(0)
    assert (cc.window, cc.stride, cc.gate, cc.rope) == (6, 3, "vector", "none") and cfg.n_kv_heads == 2
    assert cfg.compression(1) == cc and tcfg.seed == 5 and tcfg.mixture.seq_len == 64
    full, ftc = rule_recipe(layout="full", kv_heads=4)
    assert full.strides == () and full.n_kv_heads == 4 and ftc.mixture.seq_len == 64
    assert (full.d_head, cfg.d_head) == (16, 64)  # full attention keeps small heads (docs/training.md)
    csa, _ = rule_recipe(layout="deepseek-csa")
    assert csa.compression(0).layout == "deepseek-csa" and csa.compression(0).gate == "vector"
    assert rule_recipe(layout="full", d_head=64)[0].d_head == 64


def test_the_rule_builds_the_papers_controlled_variants():
    base, base_t = rule_recipe(8, 8)
    cfg, tcfg = rule_recipe(8, 8, offset_bias=False, payload="shared", rope_dims=32, qk_norm=False)
    cc = cfg.compression(0)
    assert (cc.offset_bias, cc.payload, cc.rope, cc.rope_dims, cfg.qk_norm) == (False, "shared", "partial", 32, False)
    assert base.compression(0).offset_bias and base.qk_norm and tcfg == base_t  # the variants change the model only
    assert cfg.replace(qk_norm=True, layers=base.layers) == base


def test_the_rule_starts_large_windows_and_uniform_gates_phase_aligned_at_a_seed_drawn_phase():
    for window, gate, modulus in ((12, "scalar", 24), (16, "scalar", 32), (8, "uniform", 16)):
        phases = set()
        for seed in (0, 1, 2):
            mix = rule_recipe(window, window, gate=gate, seed=seed)[1].mixture
            assert (mix.aligned_steps, mix.aligned_modulus) == (ALIGNED_STEPS, modulus) == (2000, table_period(window))
            phases.add(mix.aligned_phase)
            assert rule_recipe(window, window, gate=gate, seed=seed, aligned=False)[1].mixture == MIXTURE
        assert len(phases) > 1  # the phase follows the seed
    for kwargs in ({"window": 8, "stride": 8}, {"window": 8, "stride": 8, "gate": "vector"}, {"window": 8, "stride": 4},
                   {"layout": "deepseek-csa"}, {"layout": "full"}):
        assert rule_recipe(**kwargs)[1].mixture == MIXTURE  # smaller windows learn without it
    w8 = rule_recipe(8, 8, seed=1, aligned=True)[1].mixture
    assert (w8.aligned_steps, w8.aligned_modulus) == (2000, 16)
    with pytest.raises(ValueError, match=re.escape("aligned=True is invalid for layout='full'")):
        rule_recipe(layout="full", aligned=True)


@pytest.mark.parametrize("kwargs, message", [
    ({"window": 8}, "layout='generic' needs window and stride"),
    ({"window": 8, "stride": 8, "kv_heads": 3}, "kv_heads=3 is invalid: allowed a divisor of the 4 query heads"),
    ({"window": 8, "stride": 8, "layout": "nsa"}, "layout='nsa' is invalid: allowed one of ['generic', 'deepseek-csa', 'full']"),
    ({"window": 8, "stride": 8, "layout": "full"}, "layout='full' fixes the window and stride"),
    ({"layout": "full", "rope": False}, "layout='full' has no compressor"),
    ({"layout": "deepseek-csa", "gate": "scalar"}, "gate='scalar' is invalid for layout='deepseek-csa'"),
    ({"window": 4, "stride": 8}, "stride=8 is invalid"),
    ({"window": 0, "stride": 1}, "window=0 is invalid: allowed an integer >= 1"),
    ({"window": 8, "stride": 8, "kv_heads": 6}, "kv_heads=6 is invalid: allowed a divisor of the 4 query heads (1, 2, 4) or a multiple of 4"),
    ({"window": 8, "stride": 8, "width": 0}, "width=0 is invalid: allowed an integer >= 8"),
    ({"layout": "full", "d_head": 0}, "d_head=0 is invalid: allowed an integer >= 1"),
    ({"window": 8, "stride": 8, "rope": False, "rope_dims": 16}, "rope_dims=16 is invalid with rope=False"),
    ({"layout": "full", "offset_bias": False}, "layout='full': offset_bias, payload and rope_dims apply to layout='generic' only"),
])
def test_bad_rule_arguments_raise_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        rule_recipe(**kwargs)


def test_sparse_start_ramps_contiguous_rows_and_is_off_by_default():
    dense = Mixture(vocab_size=256, seq_len=64, min_records=1, curriculum_steps=100)
    sparse = Mixture(vocab_size=256, seq_len=64, min_records=1, curriculum_steps=100, sparse_start=True)
    assert [sparse.contiguous_at(s) for s in (0, 50, 100, 500)] == [0.0, 0.25, 0.5, 0.5]
    assert [dense.contiguous_at(s) for s in (0, 50)] == [0.5, 0.5]

    def contiguous_share(mix, step):
        tok = make_batch(mix, 0, step, 512).tokens.numpy()
        keys = (tok >= mix.pools.keys[0]) & (tok <= mix.pools.keys[-1])
        rows = []
        for k in keys:
            starts = np.flatnonzero(k[: 64 - 20])  # haystack keys (the tail is at most 19 tokens)
            if len(starts) >= 2:
                rows.append(bool(np.all(np.diff(starts) == 2)))
        return np.mean(rows)

    assert contiguous_share(sparse, 30) < 0.3 < 0.4 < contiguous_share(dense, 30)  # expected 0.15 and 0.5
    with pytest.raises(ValueError, match="sparse_start=1 is invalid: allowed True or False"):
        Mixture(sparse_start=1)


def _target_key_positions(batch) -> np.ndarray:
    tok, rows = batch.tokens.numpy(), np.flatnonzero(batch.query.numpy().any(1))
    return np.array([int(np.flatnonzero(tok[r, :-1] == tok[r, -1])[0]) for r in rows])


def test_aligned_start_puts_every_target_key_at_one_phase_then_lets_go():
    mix = Mixture(vocab_size=256, seq_len=64, aligned_steps=100, aligned_modulus=24, aligned_phase=17)
    assert mix.aligned_at(0) == mix.aligned_at(99) == (24, 17) and mix.aligned_at(100) is None
    for step in (0, 99):
        assert set(_target_key_positions(make_batch(mix, 3, step, 256)) % 24) == {17}
    after = np.bincount(_target_key_positions(make_batch(mix, 3, 100, 2048)) % 24, minlength=24)
    assert after.min() > 0.5 * after.mean()  # uniform again (expected ~77 per phase)
    plain = Mixture(vocab_size=256, seq_len=64)
    assert plain.aligned_at(0) is None and make_batch(plain, 3, 0, 8).tokens.equal(
        make_batch(dataclasses.replace(plain, aligned_modulus=24, aligned_phase=5), 3, 0, 8).tokens)
    half = np.bincount(_target_key_positions(make_batch(dataclasses.replace(mix, aligned_fraction=0.5), 3, 0, 2048)) % 24,
                       minlength=24)
    assert 0.4 < half[17] / half.sum() < 0.6 and np.delete(half, 17).min() > 0  # half aligned, half anywhere (~0.52)
    with pytest.raises(ValueError, match=re.escape("aligned_fraction=1.5 is invalid: allowed a number in [0, 1]")):
        Mixture(aligned_fraction=1.5)
    with pytest.raises(ValueError, match=re.escape("aligned_phase=24 is invalid: allowed an integer >= 0 and <= 23")):
        Mixture(aligned_modulus=24, aligned_phase=24)
    with pytest.raises(ValueError, match=re.escape("aligned_steps=-1 is invalid: allowed an integer >= 0")):
        Mixture(aligned_steps=-1)


def test_logits_at_marked_positions_equal_the_full_forward_there():
    cfg, tcfg = rule_recipe(4, 4)
    model = HookedCompressedTransformer(cfg.replace(d_model=32, d_head=8, d_mlp=48), seed=0).eval()
    batch = make_batch(tcfg.mixture, 0, 3000, 6)
    mask = batch.targets != IGNORE
    full = model(batch.tokens)
    torch.testing.assert_close(model(batch.tokens, at=mask), full[mask], rtol=1e-5, atol=1e-5)
    wl_sel, sums_sel = batch_sums(model(batch.tokens, at=mask), batch)
    wl_full, sums_full = batch_sums(full, batch)
    torch.testing.assert_close(wl_sel, wl_full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sums_sel, sums_full, rtol=1e-5, atol=1e-5)
    assert sums_full[2] == batch.lookup.sum() and sums_full[6] == batch.query.sum() > 0
    with pytest.raises(ValueError, match="at= needs return_type='logits'"):
        model(batch.tokens, return_type="loss", at=mask)


def test_cli_recipe_rule_trains_a_stride_outside_the_zoo_and_cards_it_by_its_period(tmp_path):
    out = tmp_path / "w6s6"
    argv = ["train", "--recipe", "rule", "--window", "6", "--stride", "6", "--steps", "3", "--out", str(out),
            "--no-progress", "--eval-examples", "2"]
    assert main(argv) == 0
    card = json.loads((out / "card.json").read_text())
    assert card["name"] == "rule-w6s6-s0" and card["model_config"]["layers"][0]["window"] == 6
    assert card["phase_curve"]["task"]["modulus"] == 24 and len(card["phase_curve"]["accuracy"]) == 24
    assert card["phase_curve"]["task"]["seq_len"] == 112 > card["data"]["eval_task"]["seq_len"] == 64  # rows lengthened
    assert card["phase_curve"]["learned"] is False  # 3 steps: nothing retrieved


def test_the_rule_aligns_windows_from_12_and_uniform_gates_only():
    # W12 and W16 learned only with the aligned start; aligned W10 runs did not learn (docs/training.md)
    aligned = [w for w in range(1, 25) if rule_recipe(w, w)[1].mixture.aligned_steps]
    assert aligned == list(range(12, 25)) and not any(rule_recipe(10, s)[1].mixture.aligned_steps for s in range(1, 11))
    assert rule_recipe(4, 4, gate="uniform")[1].mixture.aligned_steps == 2000
    assert rule_recipe(layout="full")[1].mixture.aligned_steps == 0


def test_the_aligned_start_is_modulo_the_zoo_tables_modulus_and_can_be_overridden():
    moduli = {(w, s): rule_recipe(w, s, gate="uniform")[1].mixture.aligned_modulus for w, s in ((8, 8), (12, 12), (16, 16), (14, 7))}
    assert moduli == {(w, s): table_period(s) for w, s in moduli} == {(8, 8): 16, (12, 12): 24, (16, 16): 32, (14, 7): 56}
    mix = rule_recipe(14, 7, aligned_modulus=14, seed=1)[1].mixture
    assert (mix.aligned_modulus, mix.aligned_phase) == (14, aligned_phase(1, 14))
    with pytest.raises(ValueError, match="aligned_modulus=40 applies only with the aligned start"):
        rule_recipe(10, 10, aligned_modulus=40)
    with pytest.raises(ValueError, match=re.escape("aligned_modulus=0 is invalid: allowed an integer >= 1")):
        rule_recipe(12, 12, aligned_modulus=0)


def test_the_positions_an_aligned_key_can_take_are_what_the_sweep_docs_say():
    """docs/training.md, "Where the sweep stops": the aligned key's positions in the 64-token training rows."""
    from experiments.zoo.members import zoo_recipe

    def positions(member: str, seed: int) -> list[int]:
        return sorted(set(_target_key_positions(make_batch(zoo_recipe(member, seed)[1].mixture, seed, 0, 256)).tolist()))

    found = {(m, s): positions(m, s) for m in ("w10s10-aligned", "w20s20", "w12s12", "w16s16", "w14s7", "w14s7-mod14",
                                               "w24s12") for s in (0, 1)}
    assert found[("w10s10-aligned", 0)] == found[("w20s20", 0)] == [39] and found[("w16s16", 0)] == [31]
    assert found[("w10s10-aligned", 1)] == found[("w20s20", 1)] == [14, 54] and found[("w16s16", 1)] == [11, 43]
    assert found[("w12s12", 0)] == [23, 47] and found[("w12s12", 1)] == found[("w24s12", 1)] == [8, 32, 56]
    assert found[("w14s7", 0)] == [55] and found[("w14s7", 1)] == [20] and found[("w14s7-mod14", 0)] == [13, 27, 41, 55]
    docs = " ".join((ROOT / "docs" / "training.md").read_text().split())
    assert ("40 for S = 5 and 10, the aligned key sits at one or two positions of a 64-token row (seed 0: position 39 "
            "only; seed 1: 14 and 54)") in docs
    assert "four positions of a row (13, 27, 41, 55 for seed 0) instead of one (55; 20 for seed 1)" in docs


def test_cli_aligned_start_overrides_the_rule_and_names_the_run(tmp_path):
    def card(*extra):
        out = tmp_path / "-".join(extra)
        assert main(["train", "--recipe", "rule", *extra, "--steps", "2", "--out", str(out), "--no-progress",
                     "--eval-examples", "1"]) == 0
        c = json.loads((out / "card.json").read_text())
        return c["train_config"]["mixture"]["aligned_steps"], c["name"]

    assert card("--window", "12", "--stride", "12") == (2000, "rule-w12s12-s0")
    assert card("--window", "12", "--stride", "12", "--no-aligned-start") == (0, "rule-w12s12-unaligned-s0")
    assert card("--window", "4", "--stride", "4", "--aligned-start") == (2000, "rule-w4s4-aligned-s0")


def test_cli_min_undemonstrated_reaches_the_mixture_and_names_the_run(tmp_path, capsys):
    def card(*extra):
        out = tmp_path / "-".join(extra)
        assert main(["train", "--recipe", "rule", "--window", "4", "--stride", "4", *extra, "--steps", "2", "--out", str(out),
                     "--no-progress", "--eval-examples", "1"]) == 0
        c = json.loads((out / "card.json").read_text())
        return c["train_config"]["mixture"]["min_undemonstrated"], c["name"]

    assert card() == (1, "rule-w4s4-s0")
    assert card("--min-undemonstrated", "3") == (3, "rule-w4s4-undemo3-s0")
    assert main(["train", "--recipe", "rule", "--window", "4", "--stride", "4", "--min-undemonstrated", "0",
                 "--out", str(tmp_path / "bad"), "--no-progress"]) == 2
    assert "min_undemonstrated=0 is invalid: allowed an integer >= 1 and <= 10" in capsys.readouterr().err


def test_cli_recipe_errors_are_one_line(tmp_path, capsys):
    base = ["train", "--out", str(tmp_path / "x"), "--no-progress"]
    assert main([*base, "--recipe", "rule", "--window", "8", "--stride", "8", "--kv-heads", "3"]) == 2
    assert "kv_heads=3 is invalid" in capsys.readouterr().err
    assert main([*base, "--preset", "w4s4", "--window", "8", "--no-rope"]) == 2
    assert "--window --no-rope apply only with --recipe rule" in capsys.readouterr().err
    assert main([*base, "--preset", "w4s4", "--width", "128"]) == 2
    assert "--width apply only with --recipe rule" in capsys.readouterr().err


@pytest.mark.parametrize("curve, expected", [
    ([0, 1, 1, 0] * 2, 4),                      # period 4 over R = 8
    ([1, 0, 0, 0, 0, 0, 0, 0] * 2, 8),          # one good phase in 8, R = 16
    ([1, 0] * 4, 2),
    ([0.5] * 8, None),                          # flat: no period
    ([0.2, 0.25, 1.0, 0.2, 0.25, 0.15, 0.2, 0.1] * 2, 8),   # one strong phase, small ripple
    ([0.7, 0.3, 1.0, 0.25, 0.7, 0.25, 0.85, 0.15] * 2, 4),  # period 4 carries > 90% of the power
    ([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0] * 2, 12),
])
def test_dominant_period_reads_the_strongest_frequency(curve, expected):
    from phaseinterp.measure import dominant_period

    assert dominant_period(np.array(curve, dtype=float)) == expected


@pytest.mark.slow  # torch.compile takes a minute or two on these machines
def test_compiled_training_follows_the_eager_run_and_refuses_mitigations(unchecked, tmp_path):
    # unchecked: the runtime type checker cannot follow torch.compile's fake tensors
    from phaseinterp.config import CompressionConfig
    from phaseinterp.train import TrainConfig, train
    from phaseinterp.train.mitigation import Mitigation
    from tests.helpers import tiny_cfg

    mix = Mixture(vocab_size=64, seq_len=40, min_records=2, max_records=5, min_demos=0, max_demos=2, curriculum_steps=0)
    cfg = tiny_cfg([CompressionConfig(window=4, stride=4, local_window=4), "full"], vocab_size=64, d_model=32, d_mlp=48)
    tc = TrainConfig(steps=4, batch_size=8, lr=1e-2, warmup_steps=1, mixture=mix, log_every=1, device="cpu")
    eager = train(cfg, tc, tmp_path / "eager", progress=False)
    compiled = train(cfg, tc.replace(compile=True), tmp_path / "compiled", progress=False)
    assert [m["loss"] for m in compiled.metrics] == pytest.approx([m["loss"] for m in eager.metrics], rel=1e-4)
    assert [m["loss"] for m in eager.metrics][-1] != eager.metrics[0]["loss"]  # it trained
    with pytest.raises(ValueError, match="compile=True is invalid with training-time mitigations"):
        train(cfg, tc.replace(compile=True, mitigation=Mitigation(coverage_weight=0.1)), tmp_path / "m", progress=False)


def test_absolute_knockout_change_is_defined_at_weak_residues_and_matches_the_accuracies():
    from pathlib import Path

    import phaseinterp
    from phaseinterp.interventions import knockout_map

    path = Path(__file__).resolve().parents[1] / "assets" / "checkpoints" / "w4s4.safetensors"
    model = phaseinterp.load(path).eval()
    task = RecordLookup(vocab_size=256, n_records=10, n_demos=6, seq_len=64)
    batch, calib = task.sample(8, 8, seed=0), task.sample(8, 8, seed=0, split="calibration")
    rel = knockout_map(model, batch, calib, n_boot=50, change="relative")
    ab = knockout_map(model, batch, calib, n_boot=50)  # the default
    clean = np.array(ab.clean["accuracy"], dtype=float)
    assert np.isnan(rel.values).any() and np.isfinite(ab.values).all()  # weak residues: clean accuracy 0
    assert (rel.masked == np.isnan(rel.values)).all() and rel.meta["masked"]["reason"]  # every nan says why
    np.testing.assert_allclose(ab.values, 100 * (ab.extras["acc_knockout"] - clean), atol=1e-9)
    assert ((ab.lo <= ab.values + 1e-9) & (ab.values <= ab.hi + 1e-9)).all()
    assert ab.quantity == "absolute accuracy change (pp)" and ab.values.min() < -50  # layer 1's head owns phases
    with pytest.raises(ValueError, match="change='ratio' is invalid: allowed one of"):
        knockout_map(model, batch, calib, n_boot=5, change="ratio")


def _haystack_keys(batch, mix: Mixture):
    """Per lookup row: (positions of its haystack keys, the row's tokens, its demonstrations)."""
    tok = batch.tokens.numpy()
    for r in np.flatnonzero(batch.query.numpy().any(1)):
        n_demos = int((batch.targets[r] != -100).sum()) - 1
        pos = np.arange(1, mix.seq_len - 1 - 2 * n_demos)
        yield pos[(tok[r, pos] >= mix.pools.keys[0]) & (tok[r, pos] <= mix.pools.keys[-1])], tok[r], n_demos


def _haystack_keys_at(batch, mix: Mixture, modulus: int, phase: int) -> list[int]:
    """Per lookup row: haystack keys (not the target's) whose position is `phase` mod `modulus`."""
    return [int(np.sum((pos % modulus == phase) & (row[pos] != row[-1]))) for pos, row, _ in _haystack_keys(batch, mix)]


def test_aligned_decoys_put_another_record_at_the_aligned_phase_without_moving_the_target():
    mix = Mixture(vocab_size=256, seq_len=64, aligned_steps=100, aligned_modulus=32, aligned_phase=31,
                  aligned_decoys=1, aligned_decoy_modulus=16)
    batch = make_batch(mix, 3, 0, 512)
    assert set(_target_key_positions(batch) % 32) == {31}
    with_decoy = np.mean(np.array(_haystack_keys_at(batch, mix, 16, 15)) >= 1)
    plain = make_batch(dataclasses.replace(mix, aligned_decoys=0), 3, 0, 512)
    without = np.mean(np.array(_haystack_keys_at(plain, mix, 16, 15)) >= 1)
    assert with_decoy > 0.95 and without < 0.2  # measured 1.0 and 0.01
    # every row keeps its records: the same key and value tokens, each pair intact
    tok = batch.tokens.numpy()
    for row in tok[batch.query.numpy().any(1)]:
        keys = np.flatnonzero((row >= mix.pools.keys[0]) & (row <= mix.pools.keys[-1]))
        assert np.all((row[keys[:-1] + 1] >= mix.pools.values[0]) & (row[keys[:-1] + 1] <= mix.pools.values[-1]))
    after = make_batch(mix, 3, 100, 64).tokens
    assert after.equal(make_batch(dataclasses.replace(mix, aligned_decoys=0), 3, 100, 64).tokens)
    with pytest.raises(ValueError, match=re.escape("aligned_decoy_modulus=12 is invalid: allowed 0 or a divisor of aligned_modulus=32")):
        dataclasses.replace(mix, aligned_decoy_modulus=12)
    with pytest.raises(ValueError, match=re.escape("aligned_decoys=2 is invalid: allowed an integer >= 0 and <= 1")):
        dataclasses.replace(mix, aligned_decoys=2)


def _undemonstrated(batch, mix: Mixture) -> np.ndarray:
    """Per lookup row: (haystack records, those whose key no demonstration repeats)."""
    return np.array([(len(pos), len(pos) - n_demos) for pos, _, n_demos in _haystack_keys(batch, mix)])


def test_min_undemonstrated_leaves_more_than_the_target_undemonstrated():
    mix = Mixture(vocab_size=256, seq_len=64)
    one = _undemonstrated(make_batch(mix, 5, 1000, 512), mix)[:, 1]
    assert one.min() == 1 and np.mean(one == 1) > 0.5  # most rows: the target is the only record never demonstrated
    three = dataclasses.replace(mix, min_undemonstrated=3)
    n, left = _undemonstrated(make_batch(three, 5, 1000, 512), three).T
    assert np.all(left >= np.minimum(n, 3)) and np.any(n == 2) and np.any(left > 3)
    with pytest.raises(ValueError, match=re.escape("min_undemonstrated=0 is invalid: allowed an integer >= 1 and <= 10")):
        Mixture(min_undemonstrated=0)
    late = dataclasses.replace(three, min_undemonstrated_from=200)
    assert [late.undemonstrated_at(step) for step in (0, 199, 200)] == [1, 1, 3]
    assert make_batch(late, 5, 199, 64).tokens.equal(make_batch(mix, 5, 199, 64).tokens)
    assert make_batch(late, 5, 200, 64).tokens.equal(make_batch(three, 5, 200, 64).tokens)
    assert not make_batch(late, 5, 200, 64).tokens.equal(make_batch(mix, 5, 200, 64).tokens)
    with pytest.raises(ValueError, match=re.escape("min_undemonstrated_from=-1 is invalid: allowed an integer >= 0")):
        Mixture(min_undemonstrated_from=-1)


class _LookupOracle(torch.nn.Module):
    """Answers the final query by key match (`exclusion=False`) or, ignoring the query's key, with
    the value of the first haystack record no demonstration repeats (`exclusion=True`)."""

    def __init__(self, mix: Mixture, exclusion: bool):
        super().__init__()
        self.mix, self.exclusion = mix, exclusion
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, tokens):
        keys = self.mix.pools.keys
        logits = torch.zeros(*tokens.shape, self.mix.vocab_size)
        for r, row in enumerate(tokens.tolist()):
            is_key = [keys[0] <= t <= keys[-1] for t in row]
            key_pos = [i for i in range(1, len(row) - 1) if is_key[i]]
            if self.exclusion:
                seen = [row[i] for i in key_pos]
                pos = next(i for i in key_pos if seen.count(row[i]) == 1)
            else:
                pos = key_pos[[row[i] for i in key_pos].index(row[-1])]
            logits[r, -1, row[pos + 1]] = 1.0
        return logits


def test_accuracy_by_undemonstrated_tells_exclusion_from_retrieval():
    from phaseinterp.train.evaluate import accuracy_by_undemonstrated

    retrieval = accuracy_by_undemonstrated(_LookupOracle(MIXTURE, exclusion=False), MIXTURE, n_rows=512)["by_undemonstrated"]
    exclusion = accuracy_by_undemonstrated(_LookupOracle(MIXTURE, exclusion=True), MIXTURE, n_rows=512)["by_undemonstrated"]
    assert all(v["accuracy"] == 1.0 for v in retrieval.values()) and set(retrieval) == set(exclusion)
    assert exclusion["1"]["accuracy"] == 1.0 and exclusion["1"]["rows"] > 256  # most training rows
    several = [v for k, v in exclusion.items() if k != "1"]
    share = sum(v["correct"] for v in several) / sum(v["rows"] for v in several)
    assert 0.15 < share < 0.6  # the first of k >= 2 candidates is the target about 1/k of the time
    with pytest.raises(ValueError, match="n_rows=0 is invalid: allowed an integer >= 1"):
        accuracy_by_undemonstrated(_LookupOracle(MIXTURE, exclusion=True), MIXTURE, n_rows=0)
