"""A new model family is one module: this test writes a toy family (a tiny random HuggingFace Llama
held inside its own wrapper class, with its own Backend that says where the head outputs live)
into a temporary module, imports it (which registers the family) and runs a phase sweep and a
knockout map through the library by the model alone: no file of the library is changed.

The toy's site reads the same activations as the built-in HF backend on the same weights, so the
two must agree to the last digit: a sweep of the same accuracy and a knockout map of the same
values. And the toy module's text must not leak: after the test the family is unregistered."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest
import torch

from phaseinterp.backends import HFCausalLMBackend, backend_for
from phaseinterp.families import FAMILIES, family_of_model
from phaseinterp.interventions import knockout_map
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup

TOY = '''
"""The toy family: a tiny random Llama held as `.lm`, run behind `ToyBackend`."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from phaseinterp.backends.base import Backend, input_head_site
from phaseinterp.backends.units import BackendConfig
from phaseinterp.family import ModelFamily, register_family


class ToyLM(torch.nn.Module):
    def __init__(self, seed: int = 0):
        super().__init__()
        config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.lm = LlamaForCausalLM(config)

    def forward(self, tokens):
        return self.lm(input_ids=tokens, use_cache=False).logits


class ToyBackend(Backend):
    """No compressor: `stride` is the period to test (default 4)."""

    @classmethod
    def wrap(cls, model, stride=None):
        return cls(model, stride=4 if stride is None else stride)

    def __init__(self, model, stride):
        c, n = model.lm.config, model.lm.config.num_hidden_layers
        super().__init__(model, BackendConfig(
            kind="toy", model_class=type(model).__name__, n_layers=n, n_heads=c.num_attention_heads,
            n_kv_heads=c.num_key_value_heads, d_head=c.hidden_size // c.num_attention_heads, d_model=c.hidden_size,
            vocab_size=c.vocab_size, layer_strides=(None,) * n, gate_windows=(None,) * n, gate_branches=((),) * n,
            user_stride=stride, n_ctx=c.max_position_embeddings))

    def _forward(self, tokens):
        return self.model(tokens)

    def _site(self, site, layer, branch):
        if site != "head":
            raise ValueError(f"the toy model has no {site!r} site: allowed 'head'")
        o_proj = self.nn.lm.model.layers[layer].self_attn.o_proj  # its own site: the input of o_proj
        return input_head_site(o_proj, self.cfg.n_heads, self.cfg.d_head)


FAMILY = register_family(ModelFamily(name="toy", backend=ToyBackend, recognizes=lambda m: isinstance(m, ToyLM)))
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    (tmp_path / "toy_family.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("toy_family")
    try:
        yield module
    finally:
        FAMILIES.unregister("toy")
        sys.modules.pop("toy_family", None)


def test_a_family_written_in_one_module_runs_a_sweep_and_a_knockout_map(toy):
    model = toy.ToyLM(seed=0).eval()
    assert family_of_model(model) is toy.FAMILY and type(backend_for(model)).__name__ == "ToyBackend"
    reference = HFCausalLMBackend(model.lm, stride=4)  # the built-in HF family on the same weights

    task = RecordLookup(vocab_size=128, n_records=4, n_demos=1)
    batch, calib = task.sample(4, 4, seed=0), task.sample(4, 4, seed=1)
    curve = phase_sweep(model, batch, progress=False, n_boot=50, n_perm=50)  # the model itself: its family decides
    expected = phase_sweep(reference, batch, progress=False, n_boot=50, n_perm=50)
    assert curve.period == 4 and curve.config["model"]["kind"] == "toy" and curve.config["model"]["model_class"] == "ToyLM"
    assert curve.accuracy.tolist() == expected.accuracy.tolist()

    ko = knockout_map(model, batch, calib, replacement="mean", method="hooks", n_boot=50, progress=False)
    ref = knockout_map(reference, batch, calib, replacement="mean", method="hooks", n_boot=50, progress=False)
    assert ko.values.shape == (2, 2, 4)  # 2 layers, 2 KV heads, 4 residues
    np.testing.assert_allclose(ko.values, ref.values, rtol=0, atol=1e-9, equal_nan=True)
    after = ko.extras[next(iter(ko.extras))]
    assert np.isfinite(after).all() and ((after >= 0) & (after <= 1)).all()  # accuracies after knockout
    with torch.no_grad():  # and a knockout does change the logits: the toy site is where the heads are
        from phaseinterp.backends import Replace
        from phaseinterp.units import Unit

        b = backend_for(model)
        with b.intervene(Replace(Unit("kv_head", 1, 0), value=0.0)):
            knocked = b(batch.tokens[:2])
        assert not torch.equal(knocked, b(batch.tokens[:2]))


def test_without_its_module_the_toy_model_is_a_clear_error(toy):
    model = toy.ToyLM(seed=0)
    FAMILIES.unregister("toy")
    try:
        with pytest.raises(ValueError, match="model of type ToyLM is invalid: allowed a model of a registered family"):
            backend_for(model)
    finally:
        FAMILIES.register(toy.FAMILY)  # the fixture unregisters it again
