"""Data-parallel training (DDP, gloo on CPU) gives the parameters of a 1-process run with the same
global batch. Two forked processes here; the `torchrun` path is the slow test below."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import traceback

import pytest
import torch
import torch.distributed as dist

import phaseinterp
from phaseinterp.config import CompressionConfig
from phaseinterp.train import Mixture, TrainConfig, train
from tests.helpers import tiny_cfg

MIX = Mixture(vocab_size=64, seq_len=40, min_records=2, max_records=5, min_demos=0, max_demos=2, lm_fraction=0.25,
              curriculum_steps=0)
CFG = tiny_cfg([CompressionConfig(window=4, stride=4, local_window=4), "full"], vocab_size=64, d_model=32, d_mlp=48)
TC = TrainConfig(steps=6, batch_size=8, lr=1e-2, warmup_steps=2, mixture=MIX, checkpoint_every=3, log_every=1, device="cpu")


def _worker(rank: int, world: int, tmp: str) -> None:
    torch.set_num_threads(1)
    report = {}
    try:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world)
        try:
            train(CFG, TC.replace(batch_size=7), f"{tmp}/bad", progress=False)
        except ValueError as e:
            report["bad_batch"] = str(e)
        result = train(CFG, TC, f"{tmp}/ddp", progress=False)
        report.update(step=result.step, world=result.world_size, losses=[m["loss"] for m in result.metrics])
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent
        report["error"] = traceback.format_exc()
    with open(f"{tmp}/rank{rank}.json", "w") as f:
        json.dump(report, f)
    os._exit(0)


def test_two_process_ddp_matches_one_process_with_the_same_global_batch(tmp_path):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(r, 2, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rep in reports:
        assert "error" not in rep, rep.get("error")
        assert "batch_size=7 is invalid: allowed a multiple of the number of processes (2)" in rep["bad_batch"]
        assert rep["step"] == 6 and rep["world"] == 2
    assert reports[0]["losses"] == reports[1]["losses"]  # logged metrics are all-reduced

    single = train(CFG, TC, tmp_path / "single", progress=False)
    ddp = phaseinterp.load(tmp_path / "ddp" / "checkpoints" / "step_000006.safetensors")
    for name, p in single.model.state_dict().items():
        torch.testing.assert_close(ddp.state_dict()[name], p, atol=1e-5, rtol=1e-4, msg=name)
    assert reports[0]["losses"] == pytest.approx([m["loss"] for m in single.metrics], rel=1e-5)
    changed = sum(not torch.equal(a, b) for a, b in zip(single.model.state_dict().values(),
                                                        phaseinterp.load(tmp_path / "ddp" / "checkpoints" / "step_000003.safetensors").state_dict().values()))
    assert changed > 0  # training moved the weights between checkpoints
    assert json.loads((tmp_path / "ddp" / "run.json").read_text())["world_size"] == 2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not installed")
def test_torchrun_cli_matches_one_process(tmp_path):
    spec = tmp_path / "mini.json"
    spec.write_text(json.dumps({"model": CFG.to_dict(), "train": TC.to_dict()}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["train", "--config", str(spec), "--no-progress", "--eval-examples", "0"]
    subprocess.run(["torchrun", "--standalone", "--nproc_per_node", "2", "-m", "phaseinterp.cli", *common,
                    "--out", str(tmp_path / "ddp")], check=True, env=env, timeout=600)
    subprocess.run([sys.executable, "-m", "phaseinterp.cli", *common, "--out", str(tmp_path / "one")],
                   check=True, env=env, timeout=600)
    a = phaseinterp.load(tmp_path / "ddp" / "checkpoints" / "step_000006.safetensors").state_dict()
    b = phaseinterp.load(tmp_path / "one" / "checkpoints" / "step_000006.safetensors").state_dict()
    for name in b:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4, msg=name)
