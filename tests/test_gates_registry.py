"""A new gate kind is one `register_gate` call: a test-only kind (softmax at temperature 2) runs
through the config, the model, its hooks, the backends and a gate intervention untouched."""

import dataclasses
import warnings

import pytest
import torch

from phaseinterp import CompressionConfig, HookedCompressedTransformer, preset
from phaseinterp.backends import Unit, backend_for
from phaseinterp.gates import GATE_KINDS, GateKind, gate_kind, register_gate
from phaseinterp.interventions import gate_override
from phaseinterp.tasks import RecordLookup


@pytest.fixture
def tempered():
    kind = register_gate(GateKind("tempered", normalize=lambda logits, dim: (logits / 2).softmax(dim=dim)))
    yield kind
    del GATE_KINDS["tempered"]


def model_with(gate: str) -> HookedCompressedTransformer:
    cfg = preset("tiny-w4s4")
    layers = tuple(s if s == "full" else dataclasses.replace(s, gate=gate) for s in cfg.layers)
    return HookedCompressedTransformer(cfg.replace(layers=layers), seed=0).eval()


def test_a_registered_kind_runs_through_model_hooks_backend_and_interventions(tempered):
    model = model_with("tempered")
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    logits = cache["blocks.1.attn.compress_k.hook_gate_logits"]
    assert logits.shape[-1] == model.cfg.n_kv_heads  # a scalar-shaped kind: one logit per KV head
    assert torch.allclose(cache["blocks.1.attn.compress_k.hook_gate"], (logits / 2).softmax(dim=2), atol=1e-6)
    # the same weights differ from the scalar kind's softmax: the kind, not the name, decided
    assert not torch.allclose(cache["blocks.1.attn.compress_k.hook_gate"], logits.softmax(dim=2), atol=1e-3)
    backend = backend_for(model)
    gates = backend.gate_weights(tokens, Unit("gate", 1, 0))
    assert gates.shape[-2:] == (model.cfg.n_kv_heads, 1)
    batch = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=8, n_demos=2).sample(1, 4, seed=0)
    clean = model(batch.tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an override that changed nothing would warn
        with gate_override(model, "uniform", layers=[1]):
            edited = model(batch.tokens)
    assert not torch.allclose(clean, edited)


def test_kinds_answer_for_themselves_and_bad_names_are_refused(tempered):
    assert gate_kind("vector").logit_width(2, 16) == 32 and gate_kind("scalar").logit_width(2, 16) == 2
    assert gate_kind("uniform").logit_width(2, 16) is None and gate_kind("tempered").shape(2, 16) == (2,)
    assert not hasattr(model_with("uniform").blocks[1].attn.compress_k, "W_Z")
    with pytest.raises(ValueError, match=r"gate='sigmoid' is invalid: allowed one of \['scalar', 'vector', 'uniform', 'tempered'\]"):
        CompressionConfig(window=4, stride=4, gate="sigmoid")
    with pytest.raises(ValueError, match="gate kind 'scalar' is already registered"):
        register_gate(GateKind("scalar"))
