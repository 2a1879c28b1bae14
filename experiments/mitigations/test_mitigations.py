"""The mitigation study (experiments/mitigations): its summary, its quick mode end to end, and
that its variants differ from the shipped baseline in one thing only."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from experiments.mitigations.experiment import best_mitigation, shipped_match, Settings, summarize
from experiments.mitigations.run import main
from experiments.mitigations.variants import VARIANTS, entries_per_token, variant


def test_summary_ranks_variants_by_gap_and_charges_extra_memory():
    rows = pd.DataFrame([
        {"variant": v, "seed": s, "mean": 0.5, "worst": w, "gap_pp": g, "gap_heldout": g - 1, "gap_lo": g - 5, "gap_hi": g + 5,
         "p_periodic": 0.5, "entries_per_token": e, "train_cpu_s": 1.0}
        for v, e, gaps, worsts in [("baseline", 0.25, (90, 80), (0.1, 0.2)), ("multi-offset", 0.5, (40, 50), (0.5, 0.4)),
                                   ("entropy", 0.25, (70, 60), (0.2, 0.3)), ("random-offsets", 0.25, (2, 3), (0.1, 0.09)),
                                   ("full", 1.0, (1, 2), (0.9, 0.9))]
        for s, g, w in zip((0, 1), gaps, worsts)])
    rows.loc[rows.variant == "random-offsets", "mean"] = 0.1  # never learned: its tiny gap must not win
    summary = summarize(rows).set_index("variant")
    assert summary.loc["multi-offset", "gap_pp"] == 45 and summary.loc["multi-offset", "gap_reduction_pp"] == 40
    assert summary.loc["multi-offset", "reduction_per_extra_entry"] == pytest.approx(40 / 0.25)
    assert np.isnan(summary.loc["entropy", "reduction_per_extra_entry"])  # no extra memory
    assert (summary.loc["entropy", "gap_min"], summary.loc["entropy", "gap_max"]) == (60, 70)
    assert (summary.loc["entropy", "gap_heldout"], summary.loc["entropy", "gap_lo"]) == (64, 55)
    assert summary.loc["random-offsets", "learned"] == 0 and summary.loc["multi-offset", "learned"] == 2
    assert best_mitigation(summary.reset_index()) == "multi-offset"  # full attention is the reference, not a mitigation


def test_the_study_in_quick_mode_writes_table_figure_and_maps(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["--quick", "--variants", "baseline", "multi-offset", "--seeds", "0", "--out", str(out),
                 "--no-reuse-shipped"]) == 0
    data = json.loads((out / "mitigations.json").read_text())
    assert [r["variant"] for r in data["rows"]] == ["baseline", "multi-offset"]
    assert [r["entries_per_token"] for r in data["rows"]] == [0.25, 0.5]
    assert data["settings"]["steps"] == 30 and data["best"] == "multi-offset"
    assert set(data["knockout"]) == {"baseline", "multi-offset"}
    assert "Plotly.newPlot" in (out / "mitigations.html").read_text()
    assert (out / "knockout" / "multi-offset.json").is_file()
    assert "| multi-offset | 1 (" in (out / "mitigations.md").read_text()
    with pytest.raises(SystemExit):  # argparse rejects unknown variants
        main(["--variants", "nope", "--out", str(out)])
    assert main(["--quick", "--seeds", "0", "0", "--out", str(out)]) == 2
    assert "seeds=(0, 0) is invalid: allowed distinct seeds" in capsys.readouterr().err


def test_variants_change_one_thing_of_the_baseline_and_the_shipped_runs_are_reused():
    base_model, base_train = variant("baseline").configs(0)
    for name, v in VARIANTS.items():
        model_cfg, tcfg = v.configs(0)
        if name != "full":
            assert tcfg.replace(mitigation=base_train.mitigation) == base_train  # same data, steps, schedule, seed
        assert (model_cfg == base_model) == (not v.model_changes and name != "full")
    assert entries_per_token(variant("multi-offset").configs(0)[0]) == 2 * entries_per_token(base_model) == 0.5
    assert shipped_match("baseline", 0, Settings()) is not None  # assets/checkpoints/w4s4: same recipe and seed
    assert shipped_match("baseline", 0, Settings(steps=30)) is None and shipped_match("coverage", 0, Settings()) is None
    with pytest.raises(ValueError, match=re.escape("unknown variant 'nope': allowed [")):
        variant("nope")
