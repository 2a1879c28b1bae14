"""A wheel that works anywhere: built from the checkout, it carries the core set of shipped assets
(`catalog.json`'s "package_data") and stays under 25 MB; installed without dependencies into a
throwaway virtualenv that sees the packages of the environment running the tests (a base interpreter
or a virtualenv: a .pth file names its site-packages), it runs the quick report, a sweep by name,
`phaseinterp.load("w4s4")` and two tutorials from a folder outside the checkout."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from phaseinterp import catalog
from tests.helpers import copy_sources

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 25 * 2**20


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the build reads (tests.helpers.copy_sources; assets/ linked, not copied)
    src = copy_sources(tmp_path_factory.mktemp("src"), ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"))
    (src / "assets").symlink_to(ROOT / "assets", target_is_directory=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, capture_output=True, text=True)
    (path,) = out.glob("phaseinterp-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    env = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    # the checkout's build leaves phaseinterp.egg-info there: with PYTHONPATH pointing at it, pip would
    # call the wheel "already satisfied" and install nothing
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, text=True, env=clean_env())
    (site,) = env.glob("lib/python*/site-packages")
    assert (site / "phaseinterp" / "_assets" / "checkpoints" / "w4s4.json").is_file()
    # The dependencies: those of the environment running this test. `--system-site-packages` would show the
    # base interpreter's packages, not an outer virtualenv's; a .pth file names the outer site-packages
    # instead (written after the install, so pip does not take the outer editable phaseinterp for the wheel).
    # Plain path lines: the outer .pth files (the editable install's finder among them) are not run, and
    # the venv's own site-packages (the wheel) comes first.
    (site / "_outer_env.pth").write_text("".join(f"{p}\n" for p in outer_site_packages()))
    return env


def outer_site_packages() -> list[str]:
    """The site-packages folders of the interpreter running the tests, in its search order (a venv's own,
    then the base interpreter's where it was made with --system-site-packages)."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PHASEINTERP_HOME")}


def run_in(venv: Path, folder: Path, *argv: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A command of the venv, from `folder`, with nothing pointing at the checkout (no PYTHONPATH)."""
    env = clean_env()
    env.update(OMP_NUM_THREADS="1", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", **(extra or {}))
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def test_wheel_carries_the_core_set_and_stays_small(wheel):
    assert wheel.stat().st_size < MAX_BYTES, f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MB"
    names = set(zipfile.ZipFile(wheel).namelist())
    data = {n.removeprefix("phaseinterp/_assets/") for n in names if n.startswith("phaseinterp/_assets/")}
    expected = {p.relative_to(ROOT / "assets").as_posix() for g in catalog.PACKAGE_DATA
                for p in (ROOT / "assets").glob(g) if p.is_file()}
    assert data == expected and len(expected) >= 2 * sum(m.core for m in catalog.models())
    # the result files tutorials read from a wheel, not the studies' tables (they need a checkout's checkpoints)
    assert {"results/mitigations/mitigations.json", "results/smollm2.json"} <= data and "results/zoo.json" not in data
    for info in catalog.models():
        card = Path(info.path).with_suffix(".json").as_posix()
        assert (info.path in data and card in data) == info.core, info.name
    assert {"phaseinterp/catalog.json", "phaseinterp/assets.py", "phaseinterp/cli.py"} <= names
    assert not [n for n in names if n.startswith(("tests/", "experiments/", "assets/"))]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "phaseinterp = phaseinterp.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_installed_wheel_loads_by_name_from_any_folder(venv, tmp_path):
    code = ("import json, phaseinterp\n"
            "model = phaseinterp.load('w4s4')\n"
            "try:\n    phaseinterp.load('zoo-w8s8-s0')\nexcept ValueError as err:\n    missing = str(err)\n"
            "print(json.dumps({'file': phaseinterp.__file__, 'type': type(model).__name__, 'missing': missing,\n"
            "                  'installed': [m.name for m in phaseinterp.models() if m.installed]}))")
    done = run_in(venv, tmp_path, str(venv / "bin" / "python"), "-c", code)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(venv), f"the checkout shadows the wheel: {out['file']}"
    assert out["type"] == "HookedCompressedTransformer"
    assert sorted(out["installed"]) == sorted(m.name for m in catalog.models() if m.core)
    # the wheel knows the core set only; the studies' models are listed by the repository's assets/catalog.json
    assert "'zoo-w8s8-s0' is unknown" in out["missing"] and "PHASEINTERP_HOME" in out["missing"]


def test_installed_wheel_runs_the_quick_report_and_a_sweep_by_name(venv, tmp_path):
    done = run_in(venv, tmp_path, str(venv / "bin" / "phaseinterp"), "reproduce", "--quick", "--out", "report")
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "report" / "report.html").read_text()
    for title in ("Phase curves of the shipped checkpoints", "Compression gates (w4s4)", "Provenance"):
        assert title in html, title
    assert "The zoo: phase curves" not in html  # the studies' sections come from experiments/ in a checkout
    assert "This section failed" not in html and "gate concentration during training" in html
    assert str(venv) in html  # the checkpoints came from the wheel's package data
    done = run_in(venv, tmp_path, "phaseinterp", "sweep", "w4s4", "--out", "sweep", "--n-per-residue", "2",
                  "--n-boot", "20", "--n-perm", "20", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "sweep" / "curve.json").read_text())["label"] == "w4s4"


#: The two tutorials run from the wheel: the smallest two that read shipped assets (a model and its card
#: by name; package data by `phaseinterp.assets.asset`). tests/test_tutorials.py runs all twelve in the checkout.
WHEEL_TUTORIALS = ["01_quickstart", "08_mitigations"]


def test_installed_wheel_runs_tutorials_from_an_empty_folder(venv, tmp_path):
    """The notebooks run in a kernel of the venv (a kernel spec of its own, so no registered `python3` spec
    can start another interpreter), with the empty folder as their working directory; a last cell shows
    which phaseinterp they imported."""
    spec = venv / "share" / "jupyter" / "kernels" / "wheel"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "phaseinterp wheel", "language": "python"}))
    work = tmp_path / "empty"
    work.mkdir()
    code = ("import json, sys, nbformat\nfrom nbclient import NotebookClient\n"
            "for path in sys.argv[1:]:\n"
            "    nb = nbformat.read(path, as_version=4)\n"
            "    nb.cells.append(nbformat.v4.new_code_cell('import phaseinterp; print(phaseinterp.__file__)'))\n"
            "    NotebookClient(nb, kernel_name='wheel', timeout=300, resources={'metadata': {'path': '.'}}).execute()\n"
            "    print(json.dumps({'notebook': path, 'file': nb.cells[-1].outputs[0]['text'].strip()}))\n")
    env_extra = {"JUPYTER_PATH": str(venv / "share" / "jupyter"), "TMPDIR": str(tmp_path),
                 "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = run_in(venv, work, str(venv / "bin" / "python"), "-c", code,
                  *(str(ROOT / "tutorials" / f"{name}.ipynb") for name in WHEEL_TUTORIALS), extra=env_extra)
    assert done.returncode == 0, done.stderr[-4000:]
    ran = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [Path(r["notebook"]).stem for r in ran] == WHEEL_TUTORIALS
    for r in ran:
        assert Path(r["file"]).is_relative_to(venv), f"{r['notebook']} imported phaseinterp from {r['file']}"
    assert not list(work.iterdir()), "the tutorials wrote into the working folder"
