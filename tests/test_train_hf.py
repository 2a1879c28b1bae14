"""The trainer on a HuggingFace causal LM (a tiny random DeepseekV4ForCausalLM, HF modeling code):
loss goes down, checkpoints round-trip exactly, resume is exact, bad inputs raise clear errors."""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch

import phaseinterp
from phaseinterp.checkpoint import load_hf, read_metadata
from phaseinterp.cli import main
from phaseinterp.train import Mixture, TrainConfig, make_batch, recipe, train
from phaseinterp.families import family_of_config
from phaseinterp.families.deepseek_v4 import tiny_deepseek_v4_spec
from phaseinterp.families.hf_causal_lm import HF_FORMAT, HFCausalLM, HFModelSpec
from phaseinterp.train.mitigation import Mitigation

pytest.importorskip("transformers")

MIX = Mixture(vocab_size=64, seq_len=40, min_records=2, max_records=5, min_demos=0, max_demos=2, lm_fraction=0.25,
              curriculum_steps=0)


def small_spec(**changes) -> HFModelSpec:
    spec = tiny_deepseek_v4_spec(64, hidden_size=32, head_dim=32, n_ctx=64)
    return spec.replace(**changes) if changes else spec


def small_tcfg(steps: int = 6, **kw) -> TrainConfig:
    base = dict(steps=steps, batch_size=8, lr=1e-2, warmup_steps=2, mixture=MIX, checkpoint_every=4, log_every=1,
                device="cpu", keep_states=2)
    base.update(kw)
    return TrainConfig(**base)


def losses(metrics: list[dict]) -> list[tuple[int, float, float]]:
    return [(m["step"], m["loss"], m["acc"]) for m in metrics]


def test_spec_round_trips_and_describes_the_deepseek_v4_schedule():
    spec, tcfg = recipe("hf-deepseek-v4")
    assert isinstance(spec, HFModelSpec) and spec.architecture == "DeepseekV4ForCausalLM"
    assert (spec.vocab_size, spec.n_ctx, spec.strides, spec.residue_modulus) == (256, 128, (4, 8), 8)
    assert spec.describe() == "HF DeepseekV4ForCausalLM: HCA m=8, CSA m=4, sliding window 16"
    assert spec.hf_config["index_topk"] * 4 >= spec.n_ctx  # the indexer keeps every entry: deterministic
    assert HFModelSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert "transformers_version" not in spec.hf_config
    assert family_of_config(spec.hf_config_object())[1] == spec  # a transformers config converts to the same spec
    assert tcfg.mixture.seq_len == 64 and tcfg.steps == 4000  # the long schedule (docs/training.md)


def test_at_64_tokens_far_tokens_reach_the_last_position_only_through_the_compressors():
    spec, _ = recipe("hf-deepseek-v4")
    model = spec.build(seed=0).eval()
    tokens = torch.randint(1, 256, (1, 64), generator=torch.Generator().manual_seed(0))
    moved = tokens.clone()
    moved[0, 5] = 7 if tokens[0, 5] != 7 else 8
    bare = copy.deepcopy(model)
    for layer in bare.hf.model.layers:
        layer.self_attn.compressor = None  # sliding window only
    with torch.no_grad():
        change = (model(tokens)[0, -1] - model(moved)[0, -1]).abs().max()
        bare_change = (bare(tokens)[0, -1] - bare(moved)[0, -1]).abs().max()
    assert change > 1e-4 and bare_change == 0


def test_a_few_steps_lower_the_loss_and_the_checkpoint_round_trips_exactly(tmp_path):
    spec = small_spec()
    result = train(spec, small_tcfg(steps=16, checkpoint_every=16, log_every=4), tmp_path / "run", progress=False)
    first, last = result.metrics[0]["loss"], result.metrics[-1]["loss"]
    assert last < 0.9 * first, (first, last)
    assert isinstance(result.model, HFCausalLM) and not result.model.training
    meta = read_metadata(result.checkpoint)
    assert meta["format"] == HF_FORMAT and meta["config"] == spec.to_dict() and meta["extra"]["step"] == 16
    tokens = make_batch(MIX, 0, 0, 2).tokens
    loaded = phaseinterp.load(result.checkpoint)
    assert isinstance(loaded, HFCausalLM) and loaded.cfg == spec
    torch.testing.assert_close(loaded(tokens), result.model(tokens), atol=0, rtol=0)
    hf = load_hf(result.checkpoint)  # the HF model itself, HF state-dict keys
    assert type(hf).__name__ == "DeepseekV4ForCausalLM"
    torch.testing.assert_close(hf(input_ids=tokens, use_cache=False).logits, result.model(tokens), atol=0, rtol=0)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["model_config"]["architecture"] == "DeepseekV4ForCausalLM"


def test_resume_gives_the_weights_and_losses_of_an_uninterrupted_run(tmp_path):
    config = small_spec().hf_config_object()  # a plain transformers config works too
    whole = train(config, small_tcfg(), tmp_path / "whole", progress=False)
    part = train(config, small_tcfg(), tmp_path / "part", until=3, progress=False)
    rest = train(config, small_tcfg(), tmp_path / "part", resume="latest", progress=False)
    assert rest.step == 6 and losses(part.metrics) + losses(rest.metrics) == losses(whole.metrics)
    for (name, a), b in zip(whole.model.state_dict().items(), rest.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_bad_inputs_raise_clear_errors(tmp_path):
    spec, tcfg = small_spec(), small_tcfg(steps=2, checkpoint_every=2)
    with pytest.raises(ValueError, match=r"model_cfg=dict is invalid: allowed the config of a trainable family \['hf-causal-lm', 'hooked', 'nsa'\]"):
        train({"hidden_size": 32}, tcfg, tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match=r"mixture.vocab_size=64 is invalid: allowed <= the model's vocab_size \(32\)"):
        train(spec.replace(vocab_size=32), tcfg, tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match=r"mixture.seq_len=40 is invalid: allowed <= the model's n_ctx \(32\)"):
        train(spec.replace(max_position_embeddings=32), tcfg, tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match=r"invalid for a model of family 'hf-causal-lm' \(HFCausalLM\)"):
        train(spec, tcfg.replace(mitigation=Mitigation(entropy_weight=0.1)), tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match=r"architecture='DeepseekV4ForCausalLMX' is invalid"):
        HFModelSpec("DeepseekV4ForCausalLMX", spec.hf_config)
    with pytest.raises(ValueError, match=r"architecture='Qwen3ForCausalLM' is invalid for hf_config model_type='deepseek_v4'"):
        HFModelSpec("Qwen3ForCausalLM", spec.hf_config)
    result = train(spec, tcfg, tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=r"model config field 'hf_config.hidden_size' is 32 in the checkpoint but 64"):
        train(spec.replace(hidden_size=64), tcfg, tmp_path / "run", resume=result.checkpoint, progress=False)
    from tests.helpers import tiny_cfg

    ours = tiny_cfg(["full"], vocab_size=64, d_model=32, d_mlp=48)
    with pytest.raises(ValueError, match=re.escape("holds a 'hf-causal-lm' model (HFModelSpec DeepseekV4ForCausalLM) but this "
                                                   "run trains a 'hooked' model (ModelConfig)")):
        train(ours, tcfg, tmp_path / "run", resume=result.checkpoint, progress=False)
    plain = tmp_path / "ours.safetensors"
    phaseinterp.HookedCompressedTransformer(ours).save(plain)
    with pytest.raises(ValueError, match="holds a 'hooked' model, not a HuggingFace model"):
        load_hf(plain)
    weights = result.checkpoint.read_bytes()
    result.checkpoint.write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        phaseinterp.load(result.checkpoint)


def test_cli_trains_an_hf_config_file_writes_a_card_and_ships(tmp_path):
    spec = small_spec()
    path = tmp_path / "hf.json"
    path.write_text(json.dumps({"model": spec.to_dict(), "train": small_tcfg(steps=2).to_dict()}))
    argv = ["train", "--config", str(path), "--out", str(tmp_path / "run"), "--no-progress", "--eval-examples", "2",
            "--ship", str(tmp_path / "assets")]
    assert main(argv) == 0
    card = json.loads((tmp_path / "assets" / "hf.json").read_text())
    assert card["model_config"] == spec.to_dict() and card["steps"] == 2 and len(card["phase_curve"]["accuracy"]) == 8
    assert isinstance(phaseinterp.load(tmp_path / "assets" / "hf.safetensors"), HFCausalLM)
    hf_config = tmp_path / "config.json"
    spec.hf_config_object().to_json_file(hf_config)
    argv = ["train", "--hf-config", str(hf_config), "--steps", "1", "--batch-size", "2", "--out", str(tmp_path / "run2"),
            "--no-progress", "--eval-examples", "0"]
    assert main(argv) == 0
    assert read_metadata(tmp_path / "run2" / "checkpoints" / "step_000001.safetensors")["config"] == spec.to_dict()
