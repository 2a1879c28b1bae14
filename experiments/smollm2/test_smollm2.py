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
