"""Pretraining on CPU (or CUDA, or `torchrun` data parallel): a synthetic record-lookup + language
mixture, AdamW with warm-up and cosine decay, scheduled checkpoints, exact resume (see
docs/training.md).

Example:
    >>> from phaseinterp.train import recipe, train
    >>> model_cfg, tcfg = recipe("w4s4")
    >>> result = train(model_cfg, tcfg.replace(steps=4, warmup_steps=1), "runs/w4s4-smoke", progress=False)
    >>> result.step, sorted(p.name for p in result.run_dir.iterdir())
    (4, ['checkpoints', 'metrics.jsonl', 'run.json'])
"""

from typing import TYPE_CHECKING

from phaseinterp._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker reads; at run time each name is imported on first use
    from phaseinterp.train.config import TrainConfig as TrainConfig
    from phaseinterp.train.data import Mixture as Mixture, TrainBatch as TrainBatch, make_batch as make_batch
    from phaseinterp.train.loop import TrainResult as TrainResult, train as train
    from phaseinterp.train.recipes import RECIPES as RECIPES, recipe as recipe
    from phaseinterp.train.state import (
        latest_checkpoint as latest_checkpoint, list_checkpoints as list_checkpoints,
        load_checkpoint_for_resume as load_checkpoint_for_resume, save_checkpoint as save_checkpoint)

_EXPORTS = {
    **dict.fromkeys(('TrainConfig',), "config"),
    **dict.fromkeys(('Mixture', 'TrainBatch', 'make_batch'), "data"),
    **dict.fromkeys(('TrainResult', 'train'), "loop"),
    **dict.fromkeys(('RECIPES', 'recipe'), "recipes"),
    **dict.fromkeys(('latest_checkpoint', 'list_checkpoints', 'load_checkpoint_for_resume', 'save_checkpoint'), "state"),
}
__all__ = sorted(_EXPORTS)
if not TYPE_CHECKING:  # a type checker reads the imports above: an unknown name is an error there too
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
