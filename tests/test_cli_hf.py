"""`phaseinterp knockout` and `phaseinterp gates` on HuggingFace DeepSeek-V4 checkpoints: a folder
written by `save_pretrained` and a checkpoint file the trainer writes, run through the backend with
the results the library calls give."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from phaseinterp.analysis import SpecializationMap, gate_statistics
from phaseinterp.backends import DeepseekV4Backend
from phaseinterp.backends.tiny import tiny_deepseek_v4
from phaseinterp.checkpoint import save_model
from phaseinterp.cli import build_parser, main
from phaseinterp.commands._common import load_model, make_task
from phaseinterp.interventions import knockout_map
from phaseinterp.families.deepseek_v4 import tiny_deepseek_v4_spec

SMALL = ["--n-per-residue", "1", "--n-records", "8", "--n-demos", "1", "--n-boot", "30"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    model = tiny_deepseek_v4(seed=0, index_topk=64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():  # non-uniform gates: cycling and attribution have something to move
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    path = tmp_path_factory.mktemp("hf") / "tiny-dsv4"
    model.save_pretrained(path)
    return path


def args_for(*argv: str):
    return build_parser().parse_args(list(argv))


def test_knockout_command_on_a_saved_hf_model_is_the_library_map(folder, tmp_path, capsys):
    out = tmp_path / "ko"
    assert main(["knockout", str(folder), *SMALL, "--out", str(out)]) == 0
    smap = SpecializationMap.load(out / "knockout_map.json")
    assert smap.dims == ("layer", "kv_head", "residue") and smap.coords["layer"] == [0, 1, 2, 3]
    assert smap.coords["kv_head"] == [0] and smap.coords["residue"] == list(range(16))  # lcm of strides 4 and 16
    assert smap.meta["model"]["kind"] == "deepseek_v4" and smap.meta["intervention"]["engine"] == "nnsight"
    args = args_for("knockout", str(folder), *SMALL, "--out", str(out))
    backend = load_model(args)
    task, modulus = make_task(args, backend)
    batch = task.sample(1, modulus, seed=0)
    calib = task.sample(1, modulus, seed=0, split="calibration")
    direct = knockout_map(backend, batch, calib, n_boot=30, seed=0)
    np.testing.assert_array_equal(smap.values, direct.values)
    np.testing.assert_array_equal(smap.lo, direct.lo)
    assert json.loads((out / "summary.json").read_text())["source"]["checkpoint"] == str(folder)
    assert "L3.KV0" in capsys.readouterr().out


def test_gates_command_on_a_saved_hf_model_covers_csa_and_hca(folder, tmp_path):
    out = tmp_path / "gates"
    assert main(["gates", str(folder), *SMALL, "--deltas", "1", "--layers", "1", "2", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    stats = pd.read_csv(out / "gate_stats.csv")
    assert stats[["layer", "window", "stride"]].values.tolist() == [[1, 8, 4], [2, 16, 16]]
    args = args_for("gates", str(folder), *SMALL, "--out", str(out))
    backend = load_model(args)
    task, modulus = make_task(args, backend)
    direct = gate_statistics(backend, task.sample(1, modulus, seed=0).tokens, layers=[1, 2])
    np.testing.assert_allclose(stats["static"], direct["static"], rtol=1e-6)
    assert [(c["stride"], c["delta"]) for c in summary["cycling"]] == [(4, 1), (16, 1)]
    assert summary["cycling"][0]["boundary"] == [3, 7, 11, 15] and summary["cycling"][1]["boundary"] == [15]
    assert np.isfinite(summary["attribution"]["spearman"])
    exact = SpecializationMap.load(out / "attribution_exact.json")
    assert exact.coords["layer"] == [1, 2] and exact.coords["branch"] == ["kv"] and exact.shape[3] == 16
    for name in ("gate_plane.html", "gate_profiles.csv", "cycling.csv", "cycling.html", "attribution.html"):
        assert (out / name).stat().st_size > 0


def test_hf_checkpoint_files_and_bad_folders(tmp_path, capsys):
    path = tmp_path / "hf.safetensors"
    save_model(tiny_deepseek_v4_spec().build(seed=0), path)
    backend = load_model(args_for("gates", str(path), "--out", str(tmp_path)))
    assert isinstance(backend, DeepseekV4Backend) and backend.cfg.strides == (4, 8) and backend.cfg.n_ctx == 128
    assert [c.cc.window for c in (backend.compression(0), backend.compression(1))] == [8, 8]  # HCA m=8, CSA 2m
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["knockout", str(empty), *SMALL, "--out", str(tmp_path / "x")]) == 2
    assert "is invalid: allowed a training run (with checkpoints/, written by phaseinterp train --out) or a HuggingFace " \
           "model folder" in capsys.readouterr().err
