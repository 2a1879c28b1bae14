"""A new model family is one `register_family` call: a test-only family (a wrapper around our model
with its own config type and checkpoint format) is built, trained, saved, loaded, swept and knocked
out through the registry alone, then unregistered."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch

import phaseinterp
from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.backends import Backend, HookedBackend, backend_for
from phaseinterp.checkpoint_io import save_model
from phaseinterp.cli import main
from phaseinterp.config import ModelConfig
from phaseinterp.families import FAMILIES, ModelFamily, build_model, family_of_model
from phaseinterp.family import no_stride
from phaseinterp.interventions import knockout_map
from phaseinterp.measure import phase_sweep
from phaseinterp.sources import resolve_source
from phaseinterp.tasks import RecordLookup
from phaseinterp.train import Mixture, TrainConfig, train

FORMAT = "phaseinterp-test-wrapped-v1"


@dataclass(frozen=True)
class WrappedConfig:
    inner: ModelConfig

    vocab_size = property(lambda self: self.inner.vocab_size)
    n_ctx = property(lambda self: self.inner.n_ctx)
    strides = property(lambda self: self.inner.strides)
    residue_modulus = property(lambda self: self.inner.residue_modulus)

    def to_dict(self) -> dict:
        return {"wrapped": self.inner.to_dict()}


class Wrapped(torch.nn.Module):
    """Tokens -> logits through our model, held as `.inner`; checkpoints carry their own format."""

    def __init__(self, cfg: WrappedConfig, seed: int | None = 0):
        super().__init__()
        self.cfg, self.inner = cfg, HookedCompressedTransformer(cfg.inner, seed=seed)

    def forward(self, tokens):
        return self.inner(tokens)

    def save(self, path, extra=None):
        return save_model(self, path, extra=extra, fmt=FORMAT)


def _as_config(obj):
    if isinstance(obj, WrappedConfig):
        return obj
    if isinstance(obj, dict) and set(obj) == {"wrapped"}:
        return WrappedConfig(ModelConfig.from_dict(obj["wrapped"]))
    return None


class WrappedBackend(Backend):
    """Runs a `Wrapped` as the model it holds (behind HookedBackend); the family's capabilities are
    the defaults (no mitigations, compilation or DDP in the trainer)."""

    @classmethod
    def wrap(cls, model, stride=None):
        no_stride("a wrapped model", stride)
        return HookedBackend(model.inner)


FAMILY = ModelFamily(name="test-wrapped", backend=WrappedBackend, recognizes=lambda m: isinstance(m, Wrapped),
                     formats=(FORMAT,), as_config=_as_config, build=lambda cfg, seed: Wrapped(cfg, seed))


@pytest.fixture
def wrapped_family():
    with FAMILIES.registered(FAMILY) as family:
        yield family
    assert "test-wrapped" not in FAMILIES.entries


def test_a_registered_family_runs_end_to_end_through_the_registry(wrapped_family, tmp_path):
    cfg = WrappedConfig(preset("tiny-w4s4").replace(vocab_size=128))
    model = build_model(cfg, seed=0).eval()  # the family builds it from its config
    assert isinstance(model, Wrapped) and family_of_model(model) is wrapped_family and wrapped_family.trainable
    path = model.save(tmp_path / "wrapped.safetensors")
    meta = phaseinterp.checkpoint.read_metadata(path)
    assert meta["format"] == FORMAT and meta["config"] == json.loads(json.dumps(cfg.to_dict()))
    loaded = phaseinterp.load(path)  # the format picks the family, the family builds and fills the model
    assert isinstance(loaded, Wrapped) and loaded.cfg == cfg
    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(0))
    assert torch.equal(loaded(tokens), model(tokens))

    backend = backend_for(loaded)  # the family's backend
    assert isinstance(backend, HookedBackend) and backend.cfg.strides == (4,)
    with pytest.raises(ValueError, match="stride=4 is invalid for a wrapped model"):
        backend_for(loaded, stride=4)
    task = RecordLookup(vocab_size=128, n_records=4, n_demos=1)
    batch, calib = task.sample(2, 4, seed=0), task.sample(2, 4, seed=1)
    curve = phase_sweep(backend, batch, progress=False, n_boot=20, n_perm=20)
    assert curve.period == 4 and len(curve.accuracy) == 4
    ko = knockout_map(backend, batch, calib, n_boot=20)
    assert ko.shape == (2, 1, 4)  # our tiny W4/S4: 2 layers, 1 KV head, 4 residues

    # the verbs resolve the file through the same registry
    assert main(["sweep", str(path), "--task", "lookup", "--n-records", "4", "--n-demos", "1", "--n-per-residue", "2",
                 "--n-boot", "20", "--n-perm", "20", "--no-progress", "--out", str(tmp_path / "sweep")]) == 0
    assert resolve_source(path).family is wrapped_family

    # the trainer trains it: its config names a trainable family
    mix = Mixture(vocab_size=128, seq_len=32, max_records=4, min_demos=0, max_demos=2)
    result = train(cfg, TrainConfig(steps=2, batch_size=2, warmup_steps=1, mixture=mix, device="cpu"),
                   tmp_path / "run", progress=False)
    assert isinstance(result.model, Wrapped) and phaseinterp.checkpoint.read_metadata(result.checkpoint)["format"] == FORMAT


def test_an_unregistered_family_is_a_clear_error(tmp_path):
    with FAMILIES.registered(FAMILY):
        path = Wrapped(WrappedConfig(preset("tiny-w4s4")), seed=0).save(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match=r"format='phaseinterp-test-wrapped-v1' is invalid: allowed one of \["):
        phaseinterp.load(path)
    with pytest.raises(ValueError, match="model of type Wrapped is invalid: allowed a model of a registered family"):
        backend_for(Wrapped(WrappedConfig(preset("tiny-w4s4")), seed=0))
    with pytest.raises(ValueError, match="model family 'hooked' is already registered"):
        FAMILIES.register(ModelFamily(name="hooked"))
    with pytest.raises(ValueError, match="family='test-wrapped' is invalid: allowed one of"):
        FAMILIES.unregister("test-wrapped")
