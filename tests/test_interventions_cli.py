"""`phaseinterp knockout` and `phaseinterp gates` end to end, in process: on a planted checkpoint
they must report its ground truth; on random presets and full attention they run or fail cleanly."""

import json

import pytest

from phaseinterp.analysis import SpecializationMap
from phaseinterp.cli import main
from phaseinterp.interventions import planted_model

SMALL = ["--n-per-residue", "8", "--n-records", "6", "--n-demos", "1", "--n-boot", "50"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "planted.safetensors"
    planted_model(32).save(str(path))
    task = {"vocab_size": 32, "n_records": 6, "n_demos": 1, "seq_len": None, "protocol": "prefix"}
    path.with_suffix(".json").write_text(json.dumps({"format": "phaseinterp-card-v1", "data": {"eval_task": task}}))
    return path


def test_knockout_command_reports_the_planted_owners(checkpoint, tmp_path, capsys):
    out = tmp_path / "ko"  # the task comes from the checkpoint's card (64 records would not fit vocab 32)
    # 600 replicates: p can reach 2/601, under BH's q * 2 / 8 for the two planted cells of 8 (default: BH-FDR)
    assert main(["knockout", str(checkpoint), "--n-per-residue", "8", "--n-boot", "600", "--patching",
                 "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sig = summary["significance"]
    assert (sig["which"], sig["rule"], sig["cells"], sig["fdr"], sig["uncorrected"]) == ("fdr", "BH-FDR q=0.05", 8, 2, 2)
    assert "note" not in sig and summary["patch_mapping"]["significance"]["rule"] == "BH-FDR q=0.05"
    assert sig["not_estimable"] == 0 and "note_estimable" not in sig
    assert "not significant, BH-FDR q=0.05" in (out / "knockout_map.html").read_text()
    assert summary["source"]["task"]["from_card"] and summary["source"]["task"]["n_records"] == 6
    assert summary["coverage"] == {"L0.KV0": [0], "L0.KV1": [2]} and summary["uncovered_residues"] == [1, 3]
    assert summary["clean"]["worst"] == 0.0 and summary["method"] == "incremental"
    assert summary["patch_mapping"]["quantity"] == "absolute accuracy change (pp)"  # restored, with intervals
    assert summary["patch_mapping"]["coverage"] == {"L0.KV0": [0], "L0.KV1": [2]}
    smap = SpecializationMap.load(out / "knockout_map.json")
    assert smap.sel(layer=0, kv_head=0)[0] == -100.0 and smap.meta["source"]["checkpoint"] == str(checkpoint)
    for name in ("knockout_map.csv", "knockout_map.html", "clean_curve.json", "patch_mapping.json", "patch_phase.html"):
        assert (out / name).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "coverage (knockout <= -50 pp, significant: BH-FDR q=0.05)" in printed
    assert "significant cells: 2 of 8 at BH-FDR q=0.05, 2 with the uncorrected interval" in printed
    # each planted head owns one residue of 4: -25 pp pooled, significant over 2 units
    assert [(u["unit"], u["value"], u["significant_fdr"]) for u in summary["pooled"]] == [("L0.KV0", -25.0, True),
                                                                                          ("L0.KV1", -25.0, True)]
    assert "pooled over residues (each unit tested once, BH-FDR q=0.05 over 2 units): 2 significant: L0.KV0 -25.0 pp" in printed


def test_self_calibrated_knockout_command_finds_the_same_owners(checkpoint, tmp_path, capsys):
    out = tmp_path / "self"
    assert main(["knockout", str(checkpoint), "--n-per-residue", "8", "--n-boot", "50", "--self-calibration",
                 "--significance", "uncorrected", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["coverage"] == {"L0.KV0": [0], "L0.KV1": [2]}  # uncorrected: 50 replicates are enough
    assert summary["significance"]["rule"] == "uncorrected 95% interval"
    assert "significant: uncorrected 95% interval" in capsys.readouterr().out
    fdr = tmp_path / "fdr"  # the default rule with 50 replicates: p >= 2/51, so BH over 8 cells calls none, and says why
    assert main(["knockout", str(checkpoint), "--n-per-residue", "8", "--n-boot", "50", "--self-calibration",
                 "--out", str(fdr)]) == 0
    summary = json.loads((fdr / "summary.json").read_text())
    assert summary["coverage"] == {"L0.KV0": [], "L0.KV1": []} and summary["significance"]["uncorrected"] == 2
    assert "a lone effect cannot pass BH-FDR" in summary["significance"]["note"] and "--n-boot 319" in capsys.readouterr().out
    assert main(["knockout", str(checkpoint), "--n-per-residue", "8", "--fdr-q", "1.5", "--out", str(tmp_path / "q")]) == 2
    assert "q=1.5 out of range (0, 1)" in capsys.readouterr().err
    assert SpecializationMap.load(out / "knockout_map.json").meta["calibration"]["kind"] == "self"
    assert main(["knockout", str(checkpoint), "--n-per-residue", "8", "--self-calibration", "--n-calib", "4",
                 "--out", str(tmp_path / "both")]) == 2
    assert "--n-calib and --self-calibration" in capsys.readouterr().err


def test_one_example_per_residue_gives_values_without_intervals_and_says_so(checkpoint, tmp_path, capsys):
    out = tmp_path / "one"
    assert main(["knockout", str(checkpoint), "--n-per-residue", "1", "--n-boot", "600", "--out", str(out)]) == 0
    sig = json.loads((out / "summary.json").read_text())["significance"]
    smap = SpecializationMap.load(out / "knockout_map.json")
    estimable = ~smap.masked & (smap.values == smap.values)
    assert sig["not_estimable"] == int(estimable.sum()) > 0 and sig["fdr"] == sig["uncorrected"] == 0
    assert "--n-per-residue 2 or more" in capsys.readouterr().out


def test_gates_command_reports_statistics_cycling_attribution_and_dynamics(checkpoint, tmp_path):
    out = tmp_path / "gates"
    assert main(["gates", str(checkpoint), *SMALL, "--deltas", "1", "--dynamics", str(checkpoint), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert all(abs(g["static"] - 1) < 1e-6 and abs(g["per_window"] - 1) < 1e-6 for g in summary["gate_stats"])
    cyc = summary["cycling"][0]
    assert cyc["delta"] == 1 and cyc["r2"] == pytest.approx(1.0) and cyc["boundary_actual"] == [0.0]
    assert summary["attribution"]["spearman"] > 0.8
    for name in ("gate_plane.html", "gate_profiles.html", "cycling.html", "cycling.csv", "attribution.csv",
                 "attribution_vs_exact.html", "dynamics.csv", "dynamics.html"):
        assert (out / name).stat().st_size > 0


def test_commands_on_random_presets_and_full_attention(tmp_path, capsys):
    args = ["--n-per-residue", "2", "--n-records", "8", "--n-demos", "1", "--n-boot", "20"]
    assert main(["knockout", "--preset", "tiny-full", *args, "--out", str(tmp_path / "a")]) == 2
    assert "full attention (no strides): give --modulus" in capsys.readouterr().err
    assert main(["knockout", "--preset", "tiny-full", "--seed", "1", "--modulus", "4", "--level", "head",
                 "--method", "hooks", *args, "--out", str(tmp_path / "b")]) == 0
    m = SpecializationMap.load(tmp_path / "b" / "knockout_map.json")
    assert m.dims == ("layer", "head", "residue") and m.shape == (2, 4, 4)
    assert main(["gates", "--preset", "tiny-full", "--modulus", "4", *args, "--out", str(tmp_path / "c")]) == 2
    assert "no compressed layers" in capsys.readouterr().err
    assert main(["gates", "--preset", "tiny-w4s4", *args, "--no-attribution", "--out", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "cycling.json").exists() and not (tmp_path / "d" / "attribution.json").exists()
    assert main(["knockout", "missing.safetensors", *args, "--out", str(tmp_path / "e")]) == 2
    assert "no checkpoint at 'missing.safetensors'" in capsys.readouterr().err
