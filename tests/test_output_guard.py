"""Guarded output folders: one run per `--out` (a second is refused naming the folder and the
holder's pid; a lock left by a SIGKILLed run is taken over), a finished folder kept unless
`--overwrite`, output files whole or absent, and the journal refusing other inputs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.cli import main
from phaseinterp.measure import phase_sweep
from phaseinterp.measure.journal import Journal
from phaseinterp.measure.outputs import OutputLock, atomic_path
from phaseinterp.tasks import RecordLookup
from tests.test_resume import KILLER, VERBS, env

SWEEP = VERBS["sweep"][0]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_second_run_on_a_held_folder_is_refused_and_a_killed_holders_lock_is_taken_over(tmp_path, capsys):
    out = tmp_path / "out"
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    holder = subprocess.Popen([sys.executable, str(script), "pause", "2", *SWEEP, "--out", str(out)], env=env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while len(list((out / ".journal" / "sweep").glob("mb*.npz"))) < 2:  # the holder is mid-run
            assert holder.poll() is None and time.time() < deadline
            time.sleep(0.05)
        capsys.readouterr()
        assert main([*SWEEP, "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"--out {str(out)!r} is in use by another run (pid {holder.pid} on {socket.gethostname()}" in err
        assert not (out / "curve.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert json.loads((out / ".lock").read_text())["pid"] == holder.pid  # stale: nobody removed it
    assert main([*SWEEP, "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"took over the stale lock of {str(out)!r} (pid {holder.pid}" in err
    assert json.loads((out / "curve.json").read_text())["config"]["resumed"].items() >= {"minibatches": 2, "of": 8}.items()
    assert not (out / ".lock").exists()


def test_finished_folder_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*SWEEP, "--out", str(out)]) == 0
    first = (out / "curve.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main([*SWEEP, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {str(out)!r} holds a finished run (curve.json exists): allowed --overwrite" in err
    assert (out / "curve.json").stat().st_mtime_ns == first
    (out / ".figure.tmp-999.html").write_text("<html>half")  # a write a killed run left behind
    assert main([*SWEEP, "--out", str(out), "--overwrite"]) == 0
    assert (out / "curve.json").stat().st_mtime_ns > first
    assert sorted(p.name for p in out.iterdir()) == ["curve.csv", "curve.json", "figure.html", "plotly.min.js"]


def test_lock_rules(tmp_path):
    mine = OutputLock(tmp_path / "a").acquire()
    with pytest.raises(ValueError, match=rf"is in use by another run \(pid {os.getpid()} "):
        OutputLock(tmp_path / "a").acquire()
    mine.release()
    assert not (tmp_path / "a" / ".lock").exists()

    dead = _dead_pid()
    (tmp_path / "a" / ".lock").write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "started": "t0"}))
    with OutputLock(tmp_path / "a") as lock:
        assert f"pid {dead} on {socket.gethostname()}, started t0, is no longer running" in lock.note
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()

    # another host's pid means nothing here: never judged stale; nor is a lock we cannot read
    (tmp_path / "a" / ".lock").write_text(json.dumps({"pid": dead, "host": "elsewhere", "started": "t0"}))
    with pytest.raises(ValueError, match=f"pid {dead} on elsewhere"):
        OutputLock(tmp_path / "a").acquire()
    (tmp_path / "a" / ".lock").write_text("{trunc")
    with pytest.raises(ValueError, match="a process whose lock file cannot be read"):
        OutputLock(tmp_path / "a").acquire()


def test_atomic_path_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "x.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"half": ')
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        assert tmp.suffix == ".json" and tmp.parent == tmp_path
        tmp.write_text("{}")
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_journal_refuses_other_inputs_and_resume_api(tmp_path):
    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    task = RecordLookup(vocab_size=128, n_records=8, n_demos=1)
    batch = task.sample(4, modulus=4)
    kw = dict(batch_size=4, progress=False, n_boot=50, n_perm=50)
    first = phase_sweep(model, batch, resume=tmp_path / "j", **kw)
    assert first.config["resumed"] == {"minibatches": 0, "of": 4, "seconds": 0.0}
    again = phase_sweep(model, batch, resume=tmp_path / "j", **kw)
    assert again.config["resumed"].items() >= {"minibatches": 4, "of": 4}.items()
    assert torch.equal(torch.as_tensor(again.correct), torch.as_tensor(first.correct))
    other = HookedCompressedTransformer(preset("tiny-w4s4"), seed=1).eval()
    with pytest.raises(ValueError, match=r"was made from other inputs \(different: model\)"):
        phase_sweep(other, batch, resume=tmp_path / "j", **kw)
    with pytest.raises(ValueError, match=r"different: batch, settings"):
        phase_sweep(model, task.sample(4, modulus=4, seed=1), resume=tmp_path / "j", **{**kw, "batch_size": 2})
    with pytest.raises(ValueError, match="belongs to a 'sweep' run"):
        Journal(tmp_path / "j", "knockout", {})
    with pytest.raises(ValueError, match="resume= needs a model with weights"):
        phase_sweep(lambda t: torch.zeros(*t.shape, 128), batch, resume=tmp_path / "k", **kw)


def test_knockout_map_resume_api(tmp_path):
    from phaseinterp.interventions import knockout_map

    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    task = RecordLookup(vocab_size=128, n_records=8, n_demos=1)
    batch, calib = task.sample(4, modulus=4), task.sample(4, modulus=4, split="calibration")
    kw = dict(level="head", n_boot=50, max_rows=16)  # 16 rows: one unit per forward, one chunk each
    plain = knockout_map(model, batch, calib, **kw)
    first = knockout_map(model, batch, calib, resume=tmp_path / "j", **kw)
    n = len(plain.coords["layer"]) * len(plain.coords["head"])
    assert first.meta["resumed"] == {"chunks": 0, "of": n, "seconds": 0.0}
    (tmp_path / "j" / "chunk00001.npz").unlink()  # as if killed before that chunk was recorded
    again = knockout_map(model, batch, calib, resume=tmp_path / "j", **kw)
    assert again.meta["resumed"].items() >= {"chunks": n - 1, "of": n}.items()
    for m in (first, again):
        assert m.values.tobytes() == plain.values.tobytes()
        assert m.extras["acc_knockout"].tobytes() == plain.extras["acc_knockout"].tobytes()
    with pytest.raises(ValueError, match=r"different: settings"):
        knockout_map(model, batch, calib, resume=tmp_path / "j", **{**kw, "replacement": "zero"})
    with pytest.raises(ValueError, match=r"different: calibration"):
        knockout_map(model, batch, task.sample(4, modulus=4, seed=3, split="calibration"), resume=tmp_path / "j", **kw)


def test_activation_patching_resume_api(tmp_path):
    from phaseinterp.interventions import activation_patching, mapping_swap

    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    batch = RecordLookup(vocab_size=128, n_records=8, n_demos=1).sample(4, modulus=4)
    pair = mapping_swap(batch)
    kw = dict(unit="z", level="head", n_boot=50, max_rows=16)  # one unit per forward, one chunk each
    plain = activation_patching(model, pair, **kw)
    first = activation_patching(model, pair, resume=tmp_path / "j", **kw)
    n = first.meta["resumed"]["of"]
    assert n == len(plain.coords["layer"]) * len(plain.coords["head"]) and first.meta["resumed"]["chunks"] == 0
    (tmp_path / "j" / "chunk00002.npz").unlink()
    again = activation_patching(model, pair, resume=tmp_path / "j", **kw)
    assert again.meta["resumed"].items() >= {"chunks": n - 1, "of": n}.items()
    for m in (first, again):
        for a, b in [(m.values, plain.values), (m.extras["normalized"], plain.extras["normalized"]),
                     (m.extras["acc_patched"], plain.extras["acc_patched"])]:
            assert a.tobytes() == b.tobytes()
    with pytest.raises(ValueError, match=r"different: corrupt"):
        activation_patching(model, mapping_swap(batch, seed=5), resume=tmp_path / "j", **kw)


def test_gate_cycling_resume_api(tmp_path):
    from phaseinterp.interventions import gate_cycling

    import phaseinterp

    model = phaseinterp.load("zoo-csa-s1")  # trained: its curves, and so R^2, are not degenerate
    batch = RecordLookup(vocab_size=256, n_records=10, n_demos=6).sample(4, modulus=4)
    kw = dict(deltas=[1, 2], batch_size=4, n_boot=50)
    plain = gate_cycling(model, batch, **kw)
    first = gate_cycling(model, batch, resume=tmp_path / "j", **kw)
    assert [r.meta["resumed"] for r in first] == [{"baseline": 0, "cycled": 0, "of": 4}] * 2
    folders = sorted(p.name for p in (tmp_path / "j").iterdir())
    assert len(folders) == 3 and folders[0].endswith(".baseline")
    (tmp_path / "j" / folders[1] / "mb000002.npz").unlink()  # delta 1: as if killed before that minibatch
    again = gate_cycling(model, batch, resume=tmp_path / "j", **kw)
    assert [r.meta["resumed"] for r in again] == [{"baseline": 4, "cycled": 3, "of": 4},
                                                  {"baseline": 4, "cycled": 4, "of": 4}]
    for runs in (first, again):
        for r, p in zip(runs, plain):
            assert r.cycled.correct.tobytes() == p.cycled.correct.tobytes()
            assert r.baseline.correct.tobytes() == p.baseline.correct.tobytes() and r.r2 == p.r2  # not nan


def test_every_verb_with_out_is_refused_on_a_held_folder(tmp_path, capsys):
    out = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom phaseinterp.measure.outputs import "
                               "OutputLock\nOutputLock(sys.argv[1]).acquire()\nprint('held', flush=True)\ntime.sleep(600)",
                               str(out)], env=env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for verb in [["train", "--preset", "w4s4"], ["theory"], ["reproduce"], ["gates", "w4s4"], ["flip", "w4s4"],
                     ["knockout", "w4s4"], ["sweep", "w4s4"], ["needle", "smollm2"]]:
            assert main([*verb, "--out", str(out)]) == 2, verb
            assert f"is in use by another run (pid {holder.pid} " in capsys.readouterr().err, verb
    finally:
        holder.kill()
        holder.wait()
