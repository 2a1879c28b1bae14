"""A fast start: printing help and `import phaseinterp` import none of the heavy libraries (checked in
a fresh interpreter, so that what the test session already imported does not hide an import)."""

import json
import subprocess
import sys

HEAVY = ("torch", "numpy", "transformers", "transformer_lens", "nnsight", "plotly", "pandas", "scipy", "safetensors")


def imported_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_help_of_every_verb_imports_no_heavy_library():
    code = """
import contextlib, io
from phaseinterp.cli import build_parser
parser = build_parser()
verbs = parser._subparsers._group_actions[0].choices
assert len(verbs) >= 7, sorted(verbs)
for argv in [["--help"], *([verb, "--help"] for verb in verbs)]:
    with contextlib.redirect_stdout(io.StringIO()) as text:
        try:
            parser.parse_args(argv)
        except SystemExit as stop:
            assert stop.code == 0, argv
    assert "usage: phaseinterp" in text.getvalue(), argv
"""
    assert imported_after(code) == []


def test_import_phaseinterp_is_light_and_its_names_resolve_on_use():
    assert imported_after("import phaseinterp") == []
    assert "torch" in imported_after("from phaseinterp import HookedCompressedTransformer")


def test_lazy_exports_match_the_eager_modules():
    import phaseinterp
    import phaseinterp.sources
    import phaseinterp.tasks
    import phaseinterp.tasks.record_lookup
    import phaseinterp.theory
    import phaseinterp.theory.flow
    import phaseinterp.train

    assert phaseinterp.load is phaseinterp.sources.load
    assert phaseinterp.tasks.RecordLookup is phaseinterp.tasks.record_lookup.RecordLookup
    assert phaseinterp.theory.integrate is phaseinterp.theory.flow.integrate
    for package in (phaseinterp, phaseinterp.tasks, phaseinterp.theory, phaseinterp.train):
        assert set(package.__all__) <= set(dir(package))
        assert all(getattr(package, name) is not None for name in package.__all__)
    try:
        phaseinterp.tasks.NoSuchName  # noqa: B018  (the lookup is the test)
    except AttributeError as err:
        assert "NoSuchName" in str(err)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
