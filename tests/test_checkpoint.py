import json
import os

import pytest
import torch
from safetensors.torch import save_file

import phaseinterp
from phaseinterp.checkpoint import read_metadata, save_model
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg


def test_save_load_round_trip_restores_config_and_logits(tmp_path):
    model = noisy_model(tiny_cfg(["full", COMPRESSED_VARIANTS["csa-sink-partial"]]))
    path = tmp_path / "m.safetensors"
    model.save(path)
    loaded = phaseinterp.load(path)
    assert loaded.cfg == model.cfg
    tokens = torch.randint(0, 97, (2, 30))
    torch.testing.assert_close(loaded(tokens), model(tokens), atol=0, rtol=0)
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]  # no temp file left


def test_failed_write_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    first = noisy_model(tiny_cfg(["full"]), seed=1)
    first.save(path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("phaseinterp.checkpoint_io.save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        noisy_model(tiny_cfg(["full"]), seed=2).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_missing_truncated_foreign_and_mismatched_files_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        phaseinterp.load(tmp_path / "absent.safetensors")
    model = noisy_model(tiny_cfg(["full"]))
    good = tmp_path / "good.safetensors"
    save_model(model, good, extra={"seed": 3})
    assert read_metadata(good)["extra"] == {"seed": 3}
    truncated = tmp_path / "trunc.safetensors"
    truncated.write_bytes(good.read_bytes()[: os.path.getsize(good) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        phaseinterp.load(truncated)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(2)}, str(foreign))
    with pytest.raises(ValueError, match="is not a phaseinterp checkpoint"):
        phaseinterp.load(foreign)
    mismatched = tmp_path / "mismatch.safetensors"
    cfg = json.loads(json.dumps(model.cfg.to_dict()))
    cfg["d_mlp"] = 64
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(mismatched), metadata={"format": "phaseinterp-checkpoint-v1", "config": json.dumps(cfg)})
    with pytest.raises(ValueError, match=r"has shape \(32, 48\), config expects \(32, 64\)"):
        phaseinterp.load(mismatched)
