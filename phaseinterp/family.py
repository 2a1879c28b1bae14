"""Model families: what a model is, decided in one place.

A `ModelFamily` names everything the rest of the library asks about a kind of model: the
checkpoint format(s) it writes, how to read its config and build it, how to recognise an instance,
which backend wraps it, its converter to our model (if any) and whether the trainer can train it.
The records live in `FAMILIES` (the `Registry` type of gate kinds and layouts); the built-in
families are defined on the model floor (`phaseinterp.families`, one module each) and register
themselves when that package is imported. Consumers import `phaseinterp.families`, whose lookups
are the functions below.

Example:
    >>> import phaseinterp.families  # registers the built-in families
    >>> family_of_format("phaseinterp-checkpoint-v1").name
    'hooked'
    >>> family_of_model(model).name, backend_of(model).cfg.strides
    ('hooked', (4,))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from phaseinterp.registry import Registry


@dataclass(frozen=True)
class ModelFamily:
    """One kind of model.

    Attributes:
        name: the family's name ("hooked", "hf-causal-lm", "nsa", "deepseek-v4", ...).
        recognizes: whether an object is a model of this family (None: a flavour only, whose
            models run as another family's, e.g. Qwen3 as any HF causal LM).
        backend: `(model, stride) -> Backend` (stride: the period to test, for models without
            compressors; a family that takes none raises on a stride); None: no backend.
        formats: checkpoint format strings it reads; the first is the one its models write.
        as_config: its config for an object (its config type, a stored config dict, a foreign
            config it converts), or None when the object is not one of its configs.
        build: `(config, seed) -> model`; `seed=None` when weights are loaded right after.
        weights: the module whose state dict a checkpoint holds (default: the model itself).
        runnable: what experiments (verbs, sweeps, interventions) run on (default: the model
            itself; HF models: their backend).
        converter: a function turning one of its models into our `HookedCompressedTransformer`.
        trainable: the trainer can train it (then `as_config`, `build` and a format are set).
        mitigations: training-time mitigations act on its compressors.
        compile: the trainer may `torch.compile` its forward.
        data_parallel: the trainer may run it with DDP.
        fallback: tried only after every other family (e.g. "any HF causal LM").
        hf_model_type: a HuggingFace `model_type` whose configs this family describes (HF flavours).
        layer_strides: `(hf config) -> per-layer compressor stride or None` of that model type.
        describe: `(hf config dict) -> str`, a one-line description of that model type's schedule.
        on_wrap: `(hf model) -> None`, called when the trainer's `HFCausalLM` wraps a model of that
            model type (DSA: the indexer's training loss hooks).
    """

    name: str
    recognizes: Callable[[Any], bool] | None = None
    backend: Callable[[Any, int | None], Any] | None = None
    formats: tuple[str, ...] = ()
    as_config: Callable[[Any], Any] | None = None
    build: Callable[[Any, int | None], Any] | None = None
    weights: Callable[[Any], Any] = lambda model: model
    runnable: Callable[[Any], Any] = lambda model: model
    converter: Callable[..., Any] | None = None
    trainable: bool = False
    mitigations: bool = False
    compile: bool = False
    data_parallel: bool = False
    fallback: bool = False
    hf_model_type: str | None = None
    layer_strides: Callable[[Any], tuple[int | None, ...]] | None = None
    describe: Callable[[dict], str] | None = None
    on_wrap: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} is invalid: allowed a non-empty string")
        if self.trainable and (self.as_config is None or self.build is None or not self.formats):
            raise ValueError(f"family {self.name!r} is trainable but lacks as_config, build or a format: allowed "
                             "trainable=True only with all three")


FAMILIES: Registry[ModelFamily] = Registry(ModelFamily, "model family", "family", "family")


def register_family(family: ModelFamily) -> ModelFamily:
    """Add a family (a name already taken raises ValueError); returns it."""
    return FAMILIES.register(family)


def _ordered() -> list[ModelFamily]:
    return sorted(FAMILIES, key=lambda f: f.fallback)


def family_of_format(fmt: Any) -> ModelFamily:
    """The family whose checkpoints carry format `fmt`; ValueError naming the known formats otherwise."""
    for family in FAMILIES:
        if fmt in family.formats:
            return family
    raise ValueError(f"format={fmt!r} is invalid: allowed one of {known_formats()}")


def known_formats() -> list[str]:
    return [f for family in FAMILIES for f in family.formats]


def family_of_model(model: Any) -> ModelFamily:
    """The family of a model instance (specific families before fallbacks)."""
    for family in _ordered():
        if family.recognizes is not None and family.recognizes(model):
            return family
    raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a model of a registered family "
                     f"{[f.name for f in FAMILIES]}, or a Backend")


def family_of_config(config: Any) -> tuple[ModelFamily, Any]:
    """(family, its config object) for a config object or a stored config dict."""
    for family in _ordered():
        if family.as_config is not None and (cfg := family.as_config(config)) is not None:
            return family, cfg
    kind = sorted(config) if isinstance(config, dict) else type(config).__name__
    raise ValueError(f"model config {kind} is invalid: allowed the config of a registered family "
                     f"{[f.name for f in FAMILIES if f.as_config is not None]}")


def config_from_dict(d: dict[str, Any]) -> Any:
    """The config object of a stored config dict (as checkpoints and cards hold it)."""
    return family_of_config(d)[1]


def build_model(config: Any, seed: int) -> Any:
    """A fresh model for `config` (any family's config), initialized from `seed`."""
    family, cfg = family_of_config(config)
    if family.build is None:
        raise ValueError(f"family {family.name!r} cannot build a model from a config: allowed a family with build")
    return family.build(cfg, seed)


def backend_of(model: Any, stride: int | None = None) -> Any:
    """The backend of a model instance, through its family."""
    family = family_of_model(model)
    if family.backend is None:
        raise ValueError(f"family {family.name!r} has no backend: allowed a model of "
                         f"{[f.name for f in FAMILIES if f.backend is not None]}")
    return family.backend(model, stride)


def hf_flavour(model_type: str) -> ModelFamily | None:
    """The family describing HuggingFace `model_type` (its compressor strides), if one is registered."""
    return next((f for f in FAMILIES if f.hf_model_type == model_type), None)


def no_stride(what: str, stride: int | None) -> None:
    """Refuse a `stride` for a model whose strides come from its config."""
    if stride is not None:
        raise ValueError(f"stride={stride} is invalid for {what}: allowed None (its strides come from its config)")


__all__ = ["FAMILIES", "ModelFamily", "backend_of", "build_model", "config_from_dict", "family_of_config",
           "family_of_format", "family_of_model", "hf_flavour", "known_formats", "no_stride", "register_family"]
