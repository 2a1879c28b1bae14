"""Selection presses (`backends.presses`): chunk selection (ChunkKV-like) and token selection
(SnapKV-like) against a plain per-query reference, the original attention, causality and edits."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb

from phaseinterp.backends import SelectionPress, press_attention, restore_presses
from phaseinterp.backends.presses import pressed_layers
from phaseinterp.backends.tiny import tiny_qwen3

T = 40


@pytest.fixture(scope="module")
def model():
    return tiny_qwen3(seed=0)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, 512, (2, T), generator=torch.Generator().manual_seed(1))


def _layer_inputs(model, tokens, layer):
    """(hidden_states, (cos, sin)) the attention of `layer` receives in an uncompressed forward."""
    got = {}
    attn = model.model.layers[layer].self_attn
    h = attn.register_forward_pre_hook(lambda m, a, kw: got.update(x=kw.get("hidden_states", a[0] if a else None),
                                                                  pe=kw["position_embeddings"]), with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=tokens, use_cache=False)
    finally:
        h.remove()
    return got["x"], got["pe"]


def _reference(attn, x, pe, press):
    """Plain loops: per row, KV head and query, the group-averaged softmax scores over the keys it
    sees (t - sliding_window + 1 .. t on a sliding layer), the kept set, then one masked softmax per
    query head. Returns (attention output before o_proj [b, T, H, d], keep [b, K, T, T])."""
    window = getattr(attn, "sliding_window", None)
    b, n = x.shape[:2]
    d = attn.head_dim
    q = attn.q_norm(attn.q_proj(x).view(b, n, -1, d)).transpose(1, 2)
    k = attn.k_norm(attn.k_proj(x).view(b, n, -1, d)).transpose(1, 2)
    v = attn.v_proj(x).view(b, n, -1, d).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, *pe)
    H, K = q.shape[1], k.shape[1]
    G = H // K
    S, L, sink = press.chunk, press.local, press.sink
    z = torch.zeros(b, n, H, d)
    keep = torch.zeros(b, K, n, n, dtype=torch.bool)
    P = press.prefill

    def visible(t):
        return range(0 if window is None else max(0, t - window + 1), t + 1)

    def select(t, s):  # dynamic selection of a query at t with scores s over all keys
        first = visible(t)[0]
        cands = [i for i in visible(t) if i < t - L + 1 and i >= sink]
        kept = {i for i in visible(t) if i < sink or i > t - L}
        if press.kind == "token":
            kept |= set(sorted(cands, key=lambda i: -float(s[i]))[: press.budget * S])
        else:
            chunks = [j for j in range(n // S) if j * S + S - 1 < t - L + 1 and j * S >= first]
            score = {j: sum(float(s[i]) for i in range(j * S, j * S + S) if i in cands) for j in chunks}
            for j in sorted(chunks, key=lambda j: -score[j])[: press.budget]:
                kept |= set(range(j * S, j * S + S))
        return kept

    for r in range(b):
        for g in range(K):
            heads = range(g * G, (g + 1) * G)
            scores = torch.zeros(n, n)  # [query, key]: group-averaged attention over the keys the query sees
            for t in range(n):
                seen = list(visible(t))
                probs = [torch.softmax((q[r, h, t] @ k[r, g, seen].T) * attn.scaling, -1) for h in heads]
                scores[t, seen] = torch.stack(probs).mean(0)
            for t in range(n):
                if P is None:
                    kept = select(t, scores[t])
                elif t < P:  # static press: the prompt is prefilled with the original attention
                    kept = set(visible(t))
                else:  # compressed once at the end of prefill by the question's attention, then decoded
                    question = scores[max(0, P - press.observe): P].mean(0)
                    kept = (select(P - 1, question) | set(range(P, t + 1))) & set(visible(t))
                idx = sorted(kept)
                keep[r, g, t, idx] = True
                for h in heads:
                    w = torch.softmax((q[r, h, t] @ k[r, g, idx].T) * attn.scaling, -1)
                    z[r, t, h] = w @ v[r, g, idx]
    return z, keep


def _capture(model, layer, names):
    attn = model.model.layers[layer].self_attn
    got, handles = {}, []
    for name in names:
        handles.append(getattr(attn, name).register_forward_hook(lambda m, i, o, name=name: got.__setitem__(name, o)))
    return got, handles


@pytest.fixture(scope="module")
def gemma():
    """Tiny random Gemma 3: 8-token sliding window on layers 0, 1, 3, 4; global layers 2 and 5."""
    from phaseinterp.families.gemma3 import tiny_gemma3

    return tiny_gemma3(seed=0, sliding_window=8)


@pytest.mark.parametrize("kind", ["chunk", "token"])
@pytest.mark.parametrize("which, layer", [("qwen3", 1), ("gemma3", 2), ("gemma3", 1)])
@pytest.mark.parametrize("prefill, read", [(None, "keep"), (30, "keep"), (30, "z"), (T, "z")])
def test_equals_the_plain_reference(model, gemma, tokens, kind, which, layer, prefill, read):
    """Qwen3, Gemma 3's global layer 2 (QK-norm, its own scaling and RoPE) and its sliding layer 1
    (window 8 < T: the window cuts scores, candidates, sink and local window); dynamic selection and
    a static press (prompt 0..29 prefilled, compressed by the attention of its last 3 queries), the
    latter also with nothing reading `hook_keep` (no T x T tensors built) and with the whole row as
    the prompt (nothing compressed)."""
    model = model if which == "qwen3" else gemma
    tokens = tokens % model.config.vocab_size
    press = SelectionPress(kind, chunk=4, budget=2, local=5, sink=2, layers=(layer,), prefill=prefill, observe=3)
    x, pe = _layer_inputs(model, tokens, layer)
    original = model.model.layers[layer].self_attn
    with torch.no_grad():
        z_ref, keep_ref = _reference(original, x, pe, press)
    press_attention(model, press)
    try:
        got, handles = _capture(model, layer, ["hook_z"] + (["hook_keep"] if read == "keep" else []))
        assert pressed_layers(model)[layer].materializes() == (read == "keep")
        with torch.no_grad():
            model(input_ids=tokens, use_cache=False)
        for h in handles:
            h.remove()
    finally:
        restore_presses(model)
    if read == "keep":
        assert torch.equal(got["hook_keep"], keep_ref)
    torch.testing.assert_close(got["hook_z"], z_ref, atol=1e-5, rtol=1e-4)
    # the press dropped a key the query sees (else this test would not test selection), unless nothing is
    # decoded, or on the sliding layer by token: its 8-token window holds 3 candidates, fewer than the budget
    window = getattr(original, "sliding_window", None) or T
    seen = torch.ones(T, T, dtype=torch.bool).tril() & ~torch.ones(T, T, dtype=torch.bool).tril(-window)
    assert (~keep_ref & seen).any() == (prefill != T and not (kind == "token" and window < T))


@pytest.mark.parametrize("press", [SelectionPress("token", 4, 100, local=3, sink=1),
                                   SelectionPress("chunk", 1, 100, local=3, sink=1),
                                   SelectionPress("chunk", 8, 1, local=T), SelectionPress("token", 8, 1, local=T)])
@pytest.mark.parametrize("which", ["qwen3", "gemma3"])
def test_keeping_everything_equals_the_original(model, gemma, tokens, press, which):
    """Every visible key kept (Gemma 3: all layers pressed, the sliding ones keep their window)."""
    model = model if which == "qwen3" else gemma
    tokens = tokens % model.config.vocab_size
    with torch.no_grad():
        ref = model(input_ids=tokens, use_cache=False).logits
        press_attention(model, press)
        try:
            out = model(input_ids=tokens, use_cache=False).logits
        finally:
            restore_presses(model)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["chunk", "token"])
def test_a_static_press_prefills_with_the_original_attention_and_compresses_what_follows(model, tokens, kind):
    """kvpress timing: logits of the prompt (positions < prefill) are the original model's, those of
    the decoded tokens are not (the cache was compressed); a prompt as long as the row changes nothing."""
    P = 30
    with torch.no_grad():
        ref = model(input_ids=tokens, use_cache=False).logits
        for prefill in (P, T):
            press_attention(model, SelectionPress(kind, 4, 1, local=3, sink=1, prefill=prefill, observe=4))
            try:
                out = model(input_ids=tokens, use_cache=False).logits
            finally:
                restore_presses(model)
            torch.testing.assert_close(out[:, :prefill], ref[:, :prefill], atol=1e-5, rtol=1e-5)
            if prefill < T:
                assert (out[:, P:] - ref[:, P:]).abs().amax() > 1e-3


@pytest.mark.parametrize("kind", ["chunk", "token"])
def test_kept_sets_are_chunks_or_exact_token_counts(model, tokens, kind):
    S, k, L = 4, 3, 6
    sink = 0 if kind == "chunk" else 2  # chunk: the kept set beyond the window is exactly a union of chunks
    press_attention(model, SelectionPress(kind, S, k, local=L, sink=sink, layers=(0,)))
    try:
        got, handles = _capture(model, 0, ["hook_keep"])
        with torch.no_grad():
            model(input_ids=tokens, use_cache=False)
        for h in handles:
            h.remove()
    finally:
        restore_presses(model)
    keep = got["hook_keep"]
    t = torch.arange(T)[:, None]
    i = torch.arange(T)[None]
    selected = keep & (i >= sink) & (i < t - L + 1)  # what the press chose beyond sink and local
    assert not (keep & (i > t)).any()  # nothing from the future
    assert keep[..., (i > t - L).expand(T, T) & (i <= t)].all()  # the local window is always kept
    if kind == "chunk":
        n = T // S
        grid = selected[..., : n * S].unflatten(-1, (n, S))
        assert ((grid.all(-1)) | (~grid.any(-1))).all()  # whole chunks or nothing
        assert not selected[..., n * S:].any()
        n_valid = ((torch.arange(n) * S + S - 1)[None] < (torch.arange(T) - L + 1)[:, None]).sum(-1)
        assert torch.equal(grid.all(-1).sum(-1), n_valid.clamp(max=k).expand_as(grid.all(-1).sum(-1)))
    else:
        n_cand = ((i >= sink) & (i < t - L + 1)).sum(-1)
        assert torch.equal(selected.sum(-1), n_cand.clamp(max=k * S).expand_as(selected.sum(-1)))
        assert (n_cand > k * S).any()  # some queries had more candidates than the budget


@pytest.mark.parametrize("kind", ["chunk", "token"])
def test_causal(model, tokens, kind):
    t = 25
    other = tokens.clone()
    other[:, t + 1:] = (other[:, t + 1:] + 7) % 512
    press_attention(model, SelectionPress(kind, 4, 2, local=4, sink=1))
    try:
        with torch.no_grad():
            a = model(input_ids=tokens, use_cache=False).logits
            b = model(input_ids=other, use_cache=False).logits
    finally:
        restore_presses(model)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


@pytest.mark.parametrize("kind", ["chunk", "token"])
def test_editing_hook_keep_changes_the_output(model, tokens, kind):
    S = 4
    press_attention(model, SelectionPress(kind, S, 2, local=4, layers=(1,)))
    attn = pressed_layers(model)[1]
    try:
        with torch.no_grad():
            base = model(input_ids=tokens, use_cache=False).logits

            def drop_chunk(keep, hook):  # the last query forgets the first grid chunk it kept
                old = keep[0, 0, -1, : T - 4].nonzero()  # beyond the local window: selected
                assert len(old), "nothing selected: the edit would test nothing"
                j = int(old[0]) // S
                keep = keep.clone()
                keep[:, :, -1, j * S:(j + 1) * S] = False
                return keep

            attn.hook_keep.add_hook(drop_chunk)
            try:
                edited = model(input_ids=tokens, use_cache=False).logits
            finally:
                attn.hook_keep.remove_hooks()
    finally:
        restore_presses(model)
    torch.testing.assert_close(edited[:, :-1], base[:, :-1])  # only the edited query moves
    assert (edited[:, -1] - base[:, -1]).abs().max() > 1e-4


def test_press_undoes_itself_and_decoding_raises(model, tokens):
    press_attention(model, SelectionPress("chunk", 4, 2, layers=(0, 1)))
    press_attention(model, SelectionPress("token", 4, 2, layers=(1,)))
    try:
        assert {i: a.press.kind for i, a in pressed_layers(model).items()} == {1: "token"}
        with pytest.raises(ValueError, match="use_cache=False"):
            with torch.no_grad():
                out = model(input_ids=tokens[:, :8], use_cache=True)
                model(input_ids=tokens[:, 8:9], cache=out.cache, use_cache=True)
    finally:
        restore_presses(model)
    assert pressed_layers(model) == {}


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="pool", chunk=8, budget=4), r"kind='pool' is invalid: allowed \['chunk', 'token'\]"),
    (dict(kind="chunk", chunk=0, budget=4), r"chunk=0 is invalid: allowed an integer >= 1"),
    (dict(kind="chunk", chunk=8, budget=0), r"budget=0 is invalid: allowed an integer >= 1"),
    (dict(kind="token", chunk=8, budget=2, local=-1), r"local=-1 is invalid: allowed an integer >= 0"),
    (dict(kind="token", chunk=8, budget=2, sink=-2), r"sink=-2 is invalid: allowed an integer >= 0"),
    (dict(kind="token", chunk=True, budget=2), r"chunk=True is invalid"),
    (dict(kind="chunk", chunk=8, budget=2, prefill=0), r"prefill=0 is invalid: allowed an integer >= 1 \(or None"),
    (dict(kind="chunk", chunk=8, budget=2, prefill=9, observe=0), r"observe=0 is invalid: allowed an integer >= 1"),
])
def test_bad_press(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SelectionPress(**kwargs)


def test_bad_layers_and_models(model):
    with pytest.raises(ValueError, match=r"layer=2 is out of range: allowed 0..1"):
        press_attention(model, SelectionPress("chunk", 4, 2, layers=(2,)))
    with pytest.raises(ValueError, match="model of type Linear is invalid"):
        press_attention(torch.nn.Linear(2, 2), SelectionPress("chunk", 4, 2))
    assert pressed_layers(model) == {}


@pytest.mark.parametrize("which", ["qwen3", "gemma3"])
def test_phase_sweep_and_a_kv_head_knockout_run_on_a_pressed_model(model, gemma, which):
    from phaseinterp.backends import HFCausalLMBackend, backend_for
    from phaseinterp.interventions import knockout_map
    from phaseinterp.measure import phase_sweep
    from phaseinterp.tasks import RecordLookup

    model = model if which == "qwen3" else gemma
    batch = RecordLookup(vocab_size=128, n_records=8, n_demos=1).sample(4, modulus=4)
    press_attention(model, SelectionPress("chunk", 4, 1, local=4, sink=1))
    try:
        assert type(backend_for(model)) is HFCausalLMBackend  # plain HF family: no gate units to offer
        with torch.no_grad():
            logits = model(input_ids=batch.tokens, use_cache=False).logits
        rows = torch.arange(len(batch))
        # the answer: the pressed model's own prediction on even rows, another token on odd ones
        pred = logits[rows, batch.query_pos].argmax(-1)
        answers = torch.where(rows % 2 == 0, pred, (pred + 1) % 128).reshape(batch.answers.shape)
        batch = replace(batch, answers=answers)
        curve = phase_sweep(model, batch, period=4, n_boot=20, n_perm=20, progress=False)
        by_hand = phase_sweep(rows % 2 == 0, batch, period=4, n_boot=20, n_perm=20, progress=False)
        assert curve.accuracy.tolist() == by_hand.accuracy.tolist() and 0 < curve.accuracy.mean() < 1
        smap = knockout_map(model, batch, level="kv_head", replacement="zero", n_boot=20, progress=False)
        n_layers = model.config.num_hidden_layers
        assert smap.shape == (n_layers, 2, 4) and smap.clean["accuracy"] == curve.accuracy.tolist()
    finally:
        restore_presses(model)


def test_the_backends_own_traces_run_a_static_press_fused_with_the_same_knockout(model, tokens):
    """The engine's nnsight traces read only heads, layers, gates and entries (`engine_trace`), so a static press
    skips its T x T kept sets there; a knockout gives the logits it gives when a hook on `hook_keep` makes the
    press build them. A user's own trace still makes it build them (it may read `hook_keep`)."""
    from phaseinterp.backends import HFCausalLMBackend
    from phaseinterp.backends.edits import Replace

    press_attention(model, SelectionPress("chunk", 4, 2, local=5, sink=2, layers=(1,), prefill=30, observe=3))
    layer = pressed_layers(model)[1]
    seen = []
    original = layer.materializes
    layer.materializes = lambda: seen.append(original()) or seen[-1]
    try:
        backend = HFCausalLMBackend(model)
        qpos = torch.tensor([T - 1, T - 2])
        knockout = Replace(backend.units("kv_head")[-1])
        with backend.intervene(knockout):
            fused = backend.final_logits(tokens, qpos)
        assert seen and not any(seen)
        handle = layer.hook_keep.register_forward_hook(lambda m, i, o: None)
        try:
            with backend.intervene(knockout):
                built = backend.final_logits(tokens, qpos)
        finally:
            handle.remove()
        assert seen[-1] is True
        torch.testing.assert_close(fused, built, atol=1e-5, rtol=1e-4)
        assert (fused - backend.final_logits(tokens, qpos)).abs().max() > 1e-4  # the knockout changed the logits
        seen.clear()
        with backend.nn.trace(tokens):
            layer_out = backend.nn.model.layers[1].self_attn.output.save()
        assert seen == [True] and layer_out is not None
    finally:
        del layer.materializes
        restore_presses(model)
