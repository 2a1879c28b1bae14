"""The hook contract: docs/hooks.md and the model agree on every name and shape; TransformerLens
tooling (run_with_cache, hooks(), patching) works; typos get suggestions."""

import re
from pathlib import Path

import pytest
import torch
from transformer_lens import ActivationCache, patching

from phaseinterp import CompressionConfig
from phaseinterp.model import key_positions, window_positions
from tests.helpers import noisy_model, tiny_cfg

DOC = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
SEPARATE = CompressionConfig(window=6, stride=4, local_window=5)
TIED = CompressionConfig(window=4, stride=4, gate="vector", kv="tied", local_window="tail")


def documented_hooks() -> dict[str, str]:
    rows = re.findall(r"^\| `([^`]+)` \| `\[([^\]]+)\]` \|", DOC.read_text(), flags=re.M)
    return dict(rows)


def test_every_hook_is_documented_with_its_shape():
    model = noisy_model(tiny_cfg(["full", SEPARATE, TIED]))
    T = 20
    _, cache = model.run_with_cache(torch.randint(0, 97, (2, T)))
    assert isinstance(cache, ActivationCache)
    assert set(cache.keys()) == set(model.hook_dict)  # every hook fired
    doc = documented_hooks()
    seen = set()
    for name, act in cache.items():
        layer = re.match(r"blocks\.(\d+)\.", name)
        pattern = re.sub(r"^blocks\.\d+\.", "blocks.{l}.", name)
        assert pattern in doc, f"{name} is not in docs/hooks.md"
        seen.add(pattern)
        cc = model.cfg.compression(int(layer.group(1))) if layer else None
        n = cc.n_entries(T) if cc else 0
        dims = dict(batch=2, pos=T, head=4, kv_head=2, d_head=8, d_model=32, d_mlp=48, entry=n,
                    offset=cc.window if cc else 0, key=(n + cc.local_length()) if cc else T)
        dims["1"] = 1  # a kept axis of size one (the norms' hook_scale)
        expected = tuple(dims[s.strip()] for s in doc[pattern].split(","))
        assert tuple(act.shape) == expected, name
    assert seen == set(doc), f"documented but absent: {set(doc) - seen}"


def test_hook_name_typo_suggests_nearest_names():
    model = noisy_model(tiny_cfg([SEPARATE]))
    tokens = torch.randint(0, 97, (1, 12))
    with pytest.raises(KeyError, match=r"blocks\.0\.attn\.compress_k\.hook_gate"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.compres_k.hook_gate", lambda x, hook: x)])
    with pytest.raises(KeyError, match=r"did you mean .*blocks\.0\.attn\.hook_pattern"):
        model.run_with_cache(tokens, names_filter=["blocks.0.attn.hook_patern"])
    assert not any(hp.has_hooks() for hp in model.hook_dict.values())  # nothing left behind


def test_gate_override_through_hooks_changes_output_and_is_undone():
    model = noisy_model(tiny_cfg([SEPARATE]))
    tokens = torch.randint(0, 97, (2, 24))
    clean = model(tokens)

    def uniform(gate, hook):
        return torch.full_like(gate, 1.0 / gate.shape[2])

    patched = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.compress_k.hook_gate", uniform)])
    assert (patched - clean).abs().max() > 1e-3
    torch.testing.assert_close(model(tokens), clean)
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_gate"))
    gate = cache["blocks.0.attn.compress_k.hook_gate"]
    torch.testing.assert_close(gate.sum(dim=2), torch.ones(2, gate.shape[1], 2))


def test_transformer_lens_head_patching_runs_and_is_exact_at_the_extremes():
    model = noisy_model(tiny_cfg(["full", SEPARATE]))
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(0, 97, (2, 16), generator=gen)
    corrupt = torch.randint(0, 97, (2, 16), generator=gen)
    _, clean_cache = model.run_with_cache(clean)

    def metric(logits):
        return logits[:, -1, 5].mean()

    result = patching.get_act_patch_attn_head_out_all_pos(model, corrupt, clean_cache, metric)
    assert result.shape == (2, 4)
    # patching head h of the last layer with its clean z equals running the hook by hand
    def patch(z, hook):
        z[:, :, 1] = clean_cache[hook.name][:, :, 1]
        return z

    by_hand = metric(model.run_with_hooks(corrupt, fwd_hooks=[("blocks.1.attn.hook_z", patch)]))
    torch.testing.assert_close(result[1, 1], by_hand)
    assert result.abs().max() > 0


def test_key_positions_map_the_pattern_axis():
    cc = SEPARATE
    T = 20
    n = cc.n_entries(T)
    assert key_positions(cc, T, query=13, key=1) == window_positions(cc, T)[1].tolist() == [4, 5, 6, 7, 8, 9]
    assert key_positions(cc, T, query=13, key=2) == [8, 9, 10, 11, 12, 13]  # closes at 13
    assert key_positions(cc, T, query=12, key=2) == []  # not yet visible
    assert key_positions(cc, T, query=13, key=n) == [9]
    assert key_positions(cc, T, query=2, key=n) == []  # slot position -2 is before the sequence
    with pytest.raises(ValueError, match="key=99 is invalid"):
        key_positions(cc, T, 3, 99)


def test_a_hook_that_breaks_the_activation_contract_is_named_with_what_was_expected():
    model = noisy_model(tiny_cfg([SEPARATE]))
    tokens = torch.randint(0, 97, (2, 12))
    bad = {
        "smaller batch": (lambda x, hook: x[:1], r"returned shape \(1, 12, 32\) and dtype torch.float32: allowed None "
                                                  r"or a tensor of shape \(2, 12, 32\) and dtype torch.float32"),
        "wrong dtype": (lambda x, hook: x.double(), r"returned shape \(2, 12, 32\) and dtype torch.float64"),
        "not a tensor": (lambda x, hook: x.tolist(), r"returned a list: allowed None or a tensor of shape \(2, 12, 32\)"),
    }
    for fn, message in bad.values():
        with pytest.raises(ValueError, match=r"the hook on 'blocks.0.hook_resid_pre' " + message):
            model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_resid_pre", fn)])
    clean = model(tokens)
    same = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x.clone())])
    assert torch.equal(clean, same)  # a hook that keeps shape and dtype is untouched
    seen = []
    model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", lambda x, hook: seen.append(hook.name))])
    assert seen == ["blocks.0.attn.hook_z"]  # observers (returning None) see the hook point as before


def test_plain_nnsight_reads_the_pattern_and_edits_like_transformer_lens():
    import beartype  # noqa: F401  (before nnsight)
    import nnsight

    model = noisy_model(tiny_cfg(["full", SEPARATE, TIED]))
    tokens = torch.randint(0, 97, (2, 20), generator=torch.Generator().manual_seed(0))  # seeded: the 1e-5 tolerances hold for these tokens
    _, cache = model.run_with_cache(tokens)
    nn_model = nnsight.NNsight(model)
    with nn_model.trace(tokens):
        pattern = nn_model.blocks[2].attn.hook_pattern.output.save()
        z = nn_model.blocks[2].attn.hook_z.output.save()
    torch.testing.assert_close(pattern, cache["blocks.2.attn.hook_pattern"])
    torch.testing.assert_close(z, cache["blocks.2.attn.hook_z"], atol=1e-5, rtol=1e-5)
    with nn_model.trace(tokens):
        nn_model.blocks[1].attn.hook_z.output[:, -1, 0] = 0
        edited = nn_model.output.save()
    zero = lambda x, hook: torch.cat([x[:, :-1], torch.cat([torch.zeros_like(x[:, -1:, :1]), x[:, -1:, 1:]], 2)], 1)  # noqa: E731
    expected = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero)])
    torch.testing.assert_close(edited, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(model(tokens), model(tokens)) and not any(b.attn.explicit for b in model.blocks)
