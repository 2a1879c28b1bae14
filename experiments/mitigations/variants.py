"""The mitigation variants (the equal-budget comparison of `experiments/mitigations`): one baseline, architectural options and
training-time options, all on the shipped W4/S4 recipe (`phaseinterp.train.recipes`) so that they
differ from the baseline in one thing only and train at equal budget (steps, batch, data, seeds).

    baseline        W4/S4, scalar gates                           1/4 entries per token
    random-offsets  + chunk grid shifted per training sequence    1/4
    multi-offset    + 2 chunkings shifted by S/2, own gates        2/4
    overlap         W8/S4 (overlapping windows, the paper's own)   1/4
    overlap-s2      W4/S2 (memory-matched to multi-offset)         2/4
    coverage        + coverage regularizer on key-gate phases      1/4   (weight 0.1; -weak: 0.01)
    entropy         + static gate entropy regularizer              1/4   (weight 0.1; -weak: 0.01)
    full            full attention, the uncompressed reference     1 (every token)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from phaseinterp.config import ModelConfig
    from phaseinterp.train.config import TrainConfig

#: Regularizer weights, two values each (not tuned further: the loss is ~0.1-5 nats, the penalties
#: are in [0, 1] and [0, log W]).
COVERAGE_WEIGHT = 0.1
ENTROPY_WEIGHT = 0.1
WEAK_WEIGHT = 0.01


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    model_changes: dict[str, Any]  # CompressionConfig fields changed in every compressed layer
    mitigation: dict[str, Any] = dataclasses.field(default_factory=dict)  # Mitigation fields (none: no mitigation)
    base: str = "w4s4"  # recipe the variant starts from

    def configs(self, seed: int, steps: int | None = None) -> tuple[ModelConfig, TrainConfig]:
        from phaseinterp.train.mitigation import Mitigation
        from phaseinterp.train.recipes import recipe

        model_cfg, tcfg = recipe(self.base)
        if self.model_changes:
            layers = tuple(s if s == "full" else dataclasses.replace(s, **self.model_changes) for s in model_cfg.layers)
            model_cfg = model_cfg.replace(layers=layers)
        changes: dict[str, Any] = {"seed": seed, "mitigation": Mitigation(**self.mitigation)}
        if steps is not None:
            changes.update(steps=steps, warmup_steps=min(tcfg.warmup_steps, max(1, steps // 10)),
                           checkpoint_every=min(tcfg.checkpoint_every, steps),
                           mixture=dataclasses.replace(tcfg.mixture,
                                                       curriculum_steps=min(tcfg.mixture.curriculum_steps, steps)))
        return model_cfg, tcfg.replace(**changes)


VARIANTS: dict[str, Variant] = {v.name: v for v in [
    Variant("baseline", "W4/S4, the shipped recipe", {}),
    Variant("random-offsets", "chunk grid shifted by a random offset per training sequence", {},
            {"random_offsets": True}),
    Variant("multi-offset", "two chunk grids shifted by S/2, each with its own gates (2x entries)", {"chunkings": 2}),
    Variant("overlap", "overlapping windows W8/S4", {"window": 8}),
    Variant("overlap-s2", "W4/S2: windows every 2 tokens (2x entries, memory-matched to multi-offset)", {"stride": 2}),
    Variant("coverage", f"coverage regularizer, weight {COVERAGE_WEIGHT}", {},
            {"coverage_weight": COVERAGE_WEIGHT}),
    Variant("entropy", f"static gate-entropy regularizer, weight {ENTROPY_WEIGHT}", {},
            {"entropy_weight": ENTROPY_WEIGHT}),
    Variant("coverage-weak", f"coverage regularizer, weight {WEAK_WEIGHT}", {}, {"coverage_weight": WEAK_WEIGHT}),
    Variant("entropy-weak", f"static gate-entropy regularizer, weight {WEAK_WEIGHT}", {},
            {"entropy_weight": WEAK_WEIGHT}),
    Variant("full", "full attention (reference)", {}, base="full"),
]}


def variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}: allowed {list(VARIANTS)}")
    return VARIANTS[name]


def entries_per_token(model_cfg: ModelConfig) -> float:
    """Cache entries per token and KV head averaged over layers, at long context (local windows
    and sinks are constant in the context length): k/S for a compressed layer, 1 for full."""
    per_layer = [1.0 if s == "full" else s.entries_per_token for s in model_cfg.layers]
    return sum(per_layer) / len(per_layer)


__all__ = ["COVERAGE_WEIGHT", "ENTROPY_WEIGHT", "WEAK_WEIGHT", "VARIANTS", "Variant", "entries_per_token", "variant"]
