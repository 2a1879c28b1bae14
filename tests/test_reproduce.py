"""`phaseinterp reproduce --quick` on the shipped checkpoints writes a complete, offline report; the studies'
full report (`python -m experiments.report`) adds their sections to the library's (one run checks both)."""

import re

from experiments.report import main
from phaseinterp.commands.reproduce import ASSETS, _shipped


def test_quick_report_has_every_section_and_no_failures(tmp_path, capsys):
    assert len(_shipped(ASSETS)) >= 7, "the shipped checkpoints and their cards are part of the repo"
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    html = (tmp_path / "report.html").read_text()
    for title in ("Phase curves of the shipped checkpoints", "Knockout specialization maps", "Compression gates",
                  "Theory: gradient flow", "DeepSeek-V4 through nnsight", "Mitigations: toward phase-uniform",
                  "A pretrained model: training-free KV compression", "The zoo: phase curves", "Native Sparse Attention",
                  "Provenance"):
        assert title in html
    assert "This section failed" not in html
    assert len(html) > 3_000_000 and html.count("Plotly.newPlot") >= 8  # plotly.js inline: opens offline
    for name in ("full", "w4s4", "w8s8", "w8s4", "deepseek-kernel", "w4s4-uniform"):
        assert re.search(rf"<td>{re.escape(name)}</td>", html), name
