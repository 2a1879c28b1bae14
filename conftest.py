"""Shared by the tests and the docstring examples (collected from `phaseinterp/` with doctest):
every example runs as written against the names below, in a fresh temporary folder."""

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import beartype  # noqa: E402,F401  (before nnsight, see RECIPES.md)
import pytest  # noqa: E402
from jaxtyping import install_import_hook  # noqa: E402

#: Packages whose annotations (jaxtyping shapes and plain types) are checked at every call in the
#: tests: a function called with, or returning, the wrong shape or type fails the test that called it.
CHECKED = ["phaseinterp.model", "phaseinterp.measure", "phaseinterp.interventions", "phaseinterp.analysis"]
install_import_hook(CHECKED, "beartype.beartype")

import torch  # noqa: E402

#: Deprecated alias modules (`sys.modules[__name__] = ...`, issue 42's moves): doctest collection would import them
#: under their old file and fail on the real module's `__file__`; their code is collected at its new path.
_HERE = Path(__file__).parent
collect_ignore = [str(p.relative_to(_HERE)) for p in (_HERE / "phaseinterp").rglob("*.py")
                  if "sys.modules[__name__] = " in p.read_text()]

torch.set_num_threads(1)


@pytest.fixture
def unchecked():
    """Tests of bad input call the library as users do, without the runtime type checker, so that
    they meet the library's own error (the checker would reject a 1-D token tensor first)."""
    from jaxtyping import config

    config.update("jaxtyping_disable", True)
    yield
    config.update("jaxtyping_disable", False)


@pytest.fixture(autouse=True)
def _doctest_setup(request, doctest_namespace, tmp_path, monkeypatch):
    """Docstring examples see a tiny random W4/S4 model (`model`, `backend`), a record-lookup task
    with a batch mod 4 (`task`, `batch`, `calib`, `tokens`, `qpos`) and run in a temporary folder."""
    if type(request.node).__name__ != "DoctestItem":
        yield
        return
    import phaseinterp
    from phaseinterp import HookedCompressedTransformer, preset
    from phaseinterp.backends import Read, Replace, SetGate, Unit, backend_for
    from phaseinterp.tasks import RecordLookup

    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0).eval()
    task = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=8, n_demos=2)
    batch = task.sample(2, 4, seed=0)
    doctest_namespace.update(torch=torch, phaseinterp=phaseinterp, model=model, backend=backend_for(model), task=task,
                             batch=batch, calib=task.sample(2, 4, seed=0, split="calibration"), tokens=batch.tokens,
                             qpos=batch.query_pos, Unit=Unit, Replace=Replace, SetGate=SetGate, Read=Read)
    monkeypatch.chdir(tmp_path)
    yield
