"""Package data of the wheel: the core set of shipped assets (`phaseinterp/catalog.json`'s
"package_data": the checkpoints `phaseinterp reproduce` sweeps, with their cards, and the result files
tutorials read), copied from the repository's `assets/` into `phaseinterp/_assets/` when the wheel is
built. The rest stays in `assets/` (see `phaseinterp/assets.py`). Everything else is in pyproject.toml."""

import json
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithAssets(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's assets/ directly
        globs = json.loads((ROOT / "phaseinterp" / "catalog.json").read_text())["package_data"]
        target = Path(self.build_lib) / "phaseinterp" / "_assets"
        shutil.rmtree(target, ignore_errors=True)  # no stale files from an earlier build
        for pattern in globs:
            files = sorted(p for p in (ROOT / "assets").glob(pattern) if p.is_file())
            if not files:
                raise FileNotFoundError(f"package data {pattern!r} matches nothing in {ROOT / 'assets'}")
            for src in files:
                dst = target / src.relative_to(ROOT / "assets")
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildWithAssets}, package_data={"phaseinterp": ["catalog.json"]})
