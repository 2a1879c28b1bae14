"""The long-row experiment: its calibration rule, the GPU script's whole path on CPU (tiny runs), the
packing for the trip back, and the rendered page's freshness."""

import json
import tarfile

import pytest

from experiments.long_rows import calibration, gpu, pack, report, table
from experiments.long_rows.members import ARMS, SWEEP, recipe, table_runs


def _row(member, task, lr, learned, mean, warmup=100):
    return {"member": member, "task": list(task), "lr": lr, "warmup": warmup, "learned": learned, "mean": mean}


def test_the_rule_takes_the_setting_most_runs_learned_at_and_the_easiest_task_the_control_can_fail():
    t1, t2, t3 = calibration.TASKS[:3]
    rows = [_row("full", t1, 1e-3, True, 0.99), _row("full", t2, 1e-3, True, 0.88), _row("full", t3, 1e-3, True, 0.6),
            _row("w8s8", t1, 1e-3, False, 0.05), _row("full", t1, 2e-3, True, 0.9), _row("w8s8", t1, 2e-3, True, 0.4),
            _row("full", t2, 2e-3, False, 0.02)]
    c = calibration.choose(rows)
    assert (c["lr"], c["seq_len"], c["records"], c["vocab_size"], c["control_in_range"]) == (1e-3, *t2, True)  # 3 of 4 beat 2 of 3
    rows.append(_row("w8s8", t2, 2e-3, True, 0.3))  # now 3 of 4 each: the smaller learning rate
    assert calibration.choose(rows)["lr"] == 1e-3
    ceiling = [_row("full", t, 1e-3, True, 0.99) for t in calibration.TASKS]
    c = calibration.choose(ceiling)
    assert (c["seq_len"], c["records"], c["vocab_size"]) == calibration.TASKS[-1] and not c["control_in_range"]
    assert "exceeds 90% on every task" in c["notes"][0]
    unlearned = _row("full", calibration.TASKS[-1], 1e-3, False, 0.004)  # below 90%, but the control never learned it
    c = calibration.choose(ceiling[:-1] + [unlearned])
    assert (c["seq_len"], c["records"], c["vocab_size"]) == calibration.TASKS[-2] and "did not learn" in c["notes"][0]
    c = calibration.choose([unlearned])  # nothing learned: the table goes on, saying the control cannot be judged
    assert not c["control_in_range"] and any("learned no task" in n for n in c["notes"])
    with pytest.raises(ValueError, match="no 'full' calibration row at lr=0.001"):
        calibration.choose([_row("w8s8", calibration.TASKS[0], 1e-3, True, 0.5)])
    with pytest.raises(ValueError, match="rows=\\[\\] is invalid"):
        calibration.choose([])


def test_every_arm_and_sweep_pair_trains_by_one_recipe():
    runs = table_runs()
    assert len(runs) == len(set(runs)) == 4 * len(ARMS) + 2 * len(SWEEP) - 2  # W24/S12 is in both
    configs = {m: recipe(m, 0, records=56, lr=1e-3)[1] for m in {m for m, _ in runs}}
    assert {t.lr for t in configs.values()} == {1e-3}
    assert {(t.mixture.seq_len, t.mixture.max_records, t.batch_size, t.warmup_steps) for t in configs.values()} == {(256, 56, 32, 100)}
    assert {m: t.steps for m, t in configs.items() if t.steps != 8000} == {"w20s20": 9500, "w24s12": 11000}
    with pytest.raises(ValueError, match="seq_len=128 is invalid"):
        recipe("w8s8", 0, records=24, lr=1e-3, seq_len=128)


def test_the_gpu_script_runs_its_whole_path_on_cpu(tmp_path):
    out = tmp_path / "run"
    assert gpu.main(["--out", str(out), "--device", "cpu", "--smoke", "--eval-examples", "2", "--jobs", "1", "--workers", "0",
                     "--members", "full"]) == 0
    cal = json.loads((out / "calibration.json").read_text())
    assert len(cal["rows"]) == len(calibration.GRID) and cal["choice"]["lr"] in {g[2] for g in calibration.GRID}
    rows = json.loads((out / "results" / "zoo.json").read_text())["rows"]
    assert sorted({r["model"] for r in rows}) == [f"long-full-s{s}" for s in range(4)]
    assert {r["protocol"] for r in rows} == {"prefix", "insequence"}
    files = pack.pack(out, tmp_path / "packed", max_mb=1.0, file_mb=0.5)
    with tarfile.open(files[0]) as tar:
        assert "calibration.json" in tar.getnames() and not any(n.endswith(".safetensors") for n in tar.getnames())
    shipped = sum(len(tarfile.open(f).getnames()) for f in files[1:])
    left = (tmp_path / "packed" / "left_out.txt").read_text().split()
    assert shipped + len(left) == len(list((out / "checkpoints").glob("*.safetensors")))
    assert files[1:] and sum(f.stat().st_size for f in files) <= 1.0 * 2 ** 20
    assert table.main([str(out / "results"), "--out", str(tmp_path / "table"), "--n-boot", "50"]) == 0
    text = (tmp_path / "table" / "table.md").read_text()
    assert "| full |  | 4 | 0 of 4 [0, 49] |" in text  # four smoke seeds, none learned, its Wilson interval
    assert "| w8s8 | 50.6 / 5.7 / 75.3 (W8/S8, 1 KV head) | not trained yet (4 seeds planned) |" in text
    assert table.main([str(out / "results"), "--out", str(tmp_path / "table"), "--n-boot", "50", "--check"]) == 0


def test_the_calibration_page_is_rendered_from_its_files():
    assert report.stale(report.build()) == [], "run `python -m experiments.long_rows.report`"
