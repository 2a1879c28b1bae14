"""Model families: what a model is, decided in one place.

A `ModelFamily` names what every kind of model has: how to recognise an instance, its Backend
class, the checkpoint format(s) it writes, how to read its config and build it, and the module a
checkpoint stores. What a model *can do* (train with mitigations, compile, run data parallel,
describe an HF config, ...) is asked of its Backend class (`phaseinterp.backends.base.Backend`'s
methods, with defaults), never stored here. The records live in `FAMILIES` (the `Registry` type of
gate kinds and layouts); the built-in families are defined on the model floor
(`phaseinterp.families`, one module or folder each, named in one list) and register themselves
when that package is imported. Consumers import `phaseinterp.families`, whose lookups are the
functions below; what a model runs on is decided by `phaseinterp.families.resolve` alone.

Example:
    >>> import phaseinterp.families  # registers the built-in families
    >>> family_of_format("phaseinterp-checkpoint-v1").name
    'hooked'
    >>> family_of_model(model).name, backend_of(model).cfg.strides
    ('hooked', (4,))
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from phaseinterp.registry import Registry


def _same(model: Any) -> Any:
    return model


@dataclass(frozen=True)
class ModelFamily:
    """One kind of model.

    Attributes:
        name: the family's name ("hooked", "hf-causal-lm", "nsa", "deepseek-v4", ...).
        backend: its Backend class, or its dotted path ("package.module.Class") (imported on first use, so that
            registering a family loads no backend library); `backend.wrap(model, stride)` builds
            one (stride: the period to test, for models without compressors); None: no backend.
        recognizes: whether an object is a model of this family (None: a flavour only, whose
            models run as another family's, e.g. DSA configs inside the trainer's HF models).
        formats: checkpoint format strings it reads; the first is the one its models write.
        as_config: its config for an object (its config type, a stored config dict, a foreign
            config it converts), or None when the object is not one of its configs.
        build: `(config, seed) -> model`; `seed=None` when weights are loaded right after.
        weights: the module whose state dict a checkpoint holds (default: the model itself).
        fallback: tried only after every other family (e.g. "any HF causal LM").
    """

    name: str
    backend: Any = None
    recognizes: Callable[[Any], bool] | None = None
    formats: tuple[str, ...] = ()
    as_config: Callable[[Any], Any] | None = None
    build: Callable[[Any, int | None], Any] | None = None
    weights: Callable[[Any], Any] = _same
    fallback: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} is invalid: allowed a non-empty string")
        if isinstance(self.backend, str) and "." not in self.backend:
            raise ValueError(f"backend={self.backend!r} is invalid: allowed a Backend class or its dotted path "
                             "'package.module.Class'")

    @property
    def trainable(self) -> bool:
        """The trainer can train it: it reads a config, builds from it and writes a format."""
        return self.as_config is not None and self.build is not None and bool(self.formats)

    def backend_class(self) -> Any:
        """Its Backend class (imported now when named by a string); ValueError when it has none."""
        if self.backend is None:
            raise ValueError(f"family {self.name!r} has no backend: allowed a model of "
                             f"{[f.name for f in FAMILIES if f.backend is not None]}")
        if isinstance(self.backend, str):
            module, _, cls = self.backend.rpartition(".")
            return getattr(importlib.import_module(module), cls)
        return self.backend


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


def find_family(model: Any) -> ModelFamily | None:
    """The family of a model instance (specific families before fallbacks), or None."""
    return next((f for f in _ordered() if f.recognizes is not None and f.recognizes(model)), None)


def family_of_model(model: Any) -> ModelFamily:
    """The family of a model instance (specific families before fallbacks); ValueError otherwise."""
    family = find_family(model)
    if family is None:
        raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a model of a registered family "
                         f"{[f.name for f in FAMILIES]}, or a Backend")
    return family


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
    """The backend of a model instance, through its family (`Backend.wrap`)."""
    return family_of_model(model).backend_class().wrap(model, stride)


def hf_flavour(model_type: str) -> Any | None:
    """The Backend class describing HuggingFace `model_type` (its compressor strides, its schedule, what
    the trainer installs when it wraps one), if a registered family's Backend claims it."""
    for family in FAMILIES:
        if family.backend is not None and family.recognizes is not None:
            cls = family.backend_class()
            if model_type in cls.hf_model_types():
                return cls
    return None


def no_stride(what: str, stride: int | None) -> None:
    """Refuse a `stride` for a model whose strides come from its config."""
    if stride is not None:
        raise ValueError(f"stride={stride} is invalid for {what}: allowed None (its strides come from its config)")


__all__ = ["FAMILIES", "ModelFamily", "backend_of", "build_model", "config_from_dict", "family_of_config",
           "family_of_format", "family_of_model", "find_family", "hf_flavour", "known_formats", "no_stride",
           "register_family"]
