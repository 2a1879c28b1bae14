"""The shipped models by name: `phaseinterp.models()` lists them, `phaseinterp.load(NAME)` and every
verb that takes a checkpoint accept a name.

Two lists, both written from checkpoint cards (a test fails when either is stale):

- `phaseinterp/catalog.json`, the package's: the core set a wheel carries (`catalog.json`'s
  "package_data"; `python -m phaseinterp.catalog` rewrites it);
- an assets folder's own `catalog.json` (`LISTING`): the other models in that folder, e.g. the studies'
  (their own members and seeds), which `python -m experiments.catalog` lists in the repository's `assets/`,
  or a user's own carded checkpoints (`write_listing(folder)`). Every assets folder found (a checkout,
  `PHASEINTERP_HOME`, see `phaseinterp.assets`) adds its list; a model listed there but not in it is
  "known but not installed".

Example:
    >>> info = next(m for m in models() if m.name == "w4s4")
    >>> info.path, info.core, info.installed
    ('checkpoints/w4s4.safetensors', True, True)
    >>> info.config
    '2 layers (W4/S4 scalar gate x2), d_model 64, 4 heads / 1 KV head, 144,848 parameters'
    >>> model_path("w4s4").name
    'w4s4.safetensors'
"""

from __future__ import annotations

import difflib
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from phaseinterp import assets

MANIFEST = Path(__file__).resolve().parent / "catalog.json"
#: An assets folder's list of the models it holds beyond the core set (`write_listing`).
LISTING = "catalog.json"
#: What a wheel carries (globs inside an assets folder): the checkpoints `phaseinterp reproduce`
#: sweeps (with their cards and the W4/S4 training series and log, which tutorial 05 reads) and the two
#: result files tutorials read from a wheel (08: the mitigations, 10: SmolLM2). The studies' other
#: results stay in the repository's assets/ with the checkpoints they come from.
PACKAGE_DATA = [
    "checkpoints/*.safetensors", "checkpoints/*.json", "checkpoints/w4s4/*.safetensors",
    "checkpoints/w4s4.metrics.jsonl", "results/mitigations/mitigations.json", "results/smollm2.json",
]


@dataclass(frozen=True)
class ModelInfo:
    """One shipped model.

    Attributes:
        name: what `phaseinterp.load` and the verbs accept.
        path: its checkpoint inside an assets folder (`checkpoints/...safetensors`; its card is the .json beside it).
        core: shipped inside the wheel.
        config: the architecture in one line.
        learned: its phase curve on its matched task, in one line (from the card).
        task: its matched evaluation task (the card's `data.eval_task`), what the verbs use as defaults.
    """

    name: str
    path: str
    core: bool
    config: str
    learned: str
    task: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        """The family it was shipped with: its folder under `checkpoints/` (a study's own),
        or "core" for the top-level checkpoints (the models the wheel carries)."""
        folder = PurePosixPath(self.path).parent
        return "core" if folder.name == "checkpoints" else folder.relative_to("checkpoints").as_posix()

    @property
    def installed(self) -> bool:
        """Whether an assets folder holds its checkpoint and card."""
        return assets.find(self.path) is not None and assets.find(Path(self.path).with_suffix(".json")) is not None

    def __str__(self) -> str:
        where = "installed" if self.installed else "not installed"
        return f"{self.name}: {self.config}; {self.learned} [{where}]"


def models() -> list[ModelInfo]:
    """Every known model (installed or not), by name: the core set, then each assets folder's listing."""
    found = [ModelInfo(**entry) for entry in json.loads(MANIFEST.read_text())["models"]]
    seen = {m.name for m in found}
    for root in assets.roots():
        if (root / LISTING).is_file():
            for entry in json.loads((root / LISTING).read_text())["models"]:
                if entry["name"] not in seen:
                    found.append(ModelInfo(**entry))
                    seen.add(entry["name"])
    return found


def listings() -> list[Path]:
    """The assets folders' listings found (`LISTING` in each of `assets.roots()`)."""
    return [root / LISTING for root in assets.roots() if (root / LISTING).is_file()]


def names() -> list[str]:
    return [m.name for m in models()]


def model_info(name: str) -> ModelInfo:
    """The shipped model called `name`; ValueError listing the known names otherwise."""
    known = {m.name: m for m in models()}
    if name not in known:
        # the nearest names, not all of them: a typo's answer is the name it meant (the list is `phaseinterp models`)
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        studies = "" if listings() else (f"; the studies' models (their own members and seeds) are listed where an assets "
                                          f"folder holds their {LISTING}: {assets.SOURCE}")
        raise ValueError(f"model name {name!r} is unknown{hint}: allowed a checkpoint file, a training-run folder, a "
                         f"HuggingFace model folder or one of the {len(known)} shipped model names "
                         f"(`phaseinterp models --all` lists them, phaseinterp.models() describes them){studies}")
    return known[name]


def model_path(name: str) -> Path:
    """The checkpoint file of a shipped model; FileNotFoundError saying where to get it when it is
    known but not installed, ValueError listing the known names when it is unknown."""
    info = model_info(name)
    path = assets.find(info.path)
    if path is None or not path.with_suffix(".json").is_file():
        raise FileNotFoundError(f"model {name!r} is known but not installed here ({info.path} and its card are in no "
                                f"assets folder: {', '.join(map(str, assets.roots())) or 'none'}); get it from "
                                f"{assets.SOURCE}. Installed: {', '.join(m.name for m in models() if m.installed)}")
    return path


# ---- writing the manifest from the cards (python -m phaseinterp.catalog) -----------------------


def build(root: Path) -> dict[str, Any]:
    """The package's manifest: the core set among the carded checkpoints of `root` (an assets folder)."""
    return {"package_data": PACKAGE_DATA, "models": [e for e in entries(root) if e["core"]]}


def listing(root: Path) -> dict[str, Any]:
    """An assets folder's own list: its carded checkpoints outside the core set."""
    return {"models": [e for e in entries(root) if not e["core"]]}


def write_listing(root: Path) -> Path:
    """Write `root/catalog.json` (`listing`): `phaseinterp.load(NAME)` and `phaseinterp models` then know
    every carded checkpoint of `root` wherever `root` is an assets folder (`PHASEINTERP_HOME=root`)."""
    path = Path(root) / LISTING
    path.write_text(json.dumps(listing(Path(root)), indent=1) + "\n")
    return path


def entries(root: Path) -> list[dict[str, Any]]:
    """Every carded checkpoint under `root/checkpoints` (an assets folder), by name, as `ModelInfo` fields."""
    entries, seen = [], {}
    for weights in sorted((root / "checkpoints").rglob("*.safetensors")):
        card_path = weights.with_suffix(".json")
        if not card_path.is_file():
            continue  # intermediate checkpoints of a training series: no card, no name
        rel = weights.relative_to(root).as_posix()
        card = json.loads(card_path.read_text())
        name = weights.stem
        if name in seen:
            raise ValueError(f"two shipped checkpoints are named {name!r}: {seen[name]} and {rel}")
        seen[name] = rel
        core = packaged(rel)
        entries.append(asdict(ModelInfo(name=name, path=rel, core=core, config=describe_config(card),
                                        learned=describe_curve(card), task=card.get("data", {}).get("eval_task") or {})))
    return entries


def packaged(relative: str) -> bool:
    """Whether a wheel carries this asset (a path inside an assets folder matches a `PACKAGE_DATA` glob,
    `*` within one folder, as `Path.glob` reads it when the wheel is built)."""
    path = PurePosixPath(relative)
    return any(len(path.parts) == len(PurePosixPath(g).parts) and path.match(g) for g in PACKAGE_DATA)


def describe_config(card: dict) -> str:
    """One line of architecture from a card's `model_config`: its family's Backend describes the
    config (`Backend.describe_card`; ours, NSA, a HF model), then the parameter count."""
    from phaseinterp.families import family_of_config

    cfg = card.get("model_config", {})
    params = f"{card['n_parameters']:,} parameters" if card.get("n_parameters") else ""
    parts = family_of_config(cfg)[0].backend_class().describe_card(cfg)
    return ", ".join(p for p in [*parts, params] if p)


def describe_curve(card: dict) -> str:
    """One line of what the model learned: its card's phase curve on its matched task."""
    curve = card.get("phase_curve")
    if not curve:
        return "no phase curve in its card"
    acc, modulus = curve["accuracy"], curve.get("task", {}).get("modulus", len(curve["accuracy"]))
    strong = [r for r, a in enumerate(acc) if a >= 0.8]
    text = (f"record lookup mod {modulus}: mean {100 * curve['mean']:.1f}%, worst {100 * curve['worst']:.1f}%, "
            f"best {100 * curve['best']:.1f}%, gap {curve['gap_pp']:.1f} pp")
    return text + (f"; residues >= 80%: {', '.join(map(str, strong))}" if strong else "; no residue >= 80%")


def write(root: Path = assets.CHECKOUT, path: Path = MANIFEST) -> Path:
    path.write_text(json.dumps(build(root), indent=1) + "\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write(Path(sys.argv[1]) if len(sys.argv) > 1 else assets.CHECKOUT)}")


__all__ = ["LISTING", "MANIFEST", "PACKAGE_DATA", "ModelInfo", "build", "entries", "listing", "listings", "model_info",
           "model_path", "models", "names", "packaged", "write_listing"]
