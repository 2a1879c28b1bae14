"""No kind sniffing outside the families: code under `phaseinterp/` asks a model's Backend (or the
resolver, `phaseinterp.families.resolve`) what the model can do, and never looks at what kind of
object it holds with `hasattr(model, ...)`, `isinstance(model, ...)` or `getattr(model, "...")`.
Only `phaseinterp/families/` (where each family recognises its models and its Backend reads them)
may. The patterns are checked on themselves below, so the test cannot pass by matching nothing."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "phaseinterp"

#: `hasattr(model, ...)`, `isinstance(model, ...)`, `getattr(model, "...")` and
#: `getattr(getattr(model, ...), ...)`, on a variable called model (or model_ / _model).
SNIFF = re.compile(r"\b(?:hasattr|isinstance)\(\s*_?model_?\s*,|\bgetattr\(\s*(?:getattr\(\s*)?_?model_?\s*,")

#: Input checks that are not a model kind: the argument may be a precomputed tensor or a preset name.
INPUT_CHECKS = re.compile(r"isinstance\(\s*model\s*,\s*(?:Tensor|str)\s*\)")

#: Files of the KV-cache engine (issue 43 owns them): they probe an HF decoder's module layout
#: (`model.model.rotary_emb`, `lm_head`) to decide whether the cache path applies, and report why not.
ENGINE = {"backends/kv_cache.py", "backends/kv_compression.py"}


def sniffing_lines() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("families/") or rel in ENGINE:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if SNIFF.search(INPUT_CHECKS.sub("", code)):
                found.append(f"phaseinterp/{rel}:{i}: {line.strip()}")
    return found


def test_no_kind_checks_outside_the_families():
    found = sniffing_lines()
    assert not found, ("kind checks outside phaseinterp/families/ (ask the Backend, e.g. "
                       "`family_of_model(m).backend_class().trains_compiled()`, or `families.resolve`):\n"
                       + "\n".join(found))


def test_the_pattern_catches_each_form():
    for line in ['if hasattr(model, "sweep_info"):', "isinstance(model, HookedCompressedTransformer)",
                 'sweep = getattr(model, "sweep_logits", None)', 'getattr(getattr(model, "cfg", None), "strides")',
                 'with eval_mode(getattr(model, "model", model)):', 'if not getattr(model, "is_nsa", False):']:
        assert SNIFF.search(INPUT_CHECKS.sub("", line)), line
    for line in ["if isinstance(model, Tensor):", "preset(model) if isinstance(model, str) else d",
                 "hasattr(tokens, 'detach')", "model.sweep_info()"]:
        assert not SNIFF.search(INPUT_CHECKS.sub("", line)), line
