"""One path from a model source to a model: resolved once into (model, family, card).

A source is any of:

- a checkpoint file phaseinterp wrote (ours, a trainer-written HF model, NSA, or a registered
  family's format); its card is the JSON next to it (`NAME.json`, shipped checkpoints) or, for a
  checkpoint inside a training run (`RUN/checkpoints/step_N.safetensors`), the run's `RUN/card.json`;
- a training-run folder written by `phaseinterp train --out RUN`: the checkpoint its card
  describes (the card's `steps`), else its last one, with `RUN/card.json`;
- a HuggingFace model folder written by `save_pretrained` (`config.json` + weights; read offline,
  in float32);
- the name of a shipped model (`phaseinterp.models()`: "w4s4", "full", "w8s8", ...), when no
  file or folder of that name exists: its checkpoint and card from the assets folders
  (`phaseinterp.assets`: `PHASEINTERP_HOME`, the checkout's `assets/`, the wheel's core set).

The card (a dict, or None) carries the matched evaluation task (`card["data"]["eval_task"]`) that
the verbs use as their task defaults, so a model is measured on the vocabulary it was trained on.

Example:
    >>> path = model.save("w4s4.safetensors")
    >>> loaded = resolve_source("w4s4.safetensors")
    >>> loaded.family.name, loaded.card, type(loaded.model).__name__
    ('hooked', None, 'HookedCompressedTransformer')
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from phaseinterp import catalog
from phaseinterp.checkpoint import load as load_checkpoint
from phaseinterp.checkpoint import read_metadata
from phaseinterp.families import ModelFamily, family_of_model

if TYPE_CHECKING:  # the types `load` returns, for a type checker only (importing them costs a second or more)
    import torch

    from phaseinterp.families.hf_causal_lm import HFCausalLM
    from phaseinterp.model import HookedCompressedTransformer

#: The shipped models a wheel carries that are ours (`catalog.json`'s core set): for a type checker,
#: `load` of one of these names is a `HookedCompressedTransformer` (tests/test_typing.py keeps the list
#: equal to the catalog's). Any other source is a `torch.nn.Module`.
HookedName = Literal["deepseek-kernel", "full", "w4s4", "w4s4-seed1", "w4s4-uniform", "w8s4", "w8s8"]
#: The core shipped HuggingFace model: it loads as an `HFCausalLM` (tokens -> logits; the HF model is its `.hf`).
HFName = Literal["hf-deepseek-v4"]

#: Where a training run keeps its checkpoints, and their names (N = step, zero-padded to 6 digits).
RUN_CHECKPOINTS = "checkpoints"
_STEP = re.compile(r"^step_(\d+)\.safetensors$")


def checkpoint_path(run_dir: str | os.PathLike, step: int) -> Path:
    """`RUN/checkpoints/step_N.safetensors` of a training run."""
    return Path(run_dir) / RUN_CHECKPOINTS / f"step_{step:06d}.safetensors"


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint in `run_dir/checkpoints`, by step."""
    folder = Path(run_dir) / RUN_CHECKPOINTS
    if not folder.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _STEP.match(p.name)))


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1][1] if ckpts else None


@dataclass
class LoadedModel:
    """A resolved model source.

    Attributes:
        model: the model (eval mode): ours, an `HFCausalLM`, an `NSATransformer`, a HF model.
        family: its `ModelFamily`.
        card: the checkpoint card (dict) that describes it, or None.
        path: the file or folder the weights came from.
        card_path: where the card was read, or None.
    """

    model: Any
    family: ModelFamily
    card: dict | None
    path: Path
    card_path: Path | None = None

    @property
    def eval_task(self) -> dict[str, Any]:
        """The card's matched evaluation task (`data.eval_task`), or {}."""
        task = (self.card or {}).get("data", {}).get("eval_task")
        return task if isinstance(task, dict) else {}

    def runnable(self) -> Any:
        """What experiments run on: the model's backend (`families.resolve.resolve_model`, the one decider)."""
        from phaseinterp.families.resolve import resolve_model

        return resolve_model(self.model)


def read_card(path: str | os.PathLike) -> dict:
    """A checkpoint card (JSON object); ValueError naming the file when it is not one."""
    try:
        card = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"card {str(path)!r} is not a readable JSON card: {err}") from None
    if not isinstance(card, dict):
        raise ValueError(f"card {str(path)!r} is invalid: allowed a JSON object")
    return card


def check_card(card: dict, weights: str | os.PathLike, card_path: str | os.PathLike | None = None) -> None:
    """Refuse a card whose `model_config` is not the checkpoint's own config: tables and labels read
    the architecture from the card, so a mismatched card would mislabel every result."""
    ours = card.get("model_config")
    theirs = read_metadata(weights)["config"]
    if ours is None or ours == theirs:
        return
    fields = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)) \
        if isinstance(ours, dict) and isinstance(theirs, dict) else ["model_config"]
    where = f" ({str(card_path)!r})" if card_path else ""
    raise ValueError(f"card {card.get('name')!r}{where} describes another model than {str(weights)!r}: model_config "
                     f"differs from the checkpoint's config in {fields}; ship card and weights together (`--ship`) "
                     "or pass the right card")


def _card_of_checkpoint(path: Path) -> Path | None:
    """The card of a checkpoint file: `NAME.json` beside it, else its run's `card.json`."""
    beside = path.with_suffix(".json")
    if beside.is_file():
        return beside
    if path.parent.name == RUN_CHECKPOINTS and (path.parent.parent / "card.json").is_file():
        return path.parent.parent / "card.json"
    return None


def _run_checkpoint(run: Path, card: dict | None) -> Path:
    """The checkpoint of a run folder its card describes (the card's step), else the last one."""
    ckpts = dict(list_checkpoints(run))
    if not ckpts:
        raise ValueError(f"run folder {str(run)!r} holds no checkpoints/step_N.safetensors: allowed a finished or "
                         "interrupted run of `phaseinterp train --out RUN`")
    step = (card or {}).get("steps")
    return ckpts[step] if step in ckpts else ckpts[max(ckpts)]


def _hf_folder(path: Path):
    """A HuggingFace model folder (`config.json` and weights), read offline in float32."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, device_map=None, local_files_only=True)


def resolve_source(source: str | os.PathLike, device: str = "cpu", *, card: str | os.PathLike | None = None,
                   allow_nonfinite: bool = False) -> LoadedModel:
    """Resolve a model source (see the module docstring) into its model, family and card.

    Args:
        source: a checkpoint file, a training-run folder, a HuggingFace model folder or the name of a
            shipped model (`phaseinterp.models()`; a file or folder of that name wins).
        device: where the model goes.
        card: a card to use instead of the one found beside the source.
        allow_nonfinite: load checkpoints with nan/inf weights (to inspect a diverged run).

    Raises:
        FileNotFoundError: nothing at `source`, or a shipped model that is not installed (the message
            says where to get it).
        ValueError: a folder that is neither a run nor a HF model folder, a run without
            checkpoints, an unreadable card, or a checkpoint `phaseinterp.load` refuses.
    """
    path = Path(source)
    card_path = Path(card) if card is not None else None
    if not path.exists() and is_name(source):
        path = catalog.model_path(str(source))  # ValueError listing the names; FileNotFoundError: where to get it
    info = None
    if path.is_dir():
        if (path / RUN_CHECKPOINTS).is_dir():
            card_path = card_path or ((path / "card.json") if (path / "card.json").is_file() else None)
            info = read_card(card_path) if card_path else None
            weights = _run_checkpoint(path, info)
            model = load_checkpoint(weights, device, allow_nonfinite=allow_nonfinite)
        elif (path / "config.json").is_file():
            weights, model = path, _hf_folder(path).to(device).eval()
        else:
            raise ValueError(f"model folder {str(path)!r} is invalid: allowed a training run (with checkpoints/, written "
                             "by phaseinterp train --out) or a HuggingFace model folder (config.json, written by "
                             "save_pretrained)")
    elif path.is_file():
        card_path = card_path or _card_of_checkpoint(path)
        weights, model = path, load_checkpoint(path, device, allow_nonfinite=allow_nonfinite)
    else:
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}: allowed a checkpoint file, a training-run folder, a "
                                "HuggingFace model folder or a shipped model name (phaseinterp.models())")
    if info is None and card_path:  # a run folder's card was read above, to pick its checkpoint
        info = read_card(card_path)
    if info is not None and weights.is_file():
        check_card(info, weights, card_path)
    return LoadedModel(model=model, family=family_of_model(model), card=info, path=weights, card_path=card_path)


def is_name(source: str | os.PathLike) -> bool:
    """Whether a source is written as a model name (no folder, no file suffix), not as a path."""
    text = os.fspath(source)
    return bool(text) and "/" not in text and os.sep not in text and not Path(text).suffix and text not in (".", "..")


@overload
def load(source: HookedName, device: str = "cpu", *, allow_nonfinite: bool = False) -> HookedCompressedTransformer: ...
@overload
def load(source: HFName, device: str = "cpu", *, allow_nonfinite: bool = False) -> HFCausalLM: ...
@overload
def load(source: str | os.PathLike, device: str = "cpu", *, allow_nonfinite: bool = False) -> torch.nn.Module: ...


def load(source: str | os.PathLike, device: str = "cpu", *, allow_nonfinite: bool = False) -> torch.nn.Module:
    """The model of a source (`resolve_source(...).model`): a checkpoint written by `model.save(path)`,
    a training-run folder, a HuggingFace model folder or a shipped model's name (`phaseinterp.models()`). Checkpoints are verified on load (names,
    shapes, digest, finite weights unless `allow_nonfinite`; see `phaseinterp.checkpoint.load`).

    Example:
        >>> path = model.save("mine.safetensors")
        >>> type(phaseinterp.load("mine.safetensors")).__name__
        'HookedCompressedTransformer'
        >>> phaseinterp.load("w4s4").cfg.strides  # a shipped model by name
        (4,)
    """
    return resolve_source(source, device, allow_nonfinite=allow_nonfinite).model


__all__ = ["HFName", "HookedName", "LoadedModel", "RUN_CHECKPOINTS", "checkpoint_path", "is_name", "latest_checkpoint", "list_checkpoints", "load",
           "check_card", "read_card", "resolve_source"]
