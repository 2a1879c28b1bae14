"""What a newcomer sees at the command line (issue 45): `phaseinterp models` installed first and by
family with a count line (`--all` in full), a typo answered with the nearest names only, `sweep NAME`
at the modulus of the card's curve, no empty --out folder after a failed run, knockout's "wrote" line
naming every file, `print(smap)` with the coverage, the quick report's table without NaN, and no
TqdmWarning as a notebook's first output."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from phaseinterp import assets, catalog
from phaseinterp.cli import main
from phaseinterp.measure import SpecializationMap

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--n-per-residue", "2", "--n-boot", "20"]


@pytest.fixture
def core_only(tmp_path, monkeypatch):
    """An install like the wheel's, the core checkpoints only, beside the studies' listing (PHASEINTERP_HOME
    holding both, no checkout)."""
    home = tmp_path / "home" / "checkpoints"
    home.mkdir(parents=True)
    shutil.copy(ROOT / "assets" / catalog.LISTING, home.parent)
    for m in catalog.models():
        if m.core:
            for suffix in (".safetensors", ".json"):
                shutil.copy((ROOT / "assets" / m.path).with_suffix(suffix), home)
    monkeypatch.setattr(assets, "CHECKOUT", tmp_path / "no-checkout")
    monkeypatch.setattr(assets, "PACKAGED", tmp_path / "no-package-data")
    monkeypatch.setenv(assets.HOME_ENV, str(home.parent))


def test_models_installed_first_by_family_with_a_count_line(core_only, capsys):
    every = catalog.models()
    core = sorted(m.name for m in every if m.core)
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"installed ({len(core)}):" and lines[1] == "  core:"
    assert [line.split(":")[0].strip() for line in lines[2:2 + len(core)]] == core  # sorted names, in full
    assert lines[2 + len(core)] == f"not installed here ({len(every) - len(core)}):"
    families = sorted({m.group for m in every if not m.core})
    summary = lines[3 + len(core):-1]
    assert [line.split(":")[0].strip() for line in summary] == families  # one line per family, sorted
    zoo = next(line for line in summary if line.startswith("  zoo:"))
    assert zoo == f"  zoo: {sum(m.group == 'zoo' for m in every)} models (zoo-csa-s0 .. zoo-w8s8-uniform-s1)"
    assert lines[-1].startswith(f"{len(every)} shipped models, {len(core)} installed here; the other "
                                f"{len(every) - len(core)} from ")
    assert len(lines) < 30  # what the issue asked for: not a hundred lines in no order


def test_models_all_lists_every_model_in_full_installed_first(core_only, capsys):
    assert main(["models", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    described = [line.strip() for line in lines if line.startswith("    ")]
    every = catalog.models()
    assert len(described) == len(every)
    installed = [d.endswith("[installed]") for d in described]
    assert installed == sorted(installed, reverse=True)  # installed ones first
    assert "--all" not in lines[-1] and lines[-1].startswith(f"{len(every)} shipped models")
    groups = [line.strip().rstrip(":") for line in lines if line.startswith("  ") and not line.startswith("    ")]
    assert groups[0] == "core" and groups[1:] == sorted(groups[1:])


def test_a_typo_gets_the_nearest_names_not_the_whole_list(capsys, tmp_path):
    assert main(["sweep", "zoo-w8s8-s9", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "did you mean zoo-w8s8-s3, zoo-w8s8-s2, zoo-w8s8-s1?" in err
    assert "deepseek-kernel" not in err and "nsa-w8s8-k0-s0" not in err and len(err) < 500


def test_sweep_by_name_uses_the_cards_modulus(tmp_path, capsys):
    card = json.loads((ROOT / "assets/checkpoints/w4s4.json").read_text())
    assert card["phase_curve"]["task"]["modulus"] == 8  # the models list, the card and the API example use mod 8
    assert main(["sweep", "w4s4", "--out", str(tmp_path / "s"), "--n-perm", "20", "--no-progress", *SMALL]) == 0
    assert json.loads((tmp_path / "s" / "curve.json").read_text())["modulus"] == 8
    assert main(["sweep", "w4s4", "--modulus", "4", "--out", str(tmp_path / "m4"), "--n-perm", "20",
                 "--no-progress", *SMALL]) == 0  # an explicit --modulus still wins
    assert json.loads((tmp_path / "m4" / "curve.json").read_text())["modulus"] == 4


def test_a_failed_run_leaves_no_empty_out_folder(tmp_path, capsys):
    assert main(["sweep", "w4s5", "--out", str(tmp_path / "new" / "deeper")]) == 2
    assert not (tmp_path / "new").exists()  # every folder the run created is gone
    (tmp_path / "mine").mkdir()
    assert main(["sweep", "w4s5", "--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine").is_dir()  # a folder that was there stays
    assert main(["sweep", "w4s4", "--modulus", "0", "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()


def test_knockout_wrote_line_names_every_file(tmp_path, capsys):
    out = tmp_path / "k"
    assert main(["knockout", "w4s4", "--out", str(out), "--self-calibration", "--no-progress", *SMALL]) == 0
    wrote = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote "))
    named = set(wrote.split(": ", 1)[1].split(", "))
    files = {p.name for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert "clean_curve.html" in named and named == files - {"plotly.min.js"}


def test_print_of_a_map_shows_its_coverage():
    values = np.array([[[-97.0, 1.0, -60.0, 0.0]], [[-2.0, 0.0, 1.0, -1.0]]])
    smap = SpecializationMap(values, ("layer", "kv_head", "residue"),
                             {"layer": [0, 1], "kv_head": [0], "residue": [0, 1, 2, 3]},
                             lo=values - 5, hi=np.minimum(values + 5, np.where(values < -50, -1.0, 5.0)),
                             quantity="absolute accuracy change (pp)")
    text = str(smap)
    assert text.splitlines()[0] == repr(smap)
    assert text.splitlines()[1:] == ["  L0.KV0: -78 pp at residues 0, 2 (intervals exclude 0)"]
    flat = SpecializationMap(values / 10, smap.dims, smap.coords, quantity="absolute accuracy change (pp)")
    assert str(flat).splitlines()[1] == "  no unit reaches 50 pp at any residue (no test)"
    attribution = SpecializationMap(values, smap.dims, smap.coords, quantity="attribution to gate k (logit diff)", direction=0)
    assert str(attribution) == repr(attribution)


def test_quick_report_table_has_no_nan_and_readable_train_times():
    from phaseinterp.commands.reproduce import phase_curves

    ckpts = [ROOT / "assets/checkpoints" / f"{name}.safetensors" for name in ("w4s4", "w8s8", "full")]
    (table,) = phase_curves(ckpts, 4, 20).tables
    rows = table.set_index("checkpoint")
    assert re.fullmatch(r"\d+\.\d", rows.loc["w4s4", "periodicity pp"])  # S = 4 inside mod 8: two periods
    assert rows.loc["w8s8", "periodicity pp"] == "- (period 8 = modulus 8: one period, nothing to compare)"
    assert rows.loc["full", "periodicity pp"] == "- (full attention: no stride to test)"
    assert all(re.fullmatch(r"\d+ (s|min)|\d+\.\d h", t) for t in rows["train time"]), list(rows["train time"])
    assert "nan" not in table.to_string().lower()


def test_a_notebooks_first_output_is_no_tqdm_warning(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import torch\nfrom phaseinterp.progress import in_chunks\n"
        "in_chunks(lambda s: torch.arange(4)[s], 4, 2, progress=True, desc='demo').tolist()")])
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    text = json.dumps(outputs)
    assert "TqdmWarning" not in text and "IProgress" not in text, text
    assert outputs[-1]["data"]["text/plain"] == "[0, 1, 2, 3]"
