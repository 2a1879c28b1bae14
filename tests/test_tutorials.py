"""The tutorials run top to bottom, and each notebook is exactly its jupytext source.

Every `tutorials/NN_topic.ipynb` is paired with a `py:percent` source `tutorials/NN_topic.py`
(edit the .py, then `jupytext --sync tutorials/*.py`). The notebooks are executed with nbclient in a
fresh `python3` kernel: ipykernel registers that kernel spec on install, and jupyter_client falls
back to ipykernel's own spec (this interpreter) where none is registered, so nothing needs setting
up on a fresh machine beyond `pip install -e ".[test]"`.
"""

from __future__ import annotations

import time
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))
TOPICS = ["01_quickstart", "02_hooks_and_gates", "03_knockout_maps", "04_patching_and_attribution",
          "05_training", "06_huggingface_nnsight", "07_theory", "08_mitigations"]
TIMEOUT_S = 300  # per cell; each tutorial takes well under a minute here
#: Tutorials that run a real model over long prose: 10 to 17 minutes on two CPU cores, so `-m slow` runs them.
SLOW = {"12_prose_needle"}


def _cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def test_every_topic_has_a_source_and_a_notebook():
    assert [p.stem for p in SOURCES] == [p.stem for p in NOTEBOOKS], "every .py needs its .ipynb and back"
    assert set(TOPICS) <= {p.stem for p in SOURCES}


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_matches_its_jupytext_source(source: Path):
    notebook = source.with_suffix(".ipynb")
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    from_source = jupytext.read(source)
    assert _cells(nb) == _cells(from_source), (
        f"{notebook.name} has drifted from {source.name}: run `jupytext --sync tutorials/{source.name}`")
    assert nb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent", "notebook is not paired"
    assert nb.metadata.kernelspec.name == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{notebook.name} holds outputs: strip them"
    first_code = next(c.source for c in from_source.cells if c.cell_type == "code")
    assert "torch.set_num_threads(1)" in first_code


@pytest.mark.parametrize("notebook", [pytest.param(p, marks=[pytest.mark.slow] if p.stem in SLOW else [])
                                      for p in NOTEBOOKS], ids=[p.stem for p in NOTEBOOKS])
def test_tutorial_runs(notebook: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the kernel inherits this environment
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' tempfile folders land here
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=TIMEOUT_S,
                            resources={"metadata": {"path": str(TUTORIALS)}})  # cwd as in `jupyter lab`
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any failing cell
    seconds = time.perf_counter() - start
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors
    if notebook.stem == "03_knockout_maps":  # a cell that displays a SpecializationMap shows its figure
        shown = [o for c in code if c.source.strip() == "kmap" for o in c.outputs if "text/html" in o.get("data", {})]
        assert shown and 'class="plotly-graph-div"' in shown[0]["data"]["text/html"]
    print(f"{notebook.stem}: {seconds:.1f} s")
