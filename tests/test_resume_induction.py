"""The training-free compression sweep (`analysis.induction_sweep`) is resumable: a run of several
settings killed with SIGKILL after a unit or while writing one, then run again with the same
journal root, gives every setting's per-row correctness equal to an uninterrupted run's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from phaseinterp.analysis.induction_sweep import SettingJournals, induction_correct
from phaseinterp.backends.kv_compression import KVCompression
from phaseinterp.tasks.induction import induction_batch
from tests.helpers import KILL_AT_JOURNAL_WRITE

ROOT = Path(__file__).resolve().parents[1]

# A tiny random Llama on a 28-token vocabulary, so that top-1 correctness varies from row to row; 8
# prompts of 11 rows, 44 rows per forward: 2 minibatches per setting, 6 units in all.
BASE = r"""
import sys
import numpy as np, torch
from transformers import LlamaConfig, LlamaForCausalLM
from phaseinterp.backends.kv_compression import KVCompression
from phaseinterp.tasks.induction import induction_batch

def model():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()

SPECS = [None, KVCompression(4, 4, "mean", local=2), KVCompression(4, 4, "score", "first", local=2)]
BATCH = induction_batch(8, 12, 2, vocab=(4, 32), seed=3)

def run(resume):
    from phaseinterp.analysis.induction_sweep import induction_correct
    m = model()
    return np.stack([induction_correct(m, BATCH, s, resume=resume).numpy() for s in SPECS])

"""

STUDY = (BASE + "if __name__ == '__main__':\n    mode, k, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]\n"
         + textwrap.indent(KILL_AT_JOURNAL_WRITE, "    ") + "    run(root)\n")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "study.py"
    path.write_text(STUDY)
    sys.path.insert(0, str(path.parent))
    try:
        import study as module
    finally:
        sys.path.remove(str(path.parent))
    return path, module


def test_the_tiny_study_is_not_trivial(study):
    correct = study[1].run(None)
    assert correct.shape == (3, 88)
    assert 0 < correct.sum() < correct.size  # a unit taken from the wrong place would show
    assert not (correct[0] == correct[1]).all() or not (correct[0] == correct[2]).all()


@pytest.mark.parametrize("mode,k", [("after", 1), ("during", 3), ("after", 5)])
def test_a_killed_sweep_resumes_to_the_uninterrupted_result(study, tmp_path, mode, k):
    path, module = study
    root = tmp_path / "journal"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(path), mode, str(k), str(root)], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    kept = sorted(p.name for p in root.rglob("*.npz") if not p.name.startswith("."))
    assert len(kept) == (k if mode == "after" else k - 1)

    reference = module.run(None)
    journals = SettingJournals(root, module.model())
    resumed = np.stack([induction_correct(module.model(), module.BATCH, s, resume=journals).numpy() for s in module.SPECS])
    np.testing.assert_array_equal(resumed, reference)
    assert (journals.taken, journals.units) == (len(kept), 6)
    assert not list(root.rglob(".*.tmp-*"))  # the half-written unit was removed


def test_a_journal_of_other_weights_is_refused(study, tmp_path):
    module = study[1]
    induction_correct(module.model(), module.BATCH, module.SPECS[1], resume=tmp_path)
    other = module.model()
    with torch.no_grad():
        other.model.layers[0].self_attn.q_proj.weight.add_(1e-3)
    with pytest.raises(ValueError, match="different: model"):
        induction_correct(other, module.BATCH, module.SPECS[1], resume=tmp_path)


def test_settings_and_batches_get_their_own_journals(study, tmp_path):
    module = study[1]
    journals = SettingJournals(tmp_path, module.model())
    m = module.model()
    for spec in module.SPECS:
        induction_correct(m, module.BATCH, spec, resume=journals)
    induction_correct(m, induction_batch(8, 12, 2, vocab=(4, 32), seed=4), None, resume=journals)
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 4
    assert (journals.taken, journals.units) == (0, 8)


def test_the_spec_is_part_of_the_journal_key(study, tmp_path):
    journals = SettingJournals(tmp_path, study[1].model())
    a = journals.journal(study[1].BATCH, KVCompression(4, 4, "mean", local=2), 44).folder
    b = journals.journal(study[1].BATCH, KVCompression(4, 4, "mean", local=3), 44).folder
    assert a != b
