import json
import os
from pathlib import Path

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


def _resave(src, dst, tensors=None, config=None):
    """Write `src`'s tensors and metadata to `dst` by hand, as an editor (or a mix-up) would."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(src), "pt") as f:
        meta = dict(f.metadata())
    if config is not None:
        meta["config"] = json.dumps(config)
    save_file(tensors if tensors is not None else load_file(str(src)), str(dst), metadata=meta)


def test_an_edited_config_or_swapped_weights_are_caught_by_the_digest(tmp_path):
    model = noisy_model(tiny_cfg([COMPRESSED_VARIANTS["csa-sink-partial"]]))
    model.save(tmp_path / "m.safetensors")
    cfg = read_metadata(tmp_path / "m.safetensors")["config"]
    assert len(read_metadata(tmp_path / "m.safetensors")["digest"]) == 64
    edited = {**cfg, "rope_theta": cfg["rope_theta"] * 2}  # same tensor shapes, another model
    _resave(tmp_path / "m.safetensors", tmp_path / "edited.safetensors", config=edited)
    with pytest.raises(ValueError, match=r"edited.safetensors': its config or weights changed after saving"):
        phaseinterp.load(tmp_path / "edited.safetensors")
    other = noisy_model(tiny_cfg([COMPRESSED_VARIANTS["csa-sink-partial"]]), seed=5)
    _resave(tmp_path / "m.safetensors", tmp_path / "swapped.safetensors",
            tensors={k: v.contiguous() for k, v in other.state_dict().items()})
    with pytest.raises(ValueError, match="digest mismatch"):
        phaseinterp.load(tmp_path / "swapped.safetensors")


def test_non_finite_weights_raise_unless_asked_for(tmp_path):
    model = noisy_model(tiny_cfg(["full"]))
    with torch.no_grad():
        model.W_E[3, 1] = float("nan")
    model.save(tmp_path / "nan.safetensors")
    with pytest.raises(ValueError, match=r"non-finite weights \(nan or inf\) in \['W_E'\]: allowed only with allow_nonfinite=True"):
        phaseinterp.load(tmp_path / "nan.safetensors")
    assert torch.isnan(phaseinterp.load(tmp_path / "nan.safetensors", allow_nonfinite=True).W_E[3, 1])


def test_the_next_save_removes_temp_files_an_interrupted_save_left(tmp_path):
    stale = tmp_path / ".m.safetensors.k3j2h1.tmp"
    stale.write_bytes(b"half a checkpoint")
    unrelated = tmp_path / ".other.safetensors.x.tmp"
    unrelated.write_bytes(b"not ours")
    noisy_model(tiny_cfg(["full"])).save(tmp_path / "m.safetensors")
    assert not stale.exists() and unrelated.exists()


def test_a_card_that_disagrees_with_its_weights_is_refused():
    from pathlib import Path

    from phaseinterp.train.result import sweep_checkpoint

    ckpt = Path(__file__).resolve().parents[1] / "assets" / "checkpoints" / "w4s4.safetensors"
    card = json.loads(ckpt.with_suffix(".json").read_text())
    card["model_config"] = {**card["model_config"], "n_kv_heads": 4}  # the card of another model
    with pytest.raises(ValueError, match="card 'w4s4' describes another model than .*w4s4.safetensors"):
        sweep_checkpoint(ckpt, card, n_per_residue=1, task_seed=0, protocol="prefix", n_boot=10, n_perm=10)


SHIPPED = sorted((Path(__file__).resolve().parents[1] / "assets").rglob("*.safetensors"))


def test_every_shipped_checkpoint_carries_a_digest_and_an_edit_of_it_is_caught(tmp_path):
    assert len(SHIPPED) >= 40
    assert [p.name for p in SHIPPED if "digest" not in read_metadata(p)] == []
    # the shipped W4/S4 with its stride edited (same tensor shapes): the example of a silent mix-up
    src = next(p for p in SHIPPED if p.name == "w4s4.safetensors")
    cfg = read_metadata(src)["config"]
    edited = json.loads(json.dumps(cfg).replace('"stride": 4', '"stride": 2'))
    assert edited != cfg
    _resave(src, tmp_path / "w4s4-edited.safetensors", config=edited)
    with pytest.raises(ValueError, match="digest mismatch"):
        phaseinterp.load(tmp_path / "w4s4-edited.safetensors")


def test_shipped_checkpoints_stay_within_the_150_mb_budget():
    """The repository's budget for checkpoints (the wheel carries only the core ones, tests/test_wheel.py):
    60 MB for the zoo's two seeds per member, 120 MB when seeds became the unit (at least 4 per headline member
    and the control's members, issue 32), 150 MB for the paper's variants and the rule's generalization sweep
    (22 runs of 1.3 MB at 2 seeds each)."""
    total = sum(p.stat().st_size for p in SHIPPED)
    assert total < 150e6, f"shipped checkpoints take {total / 1e6:.1f} MB, budget 150 MB: drop or shrink some"


def test_a_checkpoint_without_a_digest_loads_with_a_warning(tmp_path):
    noisy_model(tiny_cfg(["full"])).save(tmp_path / "m.safetensors")
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(tmp_path / "m.safetensors"), "pt") as f:
        meta = {k: v for k, v in f.metadata().items() if k != "digest"}
    save_file(load_file(str(tmp_path / "m.safetensors")), str(tmp_path / "old.safetensors"), metadata=meta)
    with pytest.warns(UserWarning, match="old.safetensors' has no digest"):
        phaseinterp.load(tmp_path / "old.safetensors")
