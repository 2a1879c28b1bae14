"""The output folder of a verb, guarded (`phaseinterp/cli.py` wraps every verb with `--out` in
`guarded_out`): one run at a time (`OUT/.lock`, `measure.outputs.OutputLock`), a finished folder
kept unless `--overwrite`, and the journal of long work (`OUT/.journal`) continued with `--resume`.

Under torchrun (`train`) only rank 0 takes the lock, for the whole group.

A folder is finished when the verb's result file exists; verbs write it last, every file
atomically, so a finished folder is whole. The journal is removed once the result file exists."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

JOURNAL = ".journal"


def _units(journal: Path) -> int:
    return sum(1 for p in journal.rglob("*.npz") if not p.name.startswith("."))


@contextmanager
def guarded_out(args: argparse.Namespace) -> Iterator[Path | None]:
    """Hold `args.out` for the verb's run (the guard's settings: `add_guard_args`, defaults for verbs
    without them set by `cli.build_parser`); yields the journal folder of a verb that can resume
    (`add_guard_args(..., resume=True)`), else None (the CLI hands it to the verb as `args.journal`)."""
    from phaseinterp.measure.outputs import OutputLock

    out = Path(args.out)
    if int(os.environ.get("RANK", "0")) != 0:  # torchrun's other processes: rank 0 holds the folder for them all
        yield None
        return
    lock = OutputLock(out, command=f"phaseinterp {args.command}").acquire()
    try:
        if lock.note:
            print(f"phaseinterp {args.command}: note: {lock.note}", file=sys.stderr)
        for tmp in out.glob(".*.tmp-*"):  # half-written files of a killed run (ours to remove: we hold the lock)
            if not tmp.name.startswith(".lock"):
                tmp.unlink(missing_ok=True)
        result = args.result_file
        journal = out / JOURNAL
        overwrite, resume = args.overwrite, args.journal_ok and args.resume
        if result and (out / result).exists():
            if not overwrite:
                raise ValueError(f"--out {str(out)!r} holds a finished run ({result} exists): allowed --overwrite to "
                                 "replace it, or another --out folder")
            (out / result).unlink()  # unfinished from now on: a killed overwrite never looks finished
            shutil.rmtree(journal, ignore_errors=True)
        elif journal.exists():
            n = _units(journal)
            if overwrite or n == 0:
                shutil.rmtree(journal, ignore_errors=True)
            elif not resume:
                raise ValueError(f"--out {str(out)!r} holds the journal of an unfinished run ({n} finished units in "
                                 f"{str(journal)!r}): allowed --resume to continue it"
                                 + (" (this verb cannot resume)" if not args.journal_ok else "")
                                 + ", or --overwrite to start over")
        yield journal if args.journal_ok else None
        if result and (out / result).exists():
            shutil.rmtree(journal, ignore_errors=True)
    finally:
        lock.release()
