"""The `phaseinterp` command. Each verb lives in `phaseinterp/commands/<verb>.py` and exposes
`register(subparsers)`, which adds its parser and sets `func` (called with the parsed args)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from phaseinterp import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phaseinterp", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"phaseinterp.commands.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
