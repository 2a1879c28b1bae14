"""Pretraining on CPU (or CUDA, or `torchrun` data parallel): a synthetic record-lookup + language
mixture, AdamW with warm-up and cosine decay, scheduled checkpoints, exact resume (see
docs/training.md).

Example:
    >>> from phaseinterp.train import recipe, train
    >>> model_cfg, tcfg = recipe("w4s4")
    >>> result = train(model_cfg, tcfg.replace(steps=20), "runs/w4s4-smoke")  # doctest: +SKIP
"""

from phaseinterp.train.config import TrainConfig
from phaseinterp.train.data import Mixture, TrainBatch, make_batch
from phaseinterp.train.loop import TrainResult, train
from phaseinterp.train.recipes import RECIPES, recipe
from phaseinterp.train.state import latest_checkpoint, list_checkpoints, load_checkpoint_for_resume, save_checkpoint

__all__ = ["Mixture", "RECIPES", "TrainBatch", "TrainConfig", "TrainResult", "latest_checkpoint", "list_checkpoints",
           "load_checkpoint_for_resume", "make_batch", "recipe", "save_checkpoint", "train"]
