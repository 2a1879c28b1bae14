"""Bad input at the public doors (configs, tasks, model inputs, hooks, checkpoints, interventions) raises
one of the library's documented exceptions (docs/errors.md), never a bare TypeError, IndexError,
KeyError or AttributeError from inside torch, numpy or safetensors, and never returns a result.

The doors are called as users call them: without the runtime type checker (`unchecked`)."""

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import phaseinterp
from phaseinterp import HookedCompressedTransformer, ModelConfig, preset
from phaseinterp.interventions import knockout_map
from phaseinterp.tasks import RecordLookup

DOCUMENTED = (ValueError, FileNotFoundError)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

junk = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=5), st.lists(st.integers(-3, 3), max_size=3))


def refused(fn) -> BaseException:
    with pytest.raises(DOCUMENTED) as info:
        fn()
    return info.value


MODEL = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
TASK = RecordLookup(vocab_size=512, n_records=8, n_demos=2)


@SETTINGS
@given(field=st.sampled_from(["vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_mlp", "n_ctx",
                               "rope_theta", "norm_eps", "init_std", "gate_bias_init_std", "qk_norm", "tie_embeddings"]),
       value=junk)
def test_model_config_fields(unchecked, field, value):
    good = preset("tiny-w4s4").to_dict()
    try:
        ModelConfig.from_dict({**good, field: value})
    except DOCUMENTED:
        return
    # accepted: then it must be a value of the right kind, not silently coerced garbage
    assert not isinstance(value, (str, list, type(None))) and not (isinstance(value, float) and not math.isfinite(value))


@SETTINGS
@given(field=st.sampled_from(["window", "stride", "gate", "kv", "rope", "local_window", "chunkings", "sink", "layout",
                               "bogus_field"]), value=junk)
def test_compression_config_fields_inside_a_model_config(unchecked, field, value):
    good = preset("tiny-w4s4").to_dict()
    layer = {**good["layers"][0], field: value}
    try:
        ModelConfig.from_dict({**good, "layers": [layer, good["layers"][1]]})
    except DOCUMENTED:
        return
    assert field != "bogus_field"


@SETTINGS
@given(data=st.one_of(
    st.builds(lambda s, d: torch.zeros(s, dtype=d), st.tuples(st.integers(0, 3), st.integers(0, 5)),
              st.sampled_from([torch.float32, torch.bool, torch.uint8, torch.float64])),
    st.builds(lambda s: torch.zeros(s, dtype=torch.long), st.lists(st.integers(0, 3), min_size=0, max_size=4)
              .filter(lambda s: len(s) != 2)),
    st.builds(lambda v: torch.full((1, 4), v, dtype=torch.long), st.sampled_from([-1, 512, 10**6])),
    st.builds(lambda n: torch.zeros(1, n, dtype=torch.long), st.sampled_from([0, 513, 2000])),
    st.lists(st.lists(st.integers(0, 10), max_size=3), max_size=2), st.builds(lambda: np.zeros((2, 4), dtype=np.int64)),
))
def test_model_inputs(unchecked, data):
    refused(lambda: MODEL(data))


@SETTINGS
@given(n=junk, modulus=junk, residues=st.one_of(st.none(), st.just([]), st.lists(st.integers(-5, 10), max_size=4)))
def test_task_sampling(unchecked, monkeypatch, n, modulus, residues):
    # a sample just under the library's 1e8-token limit is valid but takes minutes to build: the
    # test lowers the limit so that what it accepts stays small and what it refuses is still refused
    monkeypatch.setattr("phaseinterp.tasks.record_lookup.MAX_SAMPLE_TOKENS", 10**5)
    try:
        batch = TASK.sample(n, modulus, residues=residues)
    except DOCUMENTED:
        return
    assert len(batch) >= 1 and batch.modulus == modulus  # a sample that was accepted is a real sample


def test_a_huge_modulus_is_refused_before_the_design_is_built():
    # the matched design costs ~0.1 ms per residue: 10**6 residues would run for minutes
    with pytest.raises(ValueError, match=r"modulus=1000000 out of range: allowed 1\.\.10000"):
        TASK.sample(3, 10**6, residues=[0])
    with pytest.raises(ValueError, match="modulus=10001 out of range"):
        TASK.min_seq_len(10_001)


@SETTINGS
@given(payload=st.one_of(st.binary(max_size=64), st.builds(lambda h: json.dumps(h).encode(),
                                                          st.dictionaries(st.text(max_size=4), st.text(max_size=4)))))
def test_checkpoint_files(unchecked, tmp_path, payload):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(len(payload).to_bytes(8, "little") + payload)
    refused(lambda: phaseinterp.load(path))


def test_checkpoint_metadata_that_is_not_json_or_lacks_the_config(unchecked, tmp_path):
    from safetensors.torch import save_file

    tensors = {"x": torch.zeros(1)}
    save_file(tensors, str(tmp_path / "a.safetensors"), metadata={"format": "phaseinterp-checkpoint-v1", "config": "{not json"})
    assert "a.safetensors" in str(refused(lambda: phaseinterp.load(tmp_path / "a.safetensors")))
    save_file(tensors, str(tmp_path / "b.safetensors"), metadata={"format": "phaseinterp-checkpoint-v1"})
    assert "b.safetensors" in str(refused(lambda: phaseinterp.load(tmp_path / "b.safetensors")))
    refused(lambda: phaseinterp.load(tmp_path / "missing.safetensors"))


BATCH = TASK.sample(1, 4, seed=0)
CALIB = TASK.sample(1, 4, seed=0, split="calibration")


@SETTINGS
@given(kw=st.one_of(st.builds(lambda v: {"layers": v}, st.lists(st.integers(-3, 5), min_size=1, max_size=2)
                              .filter(lambda v: any(x < 0 or x > 1 for x in v))),
                    st.builds(lambda v: {"n_boot": v}, st.integers(-5, 0)),
                    st.builds(lambda v: {"max_rows": v}, st.integers(-5, 0)),
                    st.builds(lambda v: {"level": v}, st.text(max_size=4)),
                    st.builds(lambda v: {"change": v}, st.text(max_size=4)),
                    st.builds(lambda v: {"floor": v}, st.floats(1.01, 10) | st.floats(-10, -0.01)),
                    st.builds(lambda v: {"replacement": v}, st.text(max_size=4))))
def test_intervention_arguments(unchecked, kw):
    refused(lambda: knockout_map(MODEL, BATCH, CALIB, **{"n_boot": 10, **kw}))


TOKENS = BATCH.tokens[:1, :24]
HOOK_NAMES = sorted(n for n in MODEL.hook_dict if n.startswith(("blocks.0.", "blocks.1.", "hook_embed")))


BENT = {"batch": lambda a: a[:0], "pos": lambda a: a[:, :-1] if a.ndim > 1 and a.shape[1] > 1 else a.unsqueeze(0),
        "last": lambda a: torch.cat([a, a[..., :1]], dim=-1),
        "dtype": lambda a: a.to(torch.float64) if a.is_floating_point() else a.float()}


@SETTINGS
@given(name=st.sampled_from(HOOK_NAMES), output=st.one_of(
    st.sampled_from(sorted(BENT)).map(lambda k: BENT[k]),  # the activation bent out of shape, or cast
    junk.filter(lambda v: v is not None), st.builds(lambda: np.zeros(3))))
def test_hooks_that_return_the_wrong_thing(unchecked, name, output):
    hook = (lambda act, hook: output(act)) if callable(output) else (lambda act, hook: output)
    error = refused(lambda: MODEL.run_with_hooks(TOKENS, fwd_hooks=[(name, hook)]))
    assert name in str(error)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_a_hook_that_returns_none_only_reads(name):
    # observing scores or patterns moves attention to the explicit path, which agrees with the fast
    # one to float rounding (docs/performance.md), not bit for bit
    torch.testing.assert_close(MODEL.run_with_hooks(TOKENS, fwd_hooks=[(name, lambda act, hook: None)]), MODEL(TOKENS),
                               atol=1e-5, rtol=0)


@SETTINGS
@given(name=st.one_of(st.text(max_size=12), st.sampled_from(["blocks.9.hook_resid_pre", "blocks.0.attn.hook_nothing"])))
def test_hook_names_that_do_not_exist(unchecked, name):
    if name in MODEL.hook_dict:
        return
    # a hook point is looked up by name like a dict key: KeyError, with the library's message (docs/errors.md)
    with pytest.raises(KeyError, match="no hook point named"):
        MODEL.run_with_hooks(TOKENS, fwd_hooks=[(name, lambda act, hook: None)])


@SETTINGS
@given(fn=junk)
def test_hook_functions_that_are_not_callable(unchecked, fn):
    assert "blocks.0.hook_resid_pre" in str(refused(lambda: MODEL.run_with_hooks(TOKENS, fwd_hooks=[("blocks.0.hook_resid_pre", fn)])))


@SETTINGS
@given(field=st.sampled_from(["vocab_size", "seq_len", "n_records", "n_demos", "target_index"]), value=junk)
def test_task_fields_name_themselves(unchecked, monkeypatch, field, value):
    # a float where an integer belongs used to end in a bare TypeError from inside the task code; a valid
    # but huge seq_len is refused by the sampler under a lowered token limit (test_task_sampling's reason)
    monkeypatch.setattr("phaseinterp.tasks.record_lookup.MAX_SAMPLE_TOKENS", 10**5)
    try:
        task = RecordLookup(**{"vocab_size": 256, "n_records": 10, "n_demos": 2, "seq_len": 96, field: value})
    except DOCUMENTED as e:  # names the field given, or the one it contradicts (n_demos > n_records - 1)
        assert any(name in str(e) for name in ("vocab_size", "seq_len", "n_records", "n_demos", "target_index"))
        return
    try:
        batch = task.sample(1, 4, seed=0)
    except DOCUMENTED as e:  # e.g. a valid but huge seq_len: refused by the sampler, naming it
        assert f"{field}=" in str(e) or "tokens" in str(e)
        return
    assert batch.tokens.shape[0] >= 1  # accepted: it samples


@pytest.mark.parametrize("field, value", [("vocab_size", 256.0), ("seq_len", 64.0), ("n_records", 10.0),
                                          ("target_index", 1.0)])
def test_a_float_where_a_task_integer_belongs_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field}={value!r} out of range: must be an integer"):
        RecordLookup(**{"vocab_size": 256, "n_records": 10, "seq_len": 96, field: value})


def test_an_empty_batch_is_refused_before_the_sweep():
    from phaseinterp.measure import evaluate_correct, phase_sweep

    empty = BATCH[torch.zeros(len(BATCH), dtype=torch.bool)]
    for fn in (lambda: phase_sweep(MODEL, empty, progress=False), lambda: evaluate_correct(MODEL, empty, progress=False)):
        with pytest.raises(ValueError, match="^batch has 0 rows"):
            fn()


@pytest.mark.parametrize("layers, named", [("full", "layers='full'"), ({"window": 4}, "layers={'window': 4}"),
                                           (["full", "w4s4"], "layers[1]='w4s4'"), (["full", 3], "layers[1]=3")])
def test_a_config_list_given_as_another_container_names_the_field(layers, named):
    good = preset("tiny-w4s4").to_dict()
    with pytest.raises(ValueError) as info:
        ModelConfig.from_dict({**good, "layers": layers})
    assert str(info.value).startswith(named) and "unknown" not in str(info.value)


def test_a_mixture_with_too_small_a_vocabulary_names_vocab_size():
    from phaseinterp.train.data import Mixture

    with pytest.raises(ValueError, match=r"^vocab_size=20 is invalid: allowed >= 33, whose filler pool"):
        Mixture(vocab_size=20, seq_len=64, max_records=4, min_demos=1, max_demos=3)
    assert Mixture(vocab_size=33, seq_len=64, max_records=4, min_demos=1, max_demos=3).vocab_size == 33
    with pytest.raises(ValueError, match=r"^vocab_size=20 is invalid"):
        Mixture(vocab_size=20, seq_len=64, max_records=4, min_demos=1, max_demos=3, lm_branching=3)
    assert Mixture(vocab_size=20, seq_len=64, max_records=4, min_demos=1, max_demos=3, lm_branching=2).lm_branching == 2


def test_a_card_that_contradicts_its_weights_is_refused(tmp_path):
    from phaseinterp.sources import read_card, resolve_source

    src = resolve_source("w4s4")
    (tmp_path / "w4s4.safetensors").write_bytes(src.path.read_bytes())
    card = read_card(src.card_path)
    (tmp_path / "w4s4.json").write_text(json.dumps(card))
    assert resolve_source(tmp_path / "w4s4.safetensors").card["name"] == card["name"]
    wrong = {**card, "model_config": {**card["model_config"], "n_kv_heads": 4, "d_head": 32}}
    (tmp_path / "w4s4.json").write_text(json.dumps(wrong))
    with pytest.raises(ValueError, match=r"describes another model than .*: model_config differs from the checkpoint's "
                                         r"config in \['d_head', 'n_kv_heads'\]"):
        phaseinterp.load(tmp_path / "w4s4.safetensors")


def test_a_huge_synthetic_vocabulary_is_refused_before_it_is_built():
    # the pools hold every id: 10**12 ids used to exhaust memory (an OOM kill, not an error)
    with pytest.raises(ValueError, match=r"vocab_size=1000000000000 is invalid: allowed an integer in \[8, 16777216\]"):
        RecordLookup(vocab_size=10**12, n_records=8, n_demos=2)
