"""Quick mode of the presses study: `measure` on a tiny random Llama with a record-lookup batch."""

from __future__ import annotations

from dataclasses import replace

import torch

from experiments.presses.run import measure, render
from phaseinterp.backends import SelectionPress
from phaseinterp.backends.presses import pressed_layers
from phaseinterp.measure import phase_sweep
from phaseinterp.tasks import RecordLookup


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


def test_measure_rows_equal_direct_sweeps_and_render():
    model = _tiny_llama()
    batch = RecordLookup(vocab_size=128, n_records=8, n_demos=1).sample(3, modulus=4)
    with torch.no_grad():
        pred = model(input_ids=batch.tokens, use_cache=False).logits[torch.arange(len(batch)), batch.query_pos].argmax(-1)
    batch = replace(batch, answers=pred.reshape(batch.answers.shape))  # the uncompressed model is always right
    press = SelectionPress("chunk", 4, 1, local=2, sink=1)
    rows = measure(model, batch, [None, press], period=4, batch_size=4, n_boot=20, n_perm=20)
    assert pressed_layers(model) == {}  # measure leaves the model as it found it
    assert rows[0]["name"] == "uncompressed" and rows[0]["accuracy"] == [1.0] * 4
    from phaseinterp.backends import press_attention, restore_presses

    press_attention(model, press)
    direct = phase_sweep(model, batch, period=4, n_boot=20, n_perm=20, progress=False)
    restore_presses(model)
    assert rows[1]["accuracy"] == direct.accuracy.tolist() and rows[1]["p_value"] == direct.p_value
    table = render({"config": {"modulus": 4, "seq_len": batch.tokens.shape[1]}, "command": "x", "seed": 0,
                    "task": {"prompts": len(batch)}, "rows": rows}, "r.json")
    assert f"| {press.name} | " + " | ".join(f"{a:.2f}" for a in rows[1]["accuracy"]) in table
