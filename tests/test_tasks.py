"""Record-lookup generator: invariants, position matching, splits, determinism, errors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseinterp.tasks import MatchedTargets, PhaseBatch, RecordLookup, TokenPools, default_modulus
from phaseinterp.tasks.layout import offset_range


def record_tokens(batch: PhaseBatch, row: int, L: int) -> np.ndarray:
    """[n_records, L] tokens of every haystack record of one row."""
    pos = batch.record_pos[row, :, None] + torch.arange(L)
    return batch.tokens[row][pos].numpy()


@st.composite
def configs(draw):
    key_len = draw(st.integers(1, 2))
    cfg = dict(key_len=key_len, value_len=draw(st.integers(1, 2)), n_queries=draw(st.integers(1, 2)),
               n_values=draw(st.integers(1, 2)), n_distractors=draw(st.integers(0, 2)) if key_len > 1 else 0,
               n_demos=draw(st.integers(0, 3)), protocol=draw(st.sampled_from(["prefix", "insequence"])),
               spread=draw(st.integers(1, 2)))
    cfg["n_records"] = draw(st.integers(cfg["n_queries"] * (cfg["n_values"] + cfg["n_distractors"]) + cfg["n_demos"], 20))
    return cfg, draw(st.integers(1, 8)), draw(st.integers(0, 20)), draw(st.integers(0, 10**6))


@settings(max_examples=30, deadline=None)
@given(configs())
def test_generator_invariants(params):
    cfg, R, extra, seed = params
    task = RecordLookup(vocab_size=300, **cfg)
    task = RecordLookup(vocab_size=300, seq_len=task.min_seq_len(R) + extra, **cfg)
    n, q, kl, L = 3, cfg["n_queries"], cfg["key_len"], cfg["key_len"] + cfg["value_len"]
    b = task.sample(n, R, seed=seed)
    pools = task.pools
    assert len(b) == n * R * q and b.tokens.shape[1] == task.min_seq_len(R) + extra
    rows = torch.arange(len(b))
    # the target's residue is what was asked: per example and query slot, each residue once
    slot = rows % q
    for e in range(n):
        for t in range(q):
            sel = (b.example_id == e) & (slot == t)
            assert sorted(b.residue[sel].tolist()) == list(range(R))
    assert torch.equal(b.residue, b.key_pos % R)
    # the query position is fixed per slot; the query repeats the target key; the answer follows its key
    for t in range(q):
        assert b.query_pos[slot == t].unique().numel() == 1
    k = torch.arange(kl)
    assert torch.equal(b.tokens[rows[:, None], b.key_pos[:, None] + k], b.tokens[rows[:, None], b.query_pos[:, None] - kl + 1 + k])
    assert torch.equal(b.tokens[rows, b.key_pos + kl], b.answers[:, 0])
    assert torch.equal(b.value_pos, b.key_pos + kl)
    for row in range(0, len(b), 5):
        starts = b.record_pos[row].numpy()
        recs = record_tokens(b, row, L)
        # records never overlap and stay between the head and the tail
        assert (np.diff(starts) >= L).all() and starts[0] >= len(pools.head)
        assert starts[-1] + L <= b.meta["tail_start"]
        if cfg["protocol"] == "prefix":
            assert (np.diff(starts) == L).all()
        # keys, values and filler come from their own pools
        assert np.isin(recs[:, :kl], pools.keys).all() and np.isin(recs[:, kl:], pools.values).all()
        mask = np.ones(b.meta["tail_start"], bool)
        mask[: len(pools.head)] = False
        for s in starts:
            mask[s : s + L] = False
        assert np.isin(b.tokens[row, : b.meta["tail_start"]].numpy()[mask], pools.filler).all()
        # every accepted answer is the first value token of a record of the target key
        key = b.tokens[row, b.key_pos[row] : b.key_pos[row] + kl].numpy()
        same_key = (recs[:, :kl] == key).all(1)
        assert same_key.sum() == cfg["n_values"]
        assert sorted(recs[same_key, kl].tolist()) == sorted(b.answers[row].tolist())
        # distractors share all but the last key token
        if cfg["n_distractors"]:
            near = (recs[:, : kl - 1] == key[:-1]).all(1) & ~same_key
            assert near.sum() >= cfg["n_distractors"]
    # content and order are the same at every residue of an example; only positions move
    for e in range(n):
        rows_e = (b.example_id == e).nonzero()[:, 0].tolist()
        first = record_tokens(b, rows_e[0], L)
        assert all(np.array_equal(first, record_tokens(b, r, L)) for r in rows_e)


@pytest.mark.parametrize("protocol", ["prefix", "insequence"])
@pytest.mark.parametrize("R,spread", [(4, 1), (24, 1), (8, 3)])
def test_position_matching(protocol, R, spread):
    n = 64
    task = RecordLookup(vocab_size=512, protocol=protocol, spread=spread)
    b = task.sample(n, R, seed=3)
    c, V = b.meta["target_center"], b.meta["target_variance"]
    assert V == pytest.approx(R * R * ((spread + 1) ** 2 + 2) / 12)
    assert b.query_pos.unique().tolist() == [b.tokens.shape[1] - 1]
    for r in range(R):
        pos = b.key_pos[b.residue == r].double()
        assert len(pos) == n
        assert abs(pos.mean().item() - c) <= R / n
        assert abs(pos.var(unbiased=False).item() / V - 1) <= 0.05
        assert pos.mean().item() == pytest.approx(b.meta["achieved_mean"][r])


@pytest.mark.parametrize("R", [1, 2, 3, 4, 7, 8, 12, 24, 32])
@pytest.mark.parametrize("M", [1, 2, 4])
def test_matched_distributions_have_equal_moments(R, M):
    targets = MatchedTargets(R, M, center=1000)
    lo, hi = offset_range(R, M)
    assert hi - lo == R * (M + 2) - 1 or R == 1
    for r in range(R):
        p, w = targets.support(r)
        assert (p % R == r).all() and (w > 0).all() and w.sum() == pytest.approx(1)
        mean = (w * p).sum()
        assert mean == pytest.approx(1000, abs=1e-9)
        assert (w * (p - mean) ** 2).sum() == pytest.approx(targets.variance, rel=1e-12)
        assert lo <= p.min() - 1000 and p.max() - 1000 <= hi


def test_protocols_differ_in_distractor_phases():
    prefix = RecordLookup(vocab_size=512, protocol="prefix", seq_len=300).sample(4, 8, seed=0)
    inseq = RecordLookup(vocab_size=512, protocol="insequence", seq_len=300).sample(4, 8, seed=0)
    rel = lambda b: b.record_pos - b.key_pos[:, None]  # noqa: E731
    assert rel(prefix).unique(dim=0).shape[0] == 1  # records move in lockstep
    assert rel(inseq).unique(dim=0).shape[0] == len(inseq)  # gaps differ in every prompt


def test_calibration_split_never_shares_a_mapping():
    task = RecordLookup.variant("multitoken", vocab_size=400, n_records=40)
    L = task.rec_len

    def mappings(batch):
        return {tuple(rec) for row in range(len(batch)) for rec in record_tokens(batch, row, L).tolist()}

    ev = task.sample(16, 4, seed=0)
    cal = task.sample(16, 4, seed=0, split="calibration")
    assert not mappings(ev) & mappings(cal)
    assert not torch.equal(ev.tokens, cal.tokens)
    assert cal.meta["split"] == "calibration"


def test_sampling_is_deterministic_and_consistent_across_subsets():
    task = RecordLookup(vocab_size=256, n_records=16, n_demos=2, protocol="insequence")
    a, b = task.sample(6, 8, seed=5), task.sample(6, 8, seed=5)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.key_pos, b.key_pos)
    assert not torch.equal(a.tokens, task.sample(6, 8, seed=6).tokens)
    sub = task.sample(6, 8, seed=5, residues=[2, 5])
    assert torch.equal(sub.tokens, a.tokens[(a.residue == 2) | (a.residue == 5)])
    small = task.sample(3, 8, seed=5)  # example e has the same content whatever n_per_residue is
    for e in range(3):
        ra = (a.example_id == e).nonzero()[0, 0].item()
        rs = (small.example_id == e).nonzero()[0, 0].item()
        assert np.array_equal(record_tokens(a, ra, 2), record_tokens(small, rs, 2))


def test_minibatches_and_indexing():
    b = RecordLookup.variant("multiquery", vocab_size=256, n_records=16, n_demos=2).sample(3, 4)
    parts = list(b.minibatches(5))
    assert [len(p) for p in parts] == [5] * 9 + [3]
    assert torch.equal(torch.cat([p.tokens for p in parts]), b.tokens)
    assert torch.equal(torch.cat([p.query_pos for p in parts]), b.query_pos)
    one = list(b)[7]
    assert len(list(b)) == len(b) and torch.equal(one.tokens, b.tokens[7:8]) and b[-1].key_pos.item() == b.key_pos[-1]
    with pytest.raises(IndexError, match="row 48 out of range"):
        b[48]
    sel = b[b.residue == 1]
    assert len(sel) == 12 and (sel.residue == 1).all() and sel.modulus == 4
    with pytest.raises(ValueError, match=r"minibatch size=0 out of range \[1, inf\)"):
        next(b.minibatches(0))


def test_validate_catches_a_broken_batch():
    b = RecordLookup(vocab_size=256, n_records=8, n_demos=1).sample(2, 4)
    bad = PhaseBatch(**{**b.__dict__, "residue": (b.residue + 1) % 4})
    with pytest.raises(ValueError, match="residue == key_pos % modulus"):
        bad.validate()
    with pytest.raises((ValueError, TypeError), match="key_pos"):  # TypeError: jaxtyping import hook
        PhaseBatch(**{**b.__dict__, "key_pos": b.key_pos[:-1]})


def test_default_modulus():
    assert default_modulus((4,)) == 4
    assert default_modulus((4, 6, 8, 12)) == 24
    with pytest.raises(ValueError, match="full attention"):
        default_modulus(())


@pytest.mark.parametrize("kwargs,call,match", [
    (dict(n_records=64, seq_len=100), dict(n_per_residue=2, modulus=8), r"seq_len=100 is too short .* need seq_len >= \d+"),
    (dict(), dict(n_per_residue=2, modulus=8, residues=[9]), r"residue 9 out of range \[0, 8\)"),
    (dict(), dict(n_per_residue=2, modulus=8, residues=[-1]), r"residue -1 out of range \[0, 8\)"),
    (dict(protocol="zigzag"), None, r"unknown protocol 'zigzag'; choose one of: prefix, insequence"),
    (dict(n_distractors=2), None, r"n_distractors=2 needs key_len >= 2"),
    (dict(n_records=4, n_demos=8), None, r"n_demos=8 out of range: at most 3"),
    (dict(target_index=64), None, r"target_index=64 out of range \[0, 64\)"),
    (dict(n_records=0), None, r"n_records=0 out of range: must be an integer >= 1"),
    (dict(), dict(n_per_residue=0, modulus=8), r"n_per_residue=0 out of range"),
    (dict(), dict(n_per_residue=2, modulus=0), r"modulus=0 out of range"),
    (dict(), dict(n_per_residue=2, modulus=4, split="test"), r"unknown split 'test'"),
])
def test_bad_parameters_raise(kwargs, call, match):
    with pytest.raises(ValueError, match=match):
        task = RecordLookup(vocab_size=512, **kwargs)
        task.sample(**call)


def test_pool_errors():
    with pytest.raises(ValueError, match="value pool has 4 tokens; n_records=64 needs at least 128"):
        RecordLookup(pools=TokenPools(keys=np.arange(1, 100), values=np.arange(100, 104), filler=np.arange(104, 110)))
    with pytest.raises(ValueError, match="share ids"):
        TokenPools(keys=np.arange(1, 10), values=np.arange(9, 20), filler=np.arange(20, 22))
    with pytest.raises(ValueError, match="outside vocab_size=50"):
        RecordLookup(vocab_size=50, pools=TokenPools.synthetic(512))
    with pytest.raises(ValueError, match="give vocab_size"):
        RecordLookup()
    with pytest.raises(ValueError, match="unknown task variant 'foo'"):
        RecordLookup.variant("foo", vocab_size=512)
