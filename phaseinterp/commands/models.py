"""`phaseinterp models`: the shipped models by name (what `phaseinterp.load(NAME)` and every verb's
CHECKPOINT accept): architecture, what each learned on its matched task, installed here or not.

    phaseinterp models                 # installed first, by family: the core set in full, other families in one line
    phaseinterp models --all           # every model in full, installed first, by family
    phaseinterp models --installed     # only those this install can load
    phaseinterp models --json          # name, path, group, core, config, learned, task, installed
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from itertools import groupby
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaseinterp.catalog import ModelInfo


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="the shipped models by name (phaseinterp.models())",
                              description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group()
    which.add_argument("--installed", action="store_true", help="only the models installed here")
    which.add_argument("--all", action="store_true",
                       help="every model in full (default: the core set in full, each other family in one line)")
    p.add_argument("--json", action="store_true", help="print JSON instead of one line each")
    p.set_defaults(func=run)


def ordered(infos: list[ModelInfo]) -> list[ModelInfo]:
    """Installed first; within each, by family ("core" first, then by name) and by name."""
    return sorted(infos, key=lambda m: (not m.installed, m.group != "core", m.group, m.name))


def run(args: argparse.Namespace) -> int:
    from phaseinterp import assets
    from phaseinterp.catalog import LISTING, listings, models

    every = ordered(models())
    infos = [m for m in every if m.installed or not args.installed]
    if args.json:
        print(json.dumps([{**asdict(m), "group": m.group, "installed": m.installed} for m in infos], indent=1))
        return 0
    for installed, block in groupby(infos, key=lambda m: m.installed):
        block = list(block)
        print(f"{'installed' if installed else 'not installed here'} ({len(block)}):")
        for group, members in groupby(block, key=lambda m: m.group):
            members = list(members)
            if args.all or group == "core":  # the core set is what a wheel carries: what a newcomer loads
                print(f"  {group}:")
                for m in members:
                    print(f"    {m}")
            else:  # a family in one line: its size and its first and last names
                span = members[0].name if len(members) == 1 else f"{members[0].name} .. {members[-1].name}"
                print(f"  {group}: {len(members)} model{'s' if len(members) != 1 else ''} ({span})")
    n_installed = sum(m.installed for m in every)
    line = f"{len(every)} shipped models, {n_installed} installed here"
    if n_installed < len(every):
        line += f"; the other {len(every) - n_installed} from {assets.SOURCE}"
    if not args.all and any(m.group != "core" for m in infos):
        line += " (`phaseinterp models --all` describes each)"
    if not listings():
        line += f"; a study's models are listed where an assets folder holds their {LISTING}"
    print(line)
    return 0
