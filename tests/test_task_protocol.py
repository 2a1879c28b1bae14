"""The `Task` protocol: a task defined here, outside the library, runs through `phase_sweep`,
`knockout_map` and the CLI with no library file changed; a multi-token (teacher-forced) answer is
scored by exact match of every answer token; the library's tasks round-trip through their cards."""

import json
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
import torch

from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.cli import main
from phaseinterp.commands import sweep as sweep_cmd
from phaseinterp.interventions import knockout_map
from phaseinterp.interventions.knockout import knockout_hooks
from phaseinterp.interventions.runner import final_logits
from phaseinterp.measure import PhaseCurve, phase_sweep
from phaseinterp.measure.oracle import induction_oracle
from phaseinterp.tasks import (TASK_KINDS, Induction, PhaseBatch, RecordLookup, Task, TaskKind, make_task,
                               register_task, task_from_card, task_kinds)
from phaseinterp.tasks.names import BUILTIN_TASKS
from phaseinterp.units import Unit

torch.set_num_threads(1)


@dataclass(frozen=True)
class ToyTask:
    """BOS, filler, a needle "K V1 .. Vn" whose K sits at the residue, filler, then "K V1 .. Vn"
    again at the end (teacher forced): the answer is V1 .. Vn, scored at the last n + 1 positions
    but one. `alternatives`: also accept every id of V1's parity for the first answer token (a
    random model then scores about half)."""

    vocab_size: int = 256
    seq_len: int = 40
    value_len: int = 1
    alternatives: bool = False
    name: ClassVar[str] = "toy"

    def sample(self, n_per_residue, modulus, *, seed=0, split="eval", residues=None) -> PhaseBatch:
        rng = np.random.default_rng([seed, ("eval", "calibration").index(split)])
        residues = range(modulus) if residues is None else residues
        T, n = self.seq_len, self.value_len
        filler, keys, values = np.arange(1, 32), np.arange(32, 64), np.arange(64, self.vocab_size)
        rows, key_pos, ids = [], [], []
        for e in range(n_per_residue):
            k, v = rng.choice(keys), rng.choice(values, n, replace=False)
            for r in residues:
                p = r + modulus * rng.integers(1, (T // 2) // modulus)  # after BOS, in the first half
                seq = rng.choice(filler, T)
                seq[0], seq[p], seq[p + 1 : p + 1 + n] = 0, k, v
                seq[T - 1 - n], seq[T - n :] = k, v
                rows.append(seq), key_pos.append(p), ids.append(e)
        tokens = torch.tensor(np.stack(rows))
        key_pos, q = torch.tensor(key_pos), torch.full((len(rows),), T - 1 - n)
        first = tokens[:, T - n]
        answers = first[:, None]
        if self.alternatives:
            same = torch.arange(self.vocab_size)[None, :].expand(len(rows), -1)
            same = same[(same % 2 == first[:, None] % 2) & (same != first[:, None])].view(len(rows), -1)
            answers = torch.cat([first[:, None], same], 1)
        return PhaseBatch(tokens=tokens, answers=answers, key_pos=key_pos, value_pos=key_pos + 1, query_pos=q,
                          residue=key_pos % modulus, example_id=torch.tensor(ids), prompt_id=torch.arange(len(rows)),
                          record_pos=key_pos[:, None], modulus=modulus, value_len=n,
                          answer_pos=None if n == 1 else q[:, None] + torch.arange(n),
                          meta={"task": self.name, "config": self.card(), "seed": seed, "split": split}).validate()

    def card(self):
        return {"task": self.name, "vocab_size": self.vocab_size, "seq_len": self.seq_len,
                "value_len": self.value_len, "alternatives": self.alternatives}


def test_the_toy_task_follows_the_protocol_and_its_card_round_trips():
    task = ToyTask(value_len=2)
    assert isinstance(task, Task)
    with TASK_KINDS.registered(TaskKind("toy", ToyTask)):
        again = task_from_card(json.loads(json.dumps(task.card())))
    assert again == task
    b = task.sample(3, 4)
    assert b.residue.tolist() == [0, 1, 2, 3] * 3
    assert (b.answer_pos[:, 0] == b.query_pos).all() and (b.answer_pos[:, 1] == b.tokens.shape[1] - 2).all()


def test_phase_sweep_scores_every_answer_token_of_a_task_defined_here():
    oracle = induction_oracle(256, weak_phases=[1], period=4)  # wrong where the copied-from token sits at phase 1
    one = phase_sweep(oracle, ToyTask().sample(8, 4), n_boot=50, n_perm=50, progress=False)
    assert one.accuracy.tolist() == [1.0, 0.0, 1.0, 1.0]  # K at phase 1: V1 is copied from there
    # two answer tokens: V1 is read after K (residue r), V2 after V1 (residue r + 1): both must be right
    two = phase_sweep(oracle, ToyTask(value_len=2).sample(8, 4), n_boot=50, n_perm=50, progress=False, batch_size=5)
    assert two.accuracy.tolist() == [0.0, 0.0, 1.0, 1.0]
    three = phase_sweep(oracle, ToyTask(value_len=3).sample(8, 4), n_boot=50, n_perm=50, progress=False)
    assert three.accuracy.tolist() == [0.0, 0.0, 1.0, 0.0]  # V3 is read after V2 at r + 2


def _zero_layer_accuracy(model, batch: PhaseBatch, layer: int) -> list[float]:
    """Per-residue accuracy with layer `layer`'s head outputs zeroed at each scored position, computed
    here by hand: one hooked forward per answer position, a row right when every token is."""
    unit = Unit("layer", layer)
    cfg = model.cfg
    positions = batch.answer_pos if batch.answer_pos is not None else batch.query_pos[:, None]
    ok = torch.ones(len(batch), dtype=torch.bool)
    for j in range(positions.shape[1]):
        pos = positions[:, j]
        sites = pos[:, None]
        zeros = torch.zeros(len(batch), 1, cfg.n_heads, cfg.d_head)
        logits = final_logits(model, batch.tokens, pos, knockout_hooks(unit, zeros, sites, cfg=cfg))
        want = batch.answers if j == 0 else batch.tokens[torch.arange(len(batch)), pos + 1][:, None]
        ok &= (logits.argmax(-1)[:, None] == want).any(1)
    return [float(ok[batch.residue == r].float().mean()) for r in range(batch.modulus)]


@pytest.mark.parametrize("value_len", [1, 2])
def test_knockout_map_runs_a_task_defined_here(value_len):
    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    task = ToyTask(vocab_size=512, value_len=value_len, alternatives=True)
    batch = task.sample(12, 4)
    if value_len == 2:  # make the second answer token the model's own next token, so both tokens can be right
        pos = batch.answer_pos[:, 1]
        tokens = batch.tokens.clone()
        tokens[:, -1] = final_logits(model, batch.tokens, pos).argmax(-1)
        batch = replace(batch, tokens=tokens)
    smap = knockout_map(model, batch, level="layer", replacement="zero", n_boot=50, progress=False)
    clean = phase_sweep(model, batch, n_boot=50, n_perm=50, progress=False)
    assert smap.clean["accuracy"] == clean.accuracy.tolist()
    assert 0.2 < clean.mean < 0.8  # alternatives: about half right, so a knockout can move it either way
    assert smap.meta["task"]["task"] == "toy"
    for layer in range(model.cfg.n_layers):
        got = smap.extras["acc_knockout"][layer, 0].tolist()
        assert got == pytest.approx(_zero_layer_accuracy(model, batch, layer))


class StandIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = SimpleNamespace(vocab_size=256, n_ctx=2048, strides=(4,))
        self.fn = induction_oracle(256, weak_phases=[1], period=4)

    def forward(self, tokens):
        return self.fn(tokens)


def test_the_cli_runs_a_task_named_by_import_path_or_registered(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_cmd, "load_model", lambda args: StandIn())
    common = ["--preset", "stand-in", "--modulus", "4", "--n-per-residue", "6", "--n-boot", "50", "--n-perm", "50",
              "--no-progress"]
    assert main(["sweep", *common, "--task", f"{__name__}:ToyTask", "--task-option", "value_len=2",
                 "--out", str(tmp_path / "a")]) == 0
    curve = PhaseCurve.from_json(tmp_path / "a" / "curve.json")
    assert curve.accuracy.tolist() == [0.0, 0.0, 1.0, 1.0]
    assert curve.config["source"]["task"] == {**ToyTask(value_len=2).card(), "from_card": False}
    with TASK_KINDS.registered(TaskKind("toy", ToyTask)):
        assert main(["sweep", *common, "--task", "toy", "--out", str(tmp_path / "b")]) == 0
    assert PhaseCurve.from_json(tmp_path / "b" / "curve.json").accuracy.tolist() == [1.0, 0.0, 1.0, 1.0]


def test_the_cli_knockout_runs_a_task_defined_here(tmp_path):
    argv = ["knockout", "--preset", "tiny-w4s4", "--modulus", "4", "--n-per-residue", "4", "--n-boot", "50",
            "--no-progress", "--task", f"{__name__}:ToyTask", "--task-option", "vocab_size=512",
            "--task-option", "alternatives=true", "--out", str(tmp_path)]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "knockout_map.json").read_text())
    assert summary["meta"]["task"]["config"] == ToyTask(vocab_size=512, alternatives=True).card()


def test_the_cli_refuses_an_unknown_task_and_bad_options(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep_cmd, "load_model", lambda args: StandIn())
    common = ["sweep", "--preset", "p", "--modulus", "4", "--n-per-residue", "2", "--out", str(tmp_path)]
    assert main([*common, "--task", "nosuch"]) == 2
    assert "task='nosuch' is invalid: allowed one of ['record_lookup', 'induction', 'text_record_lookup'" in capsys.readouterr().err
    assert main([*common, "--task", f"{__name__}:ToyTask", "--task-option", "colour=3"]) == 2
    assert "options ['colour'] are invalid" in capsys.readouterr().err
    assert main([*common, "--task", f"{__name__}:NoSuch"]) == 2
    assert "has no 'NoSuch'" in capsys.readouterr().err


def test_library_tasks_round_trip_through_their_cards():
    from phaseinterp.backends.tiny import word_tokenizer

    assert [k.name for k in task_kinds()][:len(BUILTIN_TASKS)] == list(BUILTIN_TASKS)
    tasks = [RecordLookup(vocab_size=64, n_records=8, n_demos=2), make_task("record_lookup",
             variant="multitoken", vocab_size=128, n_records=8, n_demos=2, protocol="insequence"),
             Induction(seq_len=48, min_distance=20, vocab=(10, 200)),
             make_task("text_record_lookup", tokenizer=word_tokenizer(), n_records=16, n_demos=2)]
    for task in tasks:
        assert isinstance(task, Task)
        card = json.loads(json.dumps(task.card()))
        if card["task"] == "text_record_lookup":
            card["tokenizer"] = word_tokenizer()  # built in memory: no folder to name
        again = task_from_card(card)
        assert json.loads(json.dumps(again.card(), default=str)) == json.loads(json.dumps(task.card(), default=str))
        a, b = task.sample(2, 4, seed=3), again.sample(2, 4, seed=3)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.residue, b.residue)
    # a card without "task" is a trained checkpoint's matched record lookup
    assert task_from_card({"vocab_size": 64, "n_records": 8, "n_demos": 2}).card() == tasks[0].card()


def test_register_task_refuses_a_taken_name_and_a_bad_task():
    with pytest.raises(ValueError, match="task 'induction' is already registered"):
        register_task(TaskKind("induction", Induction))
    with pytest.raises(ValueError, match="is invalid: allowed an object with name, sample"):
        make_task(f"{__name__}:StandIn")
    calib = Induction(seq_len=48, min_distance=20, vocab=(10, 200))
    assert not torch.equal(calib.sample(2, 4).tokens, calib.sample(2, 4, split="calibration").tokens)


def test_the_trainers_evaluation_takes_a_task_defined_here():
    from phaseinterp.train.evaluate import phase_curve

    class Oracle(StandIn):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))  # phase_curve runs where the parameters are

    out = phase_curve(Oracle(), None, modulus=4, n_per_residue=6, task=ToyTask(value_len=2), batch_size=7)
    assert out["accuracy"] == [0.0, 0.0, 1.0, 1.0] and out["n"] == [6] * 4
    assert out["task"]["task"] == "toy" and out["task"]["value_len"] == 2
    with pytest.raises(ValueError, match="task overrides \\['n_records'\\] are invalid"):
        phase_curve(Oracle(), None, modulus=4, task=ToyTask(), n_records=4)


def test_patching_and_gate_attribution_run_a_task_defined_here():
    from phaseinterp.interventions import Pairing, activation_patching, gate_attribution

    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    clean = ToyTask(vocab_size=512, alternatives=True).sample(6, 4)
    corrupt = ToyTask(vocab_size=512, alternatives=True).sample(6, 4, seed=1)
    pmap = activation_patching(model, Pairing.custom(clean, corrupt), unit="z", level="layer", n_boot=20,
                               progress=False)
    assert pmap.shape == (2, 1, 4) and np.isfinite(pmap.values).all()
    assert pmap.meta["task"]["task"] == "toy"
    attr = gate_attribution(model, clean, override="uniform", progress=False)
    assert attr.attribution.values.shape[-1] == 4 and np.isfinite(attr.exact.values).all()
