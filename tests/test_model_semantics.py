"""Compressed attention semantics: causality, visibility, windows, padding shifts, limits."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseinterp import CompressionConfig, HookedCompressedTransformer
from phaseinterp.model.compressor import window_positions
from tests.helpers import COMPRESSED_VARIANTS, noisy_model, tiny_cfg


@st.composite
def compression_configs(draw):
    layout = draw(st.sampled_from(["generic", "generic", "deepseek-csa", "hca"]))
    stride = draw(st.integers(1, 5))
    window = {"deepseek-csa": 2 * stride, "hca": stride}.get(layout) or draw(st.integers(stride, 7))
    csa = layout == "deepseek-csa"
    return CompressionConfig(
        window=window,
        stride=stride,
        gate="vector" if csa else draw(st.sampled_from(["scalar", "vector", "uniform"])),
        offset_bias=draw(st.booleans()),
        payload=draw(st.sampled_from(["per_offset", "shared"])),
        kv="tied" if csa else draw(st.sampled_from(["separate", "tied"])),
        entry_norm=draw(st.booleans()),
        rope=draw(st.sampled_from(["full", "none"])),
        rope_style=draw(st.sampled_from(["neox", "interleaved"])),
        local_window=draw(st.one_of(st.integers(0, 6), st.just("tail"))),
        sink=draw(st.booleans()),
        layout=layout,
    )


@settings(max_examples=30, deadline=None)
@given(cc=compression_configs(), seq_len=st.integers(6, 30), data=st.data())
def test_changing_later_tokens_never_changes_earlier_logits(cc, seq_len, data):
    cut = data.draw(st.integers(0, seq_len - 2))
    explicit = data.draw(st.booleans())
    model = noisy_model(tiny_cfg(["full", cc], n_kv_heads=data.draw(st.sampled_from([1, 2, 4]))), seed=seq_len)
    model.set_explicit_attention(explicit)
    gen = torch.Generator().manual_seed(cut)
    a = torch.randint(0, 97, (2, seq_len), generator=gen)
    b = a.clone()
    b[:, cut + 1 :] = torch.randint(0, 97, (2, seq_len - cut - 1), generator=gen)
    with torch.no_grad():
        la, lb = model(a), model(b)
    torch.testing.assert_close(la[:, : cut + 1], lb[:, : cut + 1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(la[:, cut + 1 :], lb[:, cut + 1 :])


@pytest.mark.parametrize("name", sorted(COMPRESSED_VARIANTS))
def test_entry_j_reaches_query_t_iff_window_closed(name):
    cc = COMPRESSED_VARIANTS[name]
    model = noisy_model(tiny_cfg([cc]))
    model.set_explicit_attention(True)
    seq_len = 26
    tokens = torch.randint(0, 97, (1, seq_len), generator=torch.Generator().manual_seed(1))
    saved = {}

    def keep(x, hook):
        x.retain_grad()
        saved[hook.name] = x
        return x

    # values carry the signal even where a single visible key gets softmax weight exactly 1
    branches = ["compress_kv"] if cc.kv == "tied" else ["compress_k", "compress_v"]
    watched = [f"blocks.0.attn.{b}.hook_out" for b in branches]
    ends = window_positions(cc, seq_len)[:, -1]
    for t in range(seq_len):
        saved.clear()
        with model.hooks(fwd_hooks=[(name, keep) for name in watched + ["blocks.0.attn.hook_z"]]):
            model(tokens)
        saved["blocks.0.attn.hook_z"][0, t].sum().backward()
        grad = sum(saved[name].grad[0].abs().sum(dim=(-1, -2)) for name in watched)
        assert torch.equal(grad > 0, ends <= t), f"t={t}"


@pytest.mark.parametrize("name", sorted(COMPRESSED_VARIANTS))
def test_entry_depends_exactly_on_its_window(name):
    cc = COMPRESSED_VARIANTS[name]
    model = noisy_model(tiny_cfg([cc]))
    seq_len = 21
    tokens = torch.randint(0, 97, (1, seq_len), generator=torch.Generator().manual_seed(2))
    store = {}

    def leaf(x, hook):
        x = x.detach().requires_grad_(True)
        store["embed"] = x
        return x

    def grab(x, hook):
        store["out"] = x

    branch = "compress_kv" if cc.kv == "tied" else "compress_k"
    with model.hooks(fwd_hooks=[("hook_embed", leaf), (f"blocks.0.attn.{branch}.hook_out", grab)]):
        model(tokens)
    out = store["out"]
    windows = window_positions(cc, seq_len)
    for j in range(out.shape[1]):
        (g,) = torch.autograd.grad(out[0, j].sum(), store["embed"], retain_graph=True)
        touched = g[0].abs().sum(-1) > 0
        expected = torch.zeros(seq_len, dtype=torch.bool)
        expected[windows[j][windows[j] >= 0]] = True
        assert torch.equal(touched, expected), f"entry {j}"


@pytest.mark.parametrize("name", sorted(COMPRESSED_VARIANTS))
def test_padding_by_one_stride_shifts_entries_without_changing_them(name):
    cc = COMPRESSED_VARIANTS[name]
    model = noisy_model(tiny_cfg([cc, cc]))
    tokens = torch.randint(1, 97, (2, 24), generator=torch.Generator().manual_seed(3))
    padded = torch.cat([torch.zeros(2, cc.stride, dtype=torch.long), tokens], dim=1)
    branch = "compress_kv" if cc.kv == "tied" else "compress_k"
    names = [f"blocks.0.attn.{branch}.{h}" for h in ("hook_out", "hook_gate")]
    _, c0 = model.run_with_cache(tokens, names_filter=names)
    _, c1 = model.run_with_cache(padded, names_filter=names)
    first = -(-cc.pad // cc.entry_stride)  # entries with masked slots before position 0 (csa, shifted grids)
    shift = cc.chunkings  # one stride holds k entries, and chunking j mod k is kept
    for name in names:
        a, b = c0[name], c1[name]
        assert b.shape[1] == a.shape[1] + shift
        torch.testing.assert_close(b[:, shift + first :], a[:, first:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(COMPRESSED_VARIANTS))
def test_fused_attention_equals_explicit_in_values_and_gradients(name):
    cc = COMPRESSED_VARIANTS[name]
    model = noisy_model(tiny_cfg([cc, cc]))
    tokens = torch.randint(0, 97, (3, 45), generator=torch.Generator().manual_seed(4))
    results = []
    for explicit in (False, True):
        model.zero_grad()
        model.set_explicit_attention(explicit)
        logits = model(tokens)
        logits.square().mean().backward()
        results.append((logits.detach(), model.blocks[0].attn.W_Q.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(results[0][1], results[1][1], atol=2e-5, rtol=1e-4)


def test_w1_s1_uniform_without_local_window_equals_full_attention():
    cc = CompressionConfig(window=1, stride=1, gate="uniform", entry_norm=False, local_window=0)
    full = noisy_model(tiny_cfg(["full", "full"], qk_norm=False))
    comp = HookedCompressedTransformer(tiny_cfg([cc, cc], qk_norm=False))
    comp.load_state_dict(full.state_dict(), strict=False)
    with torch.no_grad():
        for block in comp.blocks:
            a = block.attn
            a.compress_k.W_C.copy_(a.W_K.permute(1, 0, 2).reshape(1, 32, -1))
            a.compress_v.W_C.copy_(a.W_V.permute(1, 0, 2).reshape(1, 32, -1))
    tokens = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(comp(tokens), full(tokens), atol=1e-5, rtol=1e-5)


def test_pattern_is_a_distribution_over_visible_keys_only():
    cc = COMPRESSED_VARIANTS["w8s4-vector-tied"]
    model = noisy_model(tiny_cfg([cc]))
    _, cache = model.run_with_cache(torch.randint(0, 97, (2, 33)))
    pattern = cache["blocks.0.attn.hook_pattern"]
    scores = cache["blocks.0.attn.hook_attn_scores"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))
    assert torch.all(pattern[torch.isinf(scores)] == 0)
    n = window_positions(cc, 33).shape[0]
    assert pattern.shape[-1] == n + cc.local_window
    # query 10 sees entries ending at 7 only (entry 0), and positions 6..10 locally
    assert torch.isfinite(scores[0, 0, 10, :n]).tolist() == [True] + [False] * (n - 1)
    assert torch.isfinite(scores[0, 0, 10, n:]).all()


def test_sink_only_lowers_attention_mass():
    cc = COMPRESSED_VARIANTS["csa-sink-partial"]
    model = noisy_model(tiny_cfg([cc]))
    with torch.no_grad():
        model.blocks[0].attn.sink.fill_(3.0)
    _, cache = model.run_with_cache(torch.randint(0, 97, (1, 20)))
    mass = cache["blocks.0.attn.hook_pattern"].sum(-1)
    assert torch.all(mass < 0.99) and torch.all(mass > 0)


def test_bad_tokens_and_lengths_raise_clear_errors(unchecked):
    model = noisy_model(tiny_cfg(["full"], n_ctx=16))
    with pytest.raises(ValueError, match=r"token id 97 out of range: allowed 0..96"):
        model(torch.tensor([[1, 97]]))
    with pytest.raises(ValueError, match="exceeds n_ctx = 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, pos\]"):
        model(torch.zeros(17, dtype=torch.long))


@pytest.mark.parametrize("name", sorted(COMPRESSED_VARIANTS))
@pytest.mark.parametrize("block", [7, 16, 5, 64])
@pytest.mark.parametrize("grad", [False, True])
def test_fused_blocks_match_explicit(name, block, grad):
    from phaseinterp.model import joint_attention as joint

    cc = COMPRESSED_VARIANTS[name]
    if cc.local_length() == 0:
        pytest.skip("the fused path needs a local window (L = 0 runs explicitly)")
    gen = torch.Generator().manual_seed(block)
    batch, T, H, K, d = 2, 41, 4, 2, 8
    n = cc.n_entries(T)
    q, k, v = (torch.randn(batch, T, c, d, generator=gen) for c in (H, K, K))
    ek, ev = (torch.randn(batch, n, K, d, generator=gen) for _ in range(2))
    sink = torch.randn(H, generator=gen) if cc.sink else None
    for x in (q, k, v, ek, ev):
        x.requires_grad_(grad)
    pattern = joint.softmax_with_sink(joint.explicit_scores(cc, q, k, ek, 0.3), sink)
    expected = joint.explicit_mix(cc, pattern, v, ev)
    got = joint.fused_joint_attention(cc, q, k, v, ek, ev, 0.3, sink, block=block)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    if grad:  # the backward through the concatenated block keys equals the explicit path's
        weights = torch.randn(got.shape, generator=gen)
        grads = torch.autograd.grad((got * weights).sum(), (q, k, v, ek, ev))
        ref = torch.autograd.grad((expected * weights).sum(), (q, k, v, ek, ev))
        for g, r in zip(grads, ref):
            torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(COMPRESSED_VARIANTS))
@pytest.mark.parametrize("T,chunk", [(41, None), (41, 6), (3, 4), (70, 64)])
def test_phase_path_matches_explicit(name, T, chunk):
    """Entries by phase through causal flash attention + the local window, merged by log-sum-exp."""
    from phaseinterp.model import joint_attention as joint
    from phaseinterp.model import phase_attention as phase

    cc = COMPRESSED_VARIANTS[name]
    gen = torch.Generator().manual_seed(T + (chunk or 0))
    batch, H, K, d = 2, 4, 2, 8
    n = cc.n_entries(T)
    q, k, v = (torch.randn(batch, T, c, d, generator=gen) for c in (H, K, K))
    ek, ev = (torch.randn(batch, n, K, d, generator=gen) for _ in range(2))
    sink = torch.randn(H, generator=gen) if cc.sink else None
    if not phase.usable(cc, q):
        assert cc.local_length() == 0 or max(phase.phase_offsets(cc)) > 1
        pytest.skip("the phase path needs a local window and no phase ahead of its row")
    expected = joint.explicit_mix(cc, joint.softmax_with_sink(joint.explicit_scores(cc, q, k, ek, 0.3), sink), v, ev)
    got = phase.phase_joint_attention(cc, q, k, v, ek, ev, 0.3, sink, chunk=chunk)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_phase_path_is_used_only_without_autograd():
    from phaseinterp.model import phase_attention as phase

    cc = next(c for c in COMPRESSED_VARIANTS.values() if c.local_length() > 0)
    x = torch.zeros(1, 4, 2, 8, requires_grad=True)
    assert not phase.usable(cc, x)
    with torch.no_grad():
        assert phase.usable(cc, x)
    assert phase.usable(cc, x.detach())


@pytest.mark.parametrize("local", [40, "tail"])
@pytest.mark.parametrize("chunk", [None, 24])
def test_phase_path_long_local_window_through_flash_matches_explicit(local, chunk):
    """Local windows longer than EXPLICIT_LOCAL_MAX go through flash attention over query chunks."""
    from phaseinterp.config import CompressionConfig
    from phaseinterp.model import joint_attention as joint
    from phaseinterp.model import phase_attention as phase

    cc = CompressionConfig(window=48, stride=40, local_window=local, sink=True)
    assert cc.local_length() > phase.EXPLICIT_LOCAL_MAX
    gen = torch.Generator().manual_seed(3)
    batch, T, H, K, d = 2, 150, 4, 2, 8
    q, k, v = (torch.randn(batch, T, c, d, generator=gen) for c in (H, K, K))
    ek, ev = (torch.randn(batch, cc.n_entries(T), K, d, generator=gen) for _ in range(2))
    sink = torch.randn(H, generator=gen)
    expected = joint.explicit_mix(cc, joint.softmax_with_sink(joint.explicit_scores(cc, q, k, ek, 0.3), sink), v, ev)
    got = phase.phase_joint_attention(cc, q, k, v, ek, ev, 0.3, sink, chunk=chunk)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_rolling_the_gate_index_in_place_reaches_the_forward():
    """Gate cycling rolls `gate_index` in place; per-offset maps read as a view must notice."""
    cc = CompressionConfig(window=4, stride=4, local_window=4)
    model = noisy_model(tiny_cfg([cc]))
    tokens = torch.randint(0, 97, (1, 24), generator=torch.Generator().manual_seed(0))
    comp = model.blocks[0].attn.compress_k
    with torch.no_grad():
        h = model.W_E[tokens]
        clean = comp(h)
        comp.gate_index.copy_(torch.roll(comp.gate_index.clone(), 1))
        rolled = comp(h)
        W_Z = comp.W_Z.clone()
        comp.gate_index.copy_(torch.arange(4))
        comp.W_Z.copy_(torch.roll(W_Z, 1, dims=0))
        expected = comp(h)
    assert not torch.allclose(rolled, clean)
    torch.testing.assert_close(rolled, expected)


@pytest.mark.parametrize("gate_maps", ["per_offset", "shared"])
@pytest.mark.parametrize("kv_heads", [1, 4])
def test_narrow_gate_logits_without_autograd_equal_the_einsum(kv_heads, gate_maps):
    """Without autograd, scalar-gate logits go through one matmul per window offset
    (`compressor._through_maps`); with it, through the einsum. Both give the same entries."""
    from phaseinterp.model import compressor

    cc = CompressionConfig(window=6, stride=4, gate="scalar", gate_maps=gate_maps, local_window=4)
    cfg = tiny_cfg([cc], n_kv_heads=kv_heads)
    comp = noisy_model(cfg).blocks[0].attn.compress_k
    assert comp.W_Z.shape[-1] == kv_heads <= compressor.NARROW_LOGITS
    h = torch.randn(3, 29, cfg.d_model, generator=torch.Generator().manual_seed(1))
    with_grad = comp(h)
    assert with_grad.requires_grad
    with torch.no_grad():
        logits = []
        handle = comp.hook_gate_logits.register_forward_hook(lambda m, i, o: logits.append(o))
        without = comp(h)
        handle.remove()
    torch.testing.assert_close(without, with_grad.detach(), atol=1e-5, rtol=1e-5)
    windows = h[:, window_positions(cc, 29).clamp(min=0)]
    expected = torch.einsum("bnwd,wde->bnwe", windows, comp.W_Z[comp.gate_index]) + comp.b_Z
    torch.testing.assert_close(logits[0], expected.detach(), atol=1e-5, rtol=1e-5)
