"""One engine: every intervention and sweep talks to a `Backend`; our model runs behind
`HookedBackend` (TransformerLens hooks and the incremental path inside it), and no code in
`interventions/` or `measure/` branches on the kind of model it was given."""

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from phaseinterp import HookedCompressedTransformer, preset
from phaseinterp.backends import HookedBackend, HookedNNsightBackend, NSABackend, resolve_model
from phaseinterp.interventions import activation_patching, gate_cycling, knockout_map, mapping_swap
from phaseinterp.measure import phase_sweep
from phaseinterp.model.nsa import NSAConfig, NSATransformer
from phaseinterp.tasks import RecordLookup

torch.set_num_threads(1)
PACKAGE = Path(__file__).resolve().parents[1] / "phaseinterp"
MODEL_KINDS = {"HookedCompressedTransformer", "NSATransformer", "Backend", "HookedBackend", "HookedNNsightBackend",
               "NSABackend", "DeepseekV4Backend", "HFCausalLMBackend"}


def kind_branches(path: Path) -> list[str]:
    """`is_backend(...)`, `isinstance(x, <a model or backend class>)` and `getattr(x, "is_nsa")` in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and node.id in ("is_backend", "is_hf_model"):
            found.append(f"{path.name}:{node.lineno} {node.id}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            if node.func.id == "isinstance" and len(args) == 2:
                names = {n.id for n in ast.walk(args[1]) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(args[1]) if isinstance(n, ast.Attribute)}
                if names & MODEL_KINDS:
                    found.append(f"{path.name}:{node.lineno} isinstance(..., {sorted(names & MODEL_KINDS)})")
            if node.func.id in ("getattr", "hasattr") and len(args) >= 2 and isinstance(args[1], ast.Constant) \
                    and args[1].value in ("is_nsa", "blocks", "hook_dict"):
                found.append(f"{path.name}:{node.lineno} {node.func.id}(..., {args[1].value!r})")
    return found


def test_no_branch_on_the_model_kind_in_interventions_or_measure():
    files = sorted((PACKAGE / "interventions").glob("*.py")) + sorted((PACKAGE / "measure").glob("*.py"))
    found = [hit for path in files for hit in kind_branches(path)]
    assert not found, "backend-specific behaviour belongs in a Backend method override:\n" + "\n".join(found)


def test_the_check_sees_a_branch(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("def f(model):\n    if isinstance(model, HookedCompressedTransformer) or is_backend(model):\n"
                    "        return getattr(model, 'is_nsa', False)\n")
    assert len(kind_branches(path)) == 3


@pytest.fixture(scope="module")
def w4s4():
    model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
    task = RecordLookup(vocab_size=model.cfg.vocab_size, n_records=8, n_demos=2)
    return model, task.sample(3, 4, seed=0), task.sample(3, 4, seed=0, split="calibration")


def test_resolve_model_puts_every_model_behind_its_backend_once(w4s4):
    model, _, _ = w4s4
    backend = resolve_model(model)
    assert type(backend) is HookedBackend and backend.model is model and backend.engine == "transformer_lens"
    assert resolve_model(backend) is backend
    generic = HookedNNsightBackend(model)
    assert resolve_model(generic) is generic and generic.engine == "nnsight"
    nsa = NSATransformer(NSAConfig(vocab_size=64, num_selected=1), seed=0)
    assert type(resolve_model(nsa)) is NSABackend
    oracle = lambda tokens: torch.zeros(*tokens.shape, 8)  # noqa: E731  a plain callable stays one (sweeps)
    assert resolve_model(oracle) is oracle
    with pytest.raises(ValueError, match=r"model of type function is invalid: allowed a phaseinterp.backends Backend or a model of a registered family"):
        resolve_model(oracle, require=True)


@pytest.mark.filterwarnings("ignore:patching resid changed no output")
def test_our_model_directly_and_behind_hooked_backend_is_one_path(w4s4):
    model, batch, calib = w4s4
    backend = HookedBackend(model)
    direct, via = knockout_map(model, batch, calib, n_boot=50), knockout_map(backend, batch, calib, n_boot=50)
    assert direct.meta["intervention"] == via.meta["intervention"]
    assert via.meta["intervention"]["engine"] == "transformer_lens" and via.meta["intervention"]["method"] == "incremental"
    assert via.meta["model"] == direct.meta["model"] and via.meta["model"]["d_model"] == model.cfg.d_model
    np.testing.assert_array_equal(direct.values, via.values)
    resid = activation_patching(backend, mapping_swap(batch), unit="resid", n_boot=50)  # any hook of our model
    assert resid.dims == ("layer", "position", "residue") and resid.meta["intervention"]["method"] == "hooks"
    curve = phase_sweep(backend, batch, progress=False, n_boot=50, n_perm=50)
    assert "logits" not in curve.config and curve.config["model"]["d_model"] == model.cfg.d_model  # full forwards


def test_the_generic_engine_agrees_on_our_model(w4s4):
    model, batch, calib = w4s4
    tl, nn = knockout_map(model, batch, calib, n_boot=50, method="hooks"), knockout_map(
        HookedNNsightBackend(model), batch, calib, n_boot=50)
    assert (tl.meta["intervention"]["engine"], nn.meta["intervention"]["engine"]) == ("transformer_lens", "nnsight")
    np.testing.assert_array_equal(tl.values, nn.values)
    d, v = gate_cycling(model, batch, deltas=[1], n_boot=50), gate_cycling(HookedNNsightBackend(model), batch,
                                                                            deltas=[1], n_boot=50)
    np.testing.assert_array_equal(d[0].cycled.correct, v[0].cycled.correct)


def test_a_sweep_keeps_the_callers_train_flag(w4s4):
    model, batch, _ = w4s4
    model.train()
    try:
        phase_sweep(model, batch, progress=False, n_boot=20, n_perm=20)
        knockout_map(model, batch, "self", n_boot=20)
        assert model.training
    finally:
        model.eval()
