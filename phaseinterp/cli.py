"""The `phaseinterp` command. Each verb lives in `phaseinterp/commands/<verb>.py` and exposes
`register(subparsers)`, which adds its parser and sets `func` (called with the parsed args).

One error boundary for every verb: an error becomes one line, `phaseinterp VERB: error: ...`,
and exit status 2 (`--debug` shows the traceback instead); the output folder is checked and
locked before any work starts (`commands/_guard.py`)."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import tempfile
from pathlib import Path

from phaseinterp import __version__, commands

DESCRIPTION = ("Phase sensitivity in chunk-compressed KV-cache transformers: train models, measure accuracy by "
               "phase, run causal interventions and write the report.")
EPILOG = "Run `phaseinterp VERB --help` for a verb's options."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phaseinterp", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, title="verbs", metavar="VERB")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"phaseinterp.commands.{info.name}").register(sub)
    for verb in sub.choices.values():
        verb.add_argument("--debug", action="store_true", help="on error, show the Python traceback")
        verb.set_defaults(journal=None)  # the journal folder of a guarded --out (main), read by the verb's request
        for name, default in (("result_file", None), ("journal_ok", False), ("overwrite", False)):
            if verb.get_default(name) is None:  # the guard's settings (`add_guard_args`) of verbs without them
                verb.set_defaults(**{name: default})
    return parser


def check_out(path: Path | None) -> None:
    """Refuse an output folder that is a file or cannot be written, before any work runs."""
    if path is None:
        return
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {str(path)!r} is an existing file: allowed a folder (new or existing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise ValueError(f"--out {str(path)!r} cannot be written ({err.strerror or err}): allowed a writable folder") from None


def describe(err: BaseException) -> str:
    """One line for an error: its message, with the file for file errors."""
    if isinstance(err, OSError) and err.filename:
        return f"{err.strerror or type(err).__name__}: {err.filename}"
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    text = " ".join(str(err).split())
    return text if text else type(err).__name__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = getattr(args, "out", None)
    created = first_missing(Path(out)) if out is not None else None  # what this run creates: removed if it stays empty
    status = 2
    try:
        check_out(out)
        if out is None:
            status = int(args.func(args) or 0)
            return status
        from phaseinterp.commands._guard import guarded_out

        with guarded_out(args) as journal:  # one run per folder; finished folders kept; the journal of long work
            status = int(args.func(argparse.Namespace(**{**vars(args), "journal": journal})) or 0)
        return status
    except KeyboardInterrupt:
        raise
    except Exception as err:  # noqa: BLE001  (the boundary: every error becomes one line)
        if args.debug or os.environ.get("PHASEINTERP_DEBUG"):
            raise
        print(f"phaseinterp {args.command}: error: {describe(err)} (--debug shows the traceback)", file=sys.stderr)
        return 2
    finally:
        if created is not None and status != 0:
            remove_if_empty(created)


def first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what `mkdir(parents=True)` creates), or None."""
    missing = None
    for folder in [path, *path.parents]:
        if folder.exists():
            break
        missing = folder
    return missing


def remove_if_empty(folder: Path) -> None:
    """Remove a folder this run created when it holds no file (empty subfolders, e.g. an empty journal,
    count as nothing): a failed run leaves no empty --out behind, and never removes a file."""
    if not folder.is_dir() or any(p.is_file() or p.is_symlink() for p in folder.rglob("*")):
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        sub.rmdir()
    folder.rmdir()


if __name__ == "__main__":
    sys.exit(main())
