"""Which zoo runs the cycling study cycles: every run of the zoo tables (seeds 0, 1 in
assets/results/zoo.json; more seeds in assets/results/zoo-seeds/zoo.json), with its status.

A run is cycled when its table row (prefix padding, the protocol the zoo table leads with) says it
learned and its compressors have offset-specific gate parameters. Every other run is listed with
the reason: not learned, full attention or uniform gates (nothing to cycle), or no table row yet.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

PROTOCOL = "prefix"
#: (checkpoint folder, zoo table that says which of its runs learned)
SOURCES = (("assets/checkpoints/zoo", "assets/results/zoo.json"),
           ("assets/checkpoints/zoo-seeds", "assets/results/zoo-seeds/zoo.json"))


@dataclass(frozen=True)
class Run:
    name: str  # card name, e.g. zoo-w8s8-s0
    member: str  # e.g. w8s8
    seed: int
    path: Path  # the .safetensors
    status: str  # "cycled", "not learned", "nothing to cycle: ...", "no zoo table row"
    architecture: str
    rope: str  # the compressed layers' RoPE mode ("full", "none", ...), "" for full attention


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _nothing_to_cycle(card: dict) -> str | None:
    layers = [c for c in card["model_config"]["layers"] if c != "full"]
    if not layers:
        return "nothing to cycle: full attention"
    if all(c["gate"] == "uniform" for c in layers):
        return "nothing to cycle: uniform gates"
    return None


def zoo_runs(root: Path, sources=SOURCES) -> list[Run]:
    """Every zoo checkpoint under `root`'s source folders, with its status (sorted by member, seed)."""
    runs = []
    for folder, table in sources:
        table_path = root / table
        rows = json.loads(table_path.read_text())["rows"] if table_path.is_file() else []
        learned = {r["model"]: r["learned"] for r in rows if r["protocol"] == PROTOCOL}
        for card_path in sorted((root / folder).glob("*.json")):
            card = json.loads(card_path.read_text())
            name = card["name"]
            why = _nothing_to_cycle(card)
            status = (why or ("no zoo table row" if name not in learned else
                              "cycled" if learned[name] else "not learned"))
            row = next((r for r in rows if r["model"] == name), None)
            runs.append(Run(name=name, member=name.rsplit("-s", 1)[0].removeprefix("zoo-"), seed=int(card["seed"]),
                            path=card_path.with_suffix(".safetensors"), status=status,
                            architecture=row["architecture"] if row else "",
                            rope=",".join(sorted({c["rope"] for c in card["model_config"]["layers"] if c != "full"}))))
    return sorted(runs, key=lambda r: (r.member, r.seed))
