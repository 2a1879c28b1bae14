"""The cost sentences of docs/interventions.md are the benchmark result files' numbers: a rerun that
moves a ratio fails here until the page says the new one."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _rows(name: str) -> dict[tuple[str, int], dict]:
    rows = json.loads((RESULTS / name).read_text())["rows"]
    return {(r["case"][:3], r["seq_len"]): r for r in rows}


@pytest.mark.parametrize("name, sentences", [
    ("compressed_maps.json", [
        ("plain SmolLM2 {a128t}x / {a256t}x time", {"a128t": ("(a)", 128, "time"), "a256t": ("(a)", 256, "time")}),
        ("{a128m}x / {a256m}x memory", {"a128m": ("(a)", 128, "memory"), "a256m": ("(a)", 256, "memory")}),
        ("{b256t}x / {b1024t}x time and {b256m}x / {b1024m}x memory", {
            "b256t": ("(b)", 256, "time"), "b1024t": ("(b)", 1024, "time"), "b256m": ("(b)", 256, "memory"),
            "b1024m": ("(b)", 1024, "memory")}),
        ("DeepSeek-V4 at 500 tokens {ct}x time, {cm}x memory", {"ct": ("(c)", 500, "time"), "cm": ("(c)", 500, "memory")}),
    ]),
    ("dsa_maps.json", [("DSA, 4 layers, `index_topk` 64) at 500 tokens {t}x time, {m}x memory",
                        {"t": ("(e)", 500, "time"), "m": ("(e)", 500, "memory")})]),
])
def test_the_cost_sentences_are_the_result_files_numbers(name, sentences):
    page = " ".join((ROOT / "docs" / "interventions.md").read_text().split())
    rows = _rows(name)

    def fmt(case, T, what):
        return f"{rows[(case, T)][f'{what}_ratio']:.2f}"

    for template, fields in sentences:
        want = template.format(**{k: fmt(*v) for k, v in fields.items()})
        assert want in page, f"docs/interventions.md does not say {want!r} ({name})"


def test_the_static_press_sentence_is_the_result_files_numbers():
    got = json.loads((RESULTS / "static_press.json").read_text())
    page = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    ratio = got["ratio_to_uncompressed"]
    want = f"{ratio['dense']:.2f}x and {ratio['fused']:.2f}x, {got['max_abs_logit_difference']:.1e}"
    assert got["same_answers"] and want in page, f"docs/performance.md does not say {want!r} (static_press.json)"


def test_the_gguf_first_load_sentence_is_the_result_files_numbers():
    models = json.loads((RESULTS / "gguf_load.json").read_text())["models"]
    page = " ".join((ROOT / "docs" / "backends.md").read_text().split())
    sec = {m: {w: f"{v['seconds'][w][0]:.1f}" for w in ("one_parse", "separate")} for m, v in models.items()}
    want = (f"a first load takes {sec['smollm2']['one_parse']} s instead of {sec['smollm2']['separate']} s for SmolLM2 "
            f"and {sec['gemma3-270m']['one_parse']} s instead of {sec['gemma3-270m']['separate']} s for Gemma 3 270M")
    assert want in page, f"docs/backends.md does not say {want!r}"
    assert all(v["readers"] == {"separate": 3, "one_parse": 1} and v["same_weights_and_tokens"] for v in models.values())


def test_the_answer_rows_sentence_is_the_result_files_numbers():
    now, before = (json.loads((RESULTS / f"answer_rows{tail}.json").read_text()) for tail in ("", "_f343312"))
    page = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    want = (f"costs {now['time_ratio']:.2f}x the time and {now['memory_ratio']:.2f}x the memory of one row per prompt")
    assert want in page and f"it cost {before['time_ratio']:.2f}x and {before['memory_ratio']:.2f}x" in page
    assert now["max_abs_logit_difference_first_answer_token"] < 1e-4 and now["answer_rows"] == 4 * now["prompts"]


def test_the_windowed_attention_sentence_is_the_result_files_numbers():
    got = json.loads((RESULTS / "windowed_attention.json").read_text())
    r = got["ratio_to_eager"]
    page = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    want = f"`sdpa` takes {r['sdpa']:.2f}x and windowed attention {r['phaseinterp_windowed_sdpa']:.2f}x the time of `eager`"
    assert want in page, f"docs/performance.md does not say {want!r} (windowed_attention.json)"
    assert got["same_answer_tokens"] and max(got["max_abs_logit_difference_to_eager"].values()) < 1e-3


def test_the_base_chunks_sentence_is_the_result_files_numbers():
    got = json.loads((RESULTS / "base_chunks.json").read_text())
    page = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    want = (f"chunks of {got['base_tokens']['chunks'] // got['seq_len']} prompts take {got['memory_ratio']:.2f}x the "
            f"peak memory and {got['time_ratio']:.2f}x the time of one forward over the {got['prompts']} prompts")
    assert want in page, f"docs/performance.md does not say {want!r} (base_chunks.json)"
    kept = {m["kept_bytes"] for runs in got["measured"].values() for m in runs}
    assert len(kept) == 1 and f"the {kept.pop() / 1e9:.2f} GB the run keeps for the units" in page
    assert got["max_abs_logit_difference"] < 1e-4 and got["memory_ratio"] <= got["target"]["memory_ratio"]
