"""The SmolLM2 study's tables (experiments/smollm2) render from its result file; its quick mode
runs in tests/test_smollm2.py, next to the model it shares."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.smollm2.run import main, markdown

RESULTS = Path(__file__).resolve().parents[2] / "assets" / "results"


def test_the_shipped_tables_render_from_the_shipped_result_file(tmp_path):
    result = json.loads((RESULTS / "smollm2.json").read_text())
    assert markdown(result) == (RESULTS / "smollm2.md").read_text()
    (tmp_path / "smollm2.json").write_text((RESULTS / "smollm2.json").read_text())
    main(["--out", str(tmp_path), "--render-only"])
    assert (tmp_path / "smollm2.md").read_bytes() == (RESULTS / "smollm2.md").read_bytes()


def test_an_unfinished_journal_needs_resume_and_resume_opens_it(tmp_path):
    import argparse

    import torch

    from experiments.smollm2.run import JOURNAL, journals

    model = torch.nn.Linear(2, 2)
    args = argparse.Namespace(out=tmp_path, resume=False)
    assert journals(args, model) is None
    (tmp_path / JOURNAL / "induction-x").mkdir(parents=True)
    (tmp_path / JOURNAL / "induction-x" / "mb000000.npz").write_bytes(b"")
    try:
        journals(args, model)
    except SystemExit as err:
        assert "--resume" in str(err) and JOURNAL in str(err)
    else:
        raise AssertionError("an unfinished journal was ignored")
    opened = journals(argparse.Namespace(out=tmp_path, resume=True), model)
    assert opened.root == tmp_path / JOURNAL and opened.taken == 0
