"""Pack a long-row run folder into the few files a device machine can hand back.

    python -m experiments.long_rows.pack runs/long_rows_gpu DEST [--max-mb 56] [--file-mb 15.5]

DEST/results.tar.gz holds everything but weights (calibration, the table, cards, metrics, run.json,
logs); DEST/weights_K.tar hold shipped weights in priority order (seed 0 of every table arm, then
of the sweep, then seed 1, ...; calibration-only runs last), each file under `--file-mb`, all files
under `--max-mb`. What did not fit is listed in DEST/left_out.txt (the cards and the table still
cover it; retrain with the recorded configs to get its weights).
"""

from __future__ import annotations

import argparse
import re
import tarfile
from pathlib import Path

from experiments.long_rows.members import ARMS


def priority(path: Path) -> tuple:
    """Sort key of a shipped weights file: seed, table arms before the sweep, small before large."""
    m = re.fullmatch(r"long-(?P<member>.+)-s(?P<seed>\d+)\.safetensors", path.name)
    if m is None or m["member"].startswith("cal-"):
        return (99, 2, path.stat().st_size, path.name)
    return (int(m["seed"]), 0 if m["member"] in ARMS else 1, path.stat().st_size, path.name)


def pack(run: Path, dest: Path, *, max_mb: float = 56.0, file_mb: float = 15.5, max_files: int = 6) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    results = dest / "results.tar.gz"
    with tarfile.open(results, "w:gz") as tar:
        for path in sorted(run.rglob("*")):
            if path.is_file() and path.suffix not in (".safetensors", ".pt"):
                tar.add(path, arcname=path.relative_to(run).as_posix())
    budget = max_mb * 2 ** 20 - results.stat().st_size
    files, current, size, left_out = [], None, 0, []
    for w in sorted((run / "checkpoints").glob("*.safetensors"), key=priority):
        n = w.stat().st_size
        if n > budget or (current is None or size + n > file_mb * 2 ** 20) and len(files) >= max_files:
            left_out.append(w.name)
            continue
        if current is None or size + n > file_mb * 2 ** 20:
            if current is not None:
                current.close()
            files.append(dest / f"weights_{len(files)}.tar")
            current, size = tarfile.open(files[-1], "w"), 0
        current.add(w, arcname=f"checkpoints/{w.name}")
        size, budget = size + n, budget - n
    if current is not None:
        current.close()
    (dest / "left_out.txt").write_text("".join(f"{n}\n" for n in left_out))
    return [results, *files]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--max-mb", type=float, default=56.0)
    p.add_argument("--file-mb", type=float, default=15.5)
    args = p.parse_args(argv)
    for f in pack(args.run, args.dest, max_mb=args.max_mb, file_mb=args.file_mb):
        print(f"{f} {f.stat().st_size / 2 ** 20:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
