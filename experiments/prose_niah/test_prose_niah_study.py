"""The prose needle study: its settings, a unit run on a tiny random Llama equal to a direct sweep, the
Holm reading of its pages, and pages that match the result files."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from experiments.prose_niah import render, run
from phaseinterp.backends.kv_compression import KVCompression
from phaseinterp.backends.presses import SelectionPress
from tests.test_needle_cli import llama_dir  # noqa: F401  (fixture: a tiny random Llama folder)
from tests.test_tasks_prose import haystack, tokenizer_dir  # noqa: F401  (fixtures: essays, tokenizer)


def test_settings_parse_to_the_library_objects_and_bad_names_are_refused():
    assert run.setting("none", ()) is None
    assert run.setting("evict-W16S8", (1, 2)) == KVCompression(16, 8, "evict", local=run.LOCAL, sink=run.SINK, layers=(1, 2))
    assert run.setting("evict0-W8S8", (1,)) == KVCompression(8, 8, "evict", local=run.LOCAL, sink=run.SINK, layers=(1,), offset=0)
    assert run.setting("token-S8k1", (3,)) == SelectionPress("token", 8, 1, local=run.LOCAL, sink=run.SINK, layers=(3,))
    batch = SimpleNamespace(answer_pos=torch.tensor([[9, 10], [9, 10]]))
    assert run.setting("chunk-S8k1-static", (3,), batch) == SelectionPress(
        "chunk", 8, 1, local=run.LOCAL, sink=run.SINK, layers=(3,), prefill=10, observe=run.OBSERVE)
    with pytest.raises(ValueError, match="needs the batch"):
        run.setting("token-S8k1-static", (3,))
    with pytest.raises(ValueError, match=r"prompt lengths \[10, 11\] are invalid for a static press"):
        run.setting("token-S8-static", (3,), SimpleNamespace(answer_pos=torch.tensor([[9], [10]])))
    assert run.setting("chunk-S8", (3,)) == SelectionPress("chunk", 8, run.BUDGET, local=run.LOCAL, sink=run.SINK, layers=(3,))
    with pytest.raises(ValueError, match=r"setting='max-W8S8' is invalid: allowed 'none', 'RULE-WxSy'"):
        run.setting("max-W8S8", ())
    model = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=4))
    assert run.layers_of(model, "2-3") == (2, 3) and run.layers_of(model, "all") == (0, 1, 2, 3)
    with pytest.raises(ValueError, match=r"layers='2-4' is invalid: allowed 'A-B' with 0 <= A <= B < 4"):
        run.layers_of(model, "2-4")
    assert run.layers_of(model, "3,1") == (1, 3) and run.layers_of(model, "2") == (2,)
    for bad in ("1,4", "3-1", "1;2"):
        with pytest.raises(ValueError, match=rf"layers='{bad}' is invalid"):
            run.layers_of(model, bad)


def test_a_unit_equals_a_direct_sweep_and_is_read_back_not_rerun(llama_dir, tokenizer_dir, haystack, tmp_path,  # noqa: F811
                                                                   monkeypatch):
    from transformers import LlamaForCausalLM

    from phaseinterp.backends.kv_compression import compress_attention
    from phaseinterp.measure import phase_sweep
    from phaseinterp.tasks import ProseNeedle

    monkeypatch.setattr(run, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(run, "JOURNAL", tmp_path / "journal")
    monkeypatch.setattr(run, "LOCAL", 4)
    monkeypatch.setattr(run, "SINK", 1)
    monkeypatch.setattr(run, "MODULUS", 4)
    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    args = SimpleNamespace(model="tiny", length=160, n=3, n_depths=2, seed=0, batch_size=4, n_boot=20, n_perm=20,
                           argv=["grid"])
    task = ProseNeedle(str(tokenizer_dir), seq_len=160, n_depths=2, haystack_dir=str(haystack))
    monkeypatch.setattr("phaseinterp.tasks.ProseNeedle", lambda tok, **kw: ProseNeedle(tok, haystack_dir=str(haystack), **kw))
    unit = run.run_unit(model, str(tokenizer_dir), args, "mean-W4S4", "0-1", "value")
    compress_attention(model, KVCompression(4, 4, local=4, sink=1, layers=(0, 1)))
    direct = phase_sweep(model, task.sample(3, 4, seed=0), n_boot=20, n_perm=20, progress=False)
    assert unit["curve"]["correct"] == direct.correct.tolist() and unit["curve"]["period"] == 4
    assert unit["compression"]["class"] == "KVCompression" and unit["layers"] == "0-1"
    path = run.unit_path("tiny", 160, "value", "mean-W4S4", "0-1", 3)
    assert json.loads(path.read_text())["summary"] == unit["summary"]
    path.write_text(json.dumps({**unit, "seconds": -1.0}))
    assert run.run_unit(model, str(tokenizer_dir), args, "mean-W4S4", "0-1", "value")["seconds"] == -1.0  # not rerun


def _unit(setting: str, accuracy: list[float], p: float, n: int = 4, examples: int = 8) -> dict:
    """A unit file's fields the reading uses; its rows: `examples` examples, each right at residue 1 only (so
    its test could reach p < 0.05 with 8 examples, not with 2)."""
    summary = {"p_value": p, "p_periodic": 0.5, "period": 8, "worst_residue": int(np.argmin(accuracy)), "mean": 0.5,
               "gap_heldout_pp": 10.0, "gap_interval_pp": [1.0, 20.0]}
    curve = {"accuracy": accuracy, "modulus": 2, "residue": [0, 1] * examples, "correct": [False, True] * examples,
             "example_id": [e for e in range(examples) for _ in (0, 1)], "n_perm": 1000, "seed": 0}
    return {"model": "m", "length": 1024, "anchor": "value", "setting": setting, "layers": "0-1", "n_per_residue": n,
            "modulus": 2, "seed": 0, "task": {"n_depths": 8}, "curve": curve, "summary": summary}


def test_the_reading_corrects_for_the_pooled_tests_and_names_floor_and_ceiling():
    rows = [_unit("none", [1.0, 1.0], 1.0), _unit("mean-W8S8", [0.2, 0.9], 0.02), _unit("score-W8S8", [0.5, 0.6], 0.2),
            _unit("chunk-S8", [1.0, 1.0], 1.0), _unit("score-W8S8", [0.0, 1.0], 0.001, n=2)]
    said = render.verdicts(rows)  # the n2 score unit's prompts are the n4 unit's first ones: out of the pool
    assert said[render.key(rows[0])] == said[render.key(rows[3])] == "at ceiling at every residue: cannot show a phase effect"
    assert said[render.key(rows[1])].startswith("weak phases: worst r = 0 (Holm p = 0.040")  # 2 tests: 0.02 x 2
    assert said[render.key(rows[2])] == "no phase effect detected (Holm p = 0.20 over 2 tests)"
    assert said[render.key(rows[4])].startswith("its prompts are the n4 unit's first ones (not in the Holm pool")


def test_a_unit_whose_outcomes_cannot_reach_significance_leaves_the_holm_pool():
    rows = [_unit("mean-W8S8", [0.2, 0.9], 0.02), _unit("score-W8S8", [0.5, 0.6], 0.2),
            _unit("evict-W8S8", [0.0, 1.0], 0.25, examples=2)]  # 2 informative examples: p >= 2/4 at best
    assert render.attainable(rows[2]) >= 0.25 and render.attainable(rows[0]) < 0.01
    said = render.verdicts(rows)
    assert said[render.key(rows[2])].startswith("no power: 2 of 2 examples right at some residues and wrong at others")
    assert said[render.key(rows[0])].startswith("weak phases: worst r = 0 (Holm p = 0.040")  # 2 tests, not 3
    assert render.holm_pool(rows) == rows[:2]


def test_the_pages_are_rendered_from_the_result_files():
    block = render.block()
    for page in render.PAGES:
        text = page.read_text()
        assert render.MARK in text, f"{page} has no results block"
        assert text.split(render.MARK, 1)[1].strip() == block.strip(), \
            f"{page} is stale: python -m experiments.prose_niah.run render"


def test_kept_reads_the_press_and_the_oracle_keeps_the_values_chunk(llama_dir, tokenizer_dir, haystack, tmp_path,  # noqa: F811
                                                                     monkeypatch):
    from transformers import LlamaForCausalLM

    from phaseinterp.backends.presses import apply_attention, pressed_layers
    from phaseinterp.measure import phase_sweep
    from phaseinterp.tasks import ProseNeedle

    from experiments.prose_niah import kept

    monkeypatch.setattr(run, "LOCAL", 4)
    monkeypatch.setattr(run, "SINK", 1)
    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    args = SimpleNamespace(model="tiny", length=160, n=2, n_depths=2, seed=0, modulus=4, argv=["kept"])
    task = ProseNeedle(str(tokenizer_dir), seq_len=160, n_depths=2, haystack_dir=str(haystack))
    monkeypatch.setattr("phaseinterp.tasks.ProseNeedle", lambda tok, **kw: ProseNeedle(tok, haystack_dir=str(haystack), **kw))
    out = kept.kept_unit(model, str(tokenizer_dir), args, "chunk-S4k1-static", "0-1", tmp_path, run.setting, run.layers_of)
    batch = task.sample(2, 4, seed=0)
    press = run.setting("chunk-S4k1-static", (0, 1), batch)
    apply_attention(model, press)
    sweep = phase_sweep(model, batch, n_boot=20, n_perm=20, progress=False)
    assert [r["natural"] for r in out["rows"]] == sweep.correct.tolist()  # the natural forward is the sweep's
    # the chunks it read are those kept_keys selects from layer 0's scores (layer 0 sees the embeddings only)
    attn, b = pressed_layers(model)[0], 3
    got = {}
    attn.hook_keep.add_hook(lambda keep, hook: got.setdefault("keep", keep))
    with torch.no_grad():
        model(batch.tokens[b:b + 1], use_cache=False)
    attn.hook_keep.remove_hooks()
    i = torch.arange(160)
    cand = (i >= 1) & (i < press.prefill - 4)
    first = [kept._chunks(got["keep"][0, g, press.prefill], cand, 4)[0] for g in range(got["keep"].shape[1])]
    v = out["rows"][b]["value_pos"]
    layer0 = dict(zip(*np.unique(np.array(first) - v // 4, return_counts=True)))
    assert all(out["rows"][b]["offset_counts"].get(str(o), 0) >= n for o, n in layer0.items())
    assert sum(out["rows"][b]["offset_counts"].values()) == 2 * got["keep"].shape[1]  # 2 layers x KV heads, 1 chunk each
    assert out["by_residue"][int(batch.residue[b])]["n"] == 2
    # the oracle forward reads the value's chunk at every pressed layer: the same logits as that edit made by hand
    force = lambda keep, hook: kept.keep_chunk(keep, press.prefill, cand, v // 4, 4)  # noqa: E731
    for a in pressed_layers(model).values():
        a.hook_keep.add_hook(force)
    with torch.no_grad():
        logits = model(batch.tokens[b:b + 1], use_cache=False).logits[0]
    for a in pressed_layers(model).values():
        a.hook_keep.remove_hooks()
    correct, logprob = kept.score(logits, batch.tokens[b], batch.answer_pos[b])
    assert out["rows"][b]["oracle"] == correct and out["rows"][b]["oracle_logprob"] == pytest.approx(logprob, abs=1e-3)
    assert out["rows"][b]["oracle_logprob"] != pytest.approx(out["rows"][b]["natural_logprob"], abs=1e-3)
    with pytest.raises(ValueError, match="allowed a static chunk press"):
        kept.kept_unit(model, str(tokenizer_dir), args, "chunk-S4k1", "0-1", tmp_path / "x", run.setting, run.layers_of)
    assert json.loads(kept.kept_path(tmp_path, "tiny", 160, "chunk-S4k1-static", "0-1", 2).read_text())["rows"] == out["rows"]


def test_each_stated_prediction_is_judged_by_its_units_reading():
    from experiments.prose_niah.predictions import Prediction, flat, judged, strong_at, weak

    def unit(setting, acc, n=32):
        return {"model": "m", "anchor": "value", "setting": setting, "n_per_residue": n, "length": 1024,
                "layers": "5", "curve": {"accuracy": acc}}

    rows = [unit("chunk-S8k1-static", [0, 0, 0, .9, .8, 0, 0, .1]), unit("chunk-S8k2-static", [0, 0, 0, .9, .2, 0, 0, .5]),
            unit("token-S8k2-static", [0] * 8), unit("mean-W8S8", [.5] * 8, n=8)]
    said = {render.key(u): s for u, s in zip(rows, ["weak phases: worst r = 0", "weak phases: worst r = 0",
                                                    "at floor at every residue: cannot show a phase effect",
                                                    "no phase effect detected (Holm p = 0.9 over 3 tests)"])}
    import experiments.prose_niah.predictions as predictions

    stated = (Prediction("m", "value", "chunk-S8k*-static", 32, "strong at 3-4", strong_at((3, 4))),
              Prediction("m", "value", "chunk-S8k*-static", 32, "weak", weak,
                         unless="chunk-S8k1-static"),
              Prediction("m", "value", "token-S8k*-static", 32, "flat", flat),
              Prediction("m", "value", "mean-W8S8", 8, "flat", flat),
              Prediction("m", "value", "score-W8S8", 32, "flat", flat))
    original, predictions.PREDICTIONS = predictions.PREDICTIONS, stated
    try:
        got = [(u["setting"] if u else "not run yet", outcome) for _, u, outcome in judged(rows, said, render.key)]
    finally:
        predictions.PREDICTIONS = original
    assert got == [("chunk-S8k1-static", "held"), ("chunk-S8k2-static", "did not hold"),  # r4 0.2 < r7 0.5
                   ("chunk-S8k2-static", "held"),  # the k1 unit is the glob's `unless`
                   ("token-S8k2-static", "cannot tell: at floor at every residue: cannot show a phase effect"),
                   ("mean-W8S8", "held"), ("not run yet", "cannot tell: not run yet")]


def test_survivors_name_the_needle_tokens_the_evict_grid_keeps(tokenizer_dir, haystack, tmp_path, monkeypatch):  # noqa: F811
    from experiments.prose_niah import survivors
    from phaseinterp.tasks import ProseNeedle

    monkeypatch.setattr("phaseinterp.tasks.ProseNeedle", lambda tok, **kw: ProseNeedle(tok, haystack_dir=str(haystack), **kw))
    args = SimpleNamespace(model="tiny", length=160, n_depths=2, seed=0, argv=["survivors"])
    found = survivors.write_survivors(str(tokenizer_dir), args, tmp_path, 8)
    assert json.loads(survivors.survivors_path(tmp_path, "tiny").read_text())["rows"] == found["rows"]
    L = found["value_len"]
    assert [r["residue"] for r in found["rows"]] == list(range(8))
    for row in found["rows"]:
        value = row["tokens"][row["value_offset"]: row["value_offset"] + L]
        assert (row["first_position"] + row["value_offset"]) % 8 == row["residue"] and len(row["tokens"]) == row["value_offset"] + L + 1
        for k in (7, 0):  # the batch's positions and the residue arithmetic agree on where a value token survives
            assert bool(set(survivors.kept_tokens(row, k, 8)) & set(value)) == (row["residue"] in survivors.surviving(k, 8, L, 8))
    rng = np.random.default_rng(0)
    unit = {"model": "tiny", "anchor": "value", "setting": "evict-W8S8", "length": 160, "n_per_residue": 8,
            "compression": {"rule": "evict", "window": 8, "stride": 8, "offset": None},
            "curve": {"modulus": 8, "correct": rng.random(64).round().tolist(), "residue": list(range(8)) * 8,
                      "example_id": np.repeat(np.arange(8), 8).tolist(), "accuracy": [0.5] * 8}}
    lines = survivors.survivor_lines([unit], {}, lambda u: "tiny unit", tmp_path)
    gap, lo, hi = survivors.survivor_gap(unit, L)
    assert f"- tiny unit: {gap:+.1f} pp [{lo:+.1f}, {hi:+.1f}]" in "\n".join(lines) and lo <= gap <= hi
    assert sum(line.startswith("| ") for line in lines) == 1 + 8  # the header and one row per residue
    assert survivors.survivor_lines([{**unit, "n_per_residue": 4}], {}, lambda u: "tiny unit", tmp_path) == []


def test_rescue_moves_one_window_choice_and_renders_its_gain(llama_dir, tokenizer_dir, haystack, tmp_path,  # noqa: F811
                                                            monkeypatch):
    from transformers import LlamaForCausalLM

    from experiments.prose_niah import rescue
    from phaseinterp.backends.kv_compression import KVCompression, compressed_layers
    from phaseinterp.backends.presses import apply_attention
    from phaseinterp.tasks import ProseNeedle

    monkeypatch.setattr(run, "LOCAL", 4)
    monkeypatch.setattr(run, "SINK", 1)
    monkeypatch.setattr("phaseinterp.tasks.ProseNeedle", lambda tok, **kw: ProseNeedle(tok, haystack_dir=str(haystack), **kw))
    model = LlamaForCausalLM.from_pretrained(llama_dir).eval()
    args = SimpleNamespace(model="tiny", length=160, n=2, n_depths=2, seed=0, modulus=4, shifts=[0, -1], argv=["rescue"])
    out = rescue.rescue_unit(model, str(tokenizer_dir), args, "evict-W4S4", "0-1", tmp_path, run.setting, run.layers_of)
    assert len(out["rows"]) == 8 and {"natural", "shift0", "shift-1"} <= set(out["rows"][0])
    assert not compressed_layers(model)  # the model is given back uncompressed
    batch = ProseNeedle(str(tokenizer_dir), seq_len=160, n_depths=2).sample(2, 4, seed=0)
    apply_attention(model, KVCompression(4, 4, "evict", local=4, sink=1, layers=(0, 1)))
    try:
        attns = compressed_layers(model)
        for b in range(len(batch.tokens)):
            tokens, v = batch.tokens[b], int(batch.value_pos[b])
            natural = rescue._forward(model, attns, tokens, None, 4)
            same = rescue._forward(model, attns, tokens, v + (3 - v) % 4, 4)  # the token evict keeps anyway
            other = v if v % 4 != 3 else v - 1
            moved = rescue._forward(model, attns, tokens, other, 4)
            assert torch.equal(same, natural)  # an edit to the kept token changes nothing
            assert not torch.allclose(moved[v + 1:], natural[v + 1:])  # another token: later positions change
            assert torch.equal(moved[: (v // 4) * 4 + 3], natural[: (v // 4) * 4 + 3])  # nothing before the window completes
            answer = batch.answer_pos[b]
            tail = rescue._forward(model, attns, tokens, other, 4, keep=len(tokens) - int(answer[answer >= 0].min()))
            torch.testing.assert_close(tail, moved[-len(tail):], atol=1e-5, rtol=1e-5)  # the last positions' logits only
            pos = answer[answer >= 0]
            assert rescue._correct(model, attns, tokens, answer, other, 4) == bool((moved[pos].argmax(-1) == tokens[pos + 1]).all())
    finally:
        apply_attention(model, None)
    assert json.loads(rescue.rescue_path(tmp_path, "tiny", 160, "evict-W4S4", "0-1", 2).read_text())["rows"] == out["rows"]
    (tmp_path / "results" / "prose" / "tiny").mkdir(parents=True)
    rescue.rescue_path(tmp_path / "results" / "prose", "tiny", 160, "evict-W4S4", "0-1", 2).write_text(json.dumps(out))
    lines = "\n".join(rescue.rescue_lines(tmp_path / "results" / "prose"))
    g, lo, hi = rescue.gain(out["rows"], -1, [r for r in range(4) if (r - 1 - 3) % 4 != 0])
    assert f"keep value-1 (the token at offset -1 from the value's first): {g:+.1f} pp [{lo:+.1f}, {hi:+.1f}]" in lines
    assert "Predicted" not in lines  # no prediction was stated for this model
    rescue.rescue_path(tmp_path / "results" / "prose", "tiny", 160, "evict-W4S4", "0-1", 2).write_text(
        json.dumps({**out, "model": "smollm2"}))
    lo = rescue.gain(out["rows"], 0, [r for r in range(4) if (r - 3) % 4 != 0])[1]
    lines = "\n".join(rescue.rescue_lines(tmp_path / "results" / "prose"))
    assert f"Predicted: a gain; {'held' if lo > 0 else 'did not hold'}." in lines  # SmolLM2's stated prediction for shift 0
    rows = out["rows"]
    curve = {"example_id": [x["example_id"] for x in rows], "residue": [x["residue"] for x in rows],
             "correct": [not x["natural"] if i == 0 else x["natural"] for i, x in enumerate(rows)]}
    assert rescue.agreement(out, tmp_path / "results" / "prose") == ""  # no grid unit to compare with
    (tmp_path / "results" / "prose" / "tiny" / "T160-value-evict-W4S4-L0-1-n2.json").write_text(json.dumps({"curve": curve}))
    assert rescue.agreement(out, tmp_path / "results" / "prose").endswith("on 7 of 8 prompts.")  # one row flipped
