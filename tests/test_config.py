import pytest

from phaseinterp import PRESETS, CompressionConfig, ModelConfig, preset

BAD_COMPRESSION = [
    (dict(window=0), "window"),
    (dict(window=4, stride=5), "stride"),
    (dict(stride=0), "stride"),
    (dict(gate="softmax"), "gate"),
    (dict(offset_bias="yes"), "offset_bias"),
    (dict(payload="per-token"), "payload"),
    (dict(gate_maps="none"), "gate_maps"),
    (dict(kv="shared"), "kv"),
    (dict(entry_norm=1), "entry_norm"),
    (dict(rope="half"), "rope"),
    (dict(rope="partial", rope_dims=3), "rope_dims"),
    (dict(rope="partial"), "rope_dims"),
    (dict(rope="full", rope_dims=4), "rope_dims"),
    (dict(rope_style="gptj"), "rope_style"),
    (dict(rope_theta=-1.0), "rope_theta"),
    (dict(local_window=-1), "local_window"),
    (dict(local_window="head"), "local_window"),
    (dict(sink="no"), "sink"),
    (dict(layout="csa"), "layout"),
    (dict(window=8, stride=3, layout="deepseek-csa", kv="tied", gate="vector"), "window"),
    (dict(window=8, stride=4, layout="deepseek-csa"), "layout"),
    (dict(window=8, stride=4, layout="hca"), "window"),
]


@pytest.mark.parametrize("kwargs,field", BAD_COMPRESSION)
def test_compression_config_rejects_each_invalid_field(kwargs, field):
    with pytest.raises(ValueError) as err:
        CompressionConfig(**kwargs)
    msg = str(err.value)
    assert msg.startswith(f"{field}=") and "allowed" in msg


BAD_MODEL = [
    (dict(vocab_size=0), "vocab_size"),
    (dict(d_model=-3), "d_model"),
    (dict(n_layers=0), "n_layers"),
    (dict(n_heads=4, n_kv_heads=3), "n_kv_heads"),
    (dict(d_head=7), "d_head"),
    (dict(d_mlp=0), "d_mlp"),
    (dict(rope_theta=0.0), "rope_theta"),
    (dict(qk_norm="yes"), "qk_norm"),
    (dict(norm_eps=float("nan")), "norm_eps"),
    (dict(n_ctx=0), "n_ctx"),
    (dict(tie_embeddings=None), "tie_embeddings"),
    (dict(n_layers=2, layers=("full",)), "layers"),
    (dict(n_layers=1, layers=("sparse",)), "layers[0]"),
    (dict(n_layers=1, d_head=8, layers=(CompressionConfig(rope="partial", rope_dims=8),)), "layers[0].rope_dims"),
    (dict(init_std=0), "init_std"),
]


@pytest.mark.parametrize("kwargs,field", BAD_MODEL)
def test_model_config_rejects_each_invalid_field(kwargs, field):
    with pytest.raises(ValueError) as err:
        ModelConfig(**kwargs)
    assert str(err.value).startswith(f"{field}=") and "allowed" in str(err.value)


def test_error_names_the_value_and_range():
    with pytest.raises(ValueError, match=r"stride=9 is invalid: allowed an integer >= 1 and <= 8"):
        CompressionConfig(window=8, stride=9)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_dict(name):
    cfg = preset(name)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_preset_geometry_and_unknown_name():
    big = preset("qwen3-0.6b-w8s8")
    assert (big.n_layers, big.d_model, big.n_heads, big.d_head, big.n_kv_heads) == (28, 1024, 16, 128, 1)
    assert big.strides == (8,) and preset("qwen3-0.6b-full").strides == ()
    assert preset("tiny-deepseek-kernel").layers[0].window == 8 and preset("tiny-deepseek-kernel").strides == (4,)
    with pytest.raises(ValueError, match="unknown preset 'nope'"):
        preset("nope")


def test_entry_counts_and_residue_modulus():
    cc = CompressionConfig(window=8, stride=4)
    assert [cc.n_entries(t) for t in (7, 8, 11, 12, 20)] == [0, 1, 1, 2, 4]
    csa = CompressionConfig(window=8, stride=4, layout="deepseek-csa", kv="tied", gate="vector")
    assert [csa.n_entries(t) for t in (3, 4, 9)] == [0, 1, 2]
    mixed = ModelConfig(n_layers=3, layers=("full", CompressionConfig(window=6, stride=6), cc))
    assert mixed.strides == (4, 6) and mixed.residue_modulus == 12
