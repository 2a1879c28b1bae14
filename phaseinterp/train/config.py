"""`TrainConfig`: optimizer, schedule, batch, seed and checkpoint cadence of a training run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from phaseinterp.config import check_known_fields

from phaseinterp.train.data import Mixture, _bad, _int
from phaseinterp.train.mitigation import Mitigation

# Fields that do not change the trajectory (may differ when resuming).
RESUMABLE_FIELDS = ("checkpoint_every", "keep_states", "log_every", "device", "compile")


def _num(name: str, value: Any, low: float, high: float = math.inf, low_open: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        lo = f"> {low}" if low_open else f">= {low}"
        hi = "" if high == math.inf else f" and <= {high}"
        raise _bad(name, value, f"a finite number {lo}{hi}")


@dataclass(frozen=True)
class TrainConfig:
    """A training run.

    The learning rate rises linearly from 0 over `warmup_steps`, then follows a cosine from `lr`
    down to `min_lr_ratio * lr` at `steps` (`lr_at`). AdamW decays only matrices (parameters with
    2 or more dimensions, embeddings included), not norm weights, biases or sinks.

    Attributes:
        steps: optimizer steps.
        batch_size: global batch (rows per step, split evenly over data-parallel processes).
        lr: peak learning rate.
        min_lr_ratio: final learning rate as a fraction of `lr`.
        warmup_steps: linear warm-up steps.
        weight_decay: AdamW decoupled weight decay on matrices.
        betas: AdamW betas.
        grad_clip: clip the global gradient norm to this value (0 = no clipping).
        seed: model initialization and data seed.
        mixture: the data mixture.
        checkpoint_every: write a checkpoint every this many steps (the last step always).
        keep_states: keep the optimizer state of the newest `keep_states` checkpoints (weights of
            every checkpoint are kept).
        log_every: append a metrics line every this many steps (and at the last step).
        device: "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
        mitigation: training-time mitigations of phase sensitivity (`phaseinterp.train.mitigation`).
        compile: run the forward pass through `torch.compile`, one graph per model (needs a C++
            compiler on CPU; costs about a minute of compilation, then 1.7x the steps per second of
            eager mode on the tiny models, benchmarks/results/train.json; results match eager mode to float
            rounding, not bit for bit). Not with mitigations or HF models.
    """

    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    seed: int = 0
    mixture: Mixture = field(default_factory=Mixture)
    checkpoint_every: int = 500
    keep_states: int = 1
    log_every: int = 10
    device: str = "auto"
    mitigation: Mitigation = field(default_factory=Mitigation)
    compile: bool = False

    def __post_init__(self) -> None:
        _int("steps", self.steps, 1)
        _int("batch_size", self.batch_size, 1)
        _num("lr", self.lr, 0.0, low_open=True)
        _num("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        _int("warmup_steps", self.warmup_steps, 0, self.steps)
        _num("weight_decay", self.weight_decay, 0.0)
        betas = tuple(self.betas)
        if len(betas) != 2:
            raise _bad("betas", self.betas, "two numbers in [0, 1)")
        for i, b in enumerate(betas):
            _num(f"betas[{i}]", b, 0.0, 0.999999)
        object.__setattr__(self, "betas", betas)
        _num("grad_clip", self.grad_clip, 0.0)
        _int("seed", self.seed, 0)
        self._coerce("mixture", Mixture)
        _int("checkpoint_every", self.checkpoint_every, 1)
        _int("keep_states", self.keep_states, 1)
        _int("log_every", self.log_every, 1)
        self._coerce("mitigation", Mitigation)
        if not isinstance(self.compile, bool):
            raise _bad("compile", self.compile, "True or False")
        if not isinstance(self.device, str) or not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise _bad("device", self.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")

    def _coerce(self, name: str, cls: type) -> None:
        """Accept the field as an instance of `cls` or its dict (as read back from JSON)."""
        value = getattr(self, name)
        if isinstance(value, dict):
            object.__setattr__(self, name, cls.from_dict(value))
        elif not isinstance(value, cls):
            raise _bad(name, value, f"a {cls.__name__} (or its dict)")

    def lr_at(self, step: int) -> float:
        """Learning rate of optimizer step `step` (0-based): linear warm-up, then cosine decay."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(1, self.steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        floor = self.min_lr_ratio * self.lr
        return floor + (self.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        check_known_fields(cls, d)
        d = dict(d)
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        return cls(**d)

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)


__all__ = ["RESUMABLE_FIELDS", "TrainConfig"]
