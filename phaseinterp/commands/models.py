"""`phaseinterp models`: the shipped models by name (what `phaseinterp.load(NAME)` and every verb's
CHECKPOINT accept): architecture, what each learned on its matched task, installed here or not.

    phaseinterp models                 # one line each
    phaseinterp models --installed     # only those this install can load
    phaseinterp models --json          # name, path, core, config, learned, task, installed
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="the shipped models by name (phaseinterp.models())",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--installed", action="store_true", help="only the models installed here")
    p.add_argument("--json", action="store_true", help="print JSON instead of one line each")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from phaseinterp import assets
    from phaseinterp.catalog import models

    infos = [m for m in models() if m.installed or not args.installed]
    if args.json:
        print(json.dumps([{**asdict(m), "installed": m.installed} for m in infos], indent=1))
        return 0
    for m in infos:
        print(m)
    missing = sum(not m.installed for m in infos)
    if missing:
        print(f"{missing} not installed here: get them from {assets.SOURCE}")
    return 0
