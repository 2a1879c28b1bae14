"""Resumable long work: `phaseinterp sweep` and `phaseinterp knockout --patching` killed with SIGKILL at
several points (after the first unit, mid-way, in the middle of writing a unit, inside each
patching map) and continued with `--resume` give result files equal to an uninterrupted run's, bit
for bit; the journal refuses
other inputs; the API's `resume=` does the same for `phase_sweep` and `knockout_map`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from phaseinterp.cli import main
from tests.helpers import KILL_AT_JOURNAL_WRITE

ROOT = Path(__file__).resolve().parents[1]

# The verb as a subprocess, killed with SIGKILL by itself at a chosen point of its journal writes
# (deterministic kill points; the computation itself is the CLI's, untouched).
KILLER = ("import sys\nmode, k, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]\n" + KILL_AT_JOURNAL_WRITE
          + "from phaseinterp.cli import main\nsys.exit(main(argv))\n")

VERBS = {
    # a model whose correctness varies from example to example and from head to head (a unit taken
    # from the wrong place would show); 32 rows in minibatches of 4: 8 units (mod 4, not the card's 8: half the rows)
    "sweep": (["sweep", "zoo-csa-s1", "--modulus", "4", "--n-per-residue", "8", "--batch-size", "4", "--n-boot", "50", "--n-perm", "50",
               "--no-progress"], 8, ["curve.json", "curve.csv"]),
    # 8 query heads, one per forward (--max-rows 1): 8 units, then 8 of each patching map
    "knockout": (["knockout", "zoo-csa-s1", "--modulus", "4", "--n-per-residue", "4", "--level", "head", "--max-rows", "1", "--n-boot", "50",
                  "--patching"], 24,
                 ["summary.json", "knockout_map.json", "knockout_map.csv", "clean_curve.json", "patch_mapping.json",
                  "patch_mapping.csv", "patch_phase.json", "patch_phase.csv"]),
}
# (verb, how, k): killed after its k-th unit file, or while writing it
KILLS = [("sweep", "after", 1), ("sweep", "after", 4), ("sweep", "during", 6),
         ("knockout", "after", 1), ("knockout", "during", 6), ("knockout", "after", 12), ("knockout", "during", 20)]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _comparable(path: Path):
    """A result file without what may differ between runs: `resumed` (what this run took from its
    journal) and the library versions."""
    if path.suffix != ".json":
        return path.read_bytes()
    data = json.loads(path.read_text())

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("resumed", "versions")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(data)


@pytest.mark.parametrize("verb", list(VERBS))
def test_killed_runs_resume_bit_identical(tmp_path, verb):
    argv, n_units, files = VERBS[verb]
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    procs = {}
    for _, mode, k in [kill for kill in KILLS if kill[0] == verb]:  # all kill points at once: the imports dominate
        out = tmp_path / f"{mode}{k}"
        procs[(mode, k)] = subprocess.Popen([sys.executable, str(script), mode, str(k), *argv, "--out", str(out)],
                                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
    whole = {f: _comparable(tmp_path / "whole" / f) for f in files}
    assert not (tmp_path / "whole" / ".journal").exists()  # removed once the result exists
    for (mode, k), proc in procs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
        out = tmp_path / f"{mode}{k}"
        done = [p for p in (out / ".journal").rglob("*.npz") if not p.name.startswith(".")]
        assert len(done) == (k if mode == "after" else k - 1)
        assert (out / ".lock").exists() and not (out / files[0]).exists()  # killed: stale lock, no result
        if mode == "during":
            assert list((out / ".journal").rglob(".*.tmp-*"))  # the half-written unit
        # without --resume the unfinished folder is refused (its journal is kept)
        assert main([*argv, "--out", str(out)]) == 2
        assert main([*argv, "--out", str(out), "--resume"]) == 0
        for f in files:
            assert _comparable(out / f) == whole[f], f"{verb} killed {mode} {k}: {f} differs"
        if verb == "sweep":
            resumed = [json.loads((out / "curve.json").read_text())["config"]["resumed"]]
        else:
            resumed = [json.loads((out / f).read_text())["meta"]["resumed"]
                       for f in ("knockout_map.json", "patch_mapping.json", "patch_phase.json")]
        assert sum(r[next(iter(r))] for r in resumed) == len(done) and sum(r["of"] for r in resumed) == n_units
        assert not (out / ".lock").exists() and not (out / ".journal").exists()
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def test_a_resumed_result_counts_the_time_its_journal_recorded(tmp_path):
    """Each journaled unit keeps its compute time, so a resumed sweep says how long the parts earlier runs
    computed took; units a journal holds without a time (written before it was kept) are counted apart."""
    import numpy as np

    from phaseinterp.interventions.planted import planted_model
    from phaseinterp.measure import phase_sweep
    from phaseinterp.measure.journal import SECONDS, Journal
    from phaseinterp.tasks import RecordLookup

    model = planted_model(64, stride=4, key_offsets=(0, 2))
    batch = RecordLookup(vocab_size=64, n_records=8, n_demos=2).sample(4, 4, seed=0)
    first = phase_sweep(model, batch, batch_size=4, resume=tmp_path / "j", progress=False, n_boot=20, n_perm=20)
    assert first.config["resumed"] == {"minibatches": 0, "of": 4, "seconds": 0.0}
    files = sorted((tmp_path / "j").glob("mb*.npz"))
    recorded = [float(np.load(f)[SECONDS]) for f in files]
    assert len(recorded) == 4 and min(recorded) > 0
    files[0].unlink()  # killed before its first minibatch was written: that one runs again
    again = phase_sweep(model, batch, batch_size=4, resume=tmp_path / "j", progress=False, n_boot=20, n_perm=20)
    assert again.config["resumed"] == {"minibatches": 3, "of": 4, "seconds": round(sum(recorded[1:]), 1)}
    assert np.array_equal(again.correct, first.correct)
    journal = Journal(tmp_path / "old", "sweep", {"x": "1"})
    journal.put("mb000000", correct=np.array([True]))  # no time recorded
    journal.put("mb000001", seconds=2.5, correct=np.array([False]))
    assert SECONDS not in journal.get("mb000000") and journal.get("mb000001")["correct"].tolist() == [False]
    assert journal.resumed("minibatches", 3) == {"minibatches": 2, "of": 3, "seconds": 2.5, "untimed": 1}
