"""The family of HuggingFace causal LMs trained by phaseinterp's trainer (checkpoint format
"phaseinterp-hf-checkpoint-v1"): a model spec and a tokens -> logits wrapper.

The trainer needs three things from a model: build it from a config with a seed, map tokens
[batch, pos] to logits [batch, pos, vocab], and save / load it. For a HuggingFace model that is:

- `HFModelSpec`: the architecture name (a transformers causal-LM class, e.g.
  "DeepseekV4ForCausalLM") and the HF config as a plain dict (canonical: the config's own
  `to_dict()`, without `transformers_version` and `_name_or_path`). Frozen, JSON round-trips
  through `to_dict` / `from_dict`, and exposes what the trainer and the measurement code read
  from a config: `vocab_size`, `n_ctx` (`max_position_embeddings`), and the compressor `strides`
  and `residue_modulus` of a flavour with compressors (the Backend class of a registered family
  whose `hf_model_types()` names the config's, e.g. `DeepseekV4Backend`; none for Qwen3 or Llama).
- `HFCausalLM`: an `nn.Module` holding the HF model as `.hf` and the spec as `.cfg`;
  `forward(tokens)` returns the logits tensor (no KV cache). Its `state_dict` keys are the HF
  model's with an `hf.` prefix; checkpoints store the HF model's own keys. The HF model is
  initialized by its own `_init_weights` under `torch.manual_seed(seed)` inside `fork_rng`, so
  building does not touch the caller's random state and the same seed gives the same weights.

Checkpoints (`model.save(path)`, `phaseinterp.load` / `phaseinterp.checkpoint.load_hf`) are
safetensors with the HF model's state dict and the spec in the metadata.

Example:
    >>> from phaseinterp.families.deepseek_v4 import tiny_deepseek_v4_spec
    >>> spec = tiny_deepseek_v4_spec()
    >>> spec.architecture, spec.vocab_size, spec.strides, spec.residue_modulus
    ('DeepseekV4ForCausalLM', 256, (4, 8), 8)
    >>> model = spec.build(seed=0)
    >>> model(torch.zeros(2, 64, dtype=torch.long)).shape
    torch.Size([2, 64, 256])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.config import period_of
from phaseinterp.family import ModelFamily, hf_flavour, register_family

HF_FORMAT = "phaseinterp-hf-checkpoint-v1"

#: Fields of an HF config dict that do not describe the model (dropped from the spec).
_VOLATILE = ("transformers_version", "_name_or_path")


def _causal_lm_classes() -> dict[str, str]:
    """model_type -> causal-LM class name, from transformers' auto mapping."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _config_class(model_type: str):
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ValueError(f"hf_config model_type={model_type!r} is invalid: this transformers has no such model type")
    return CONFIG_MAPPING[model_type]


def _canonical_config(config) -> dict[str, Any]:
    d = json.loads(json.dumps(config.to_dict()))
    for key in _VOLATILE:
        d.pop(key, None)
    return d


@dataclass(frozen=True)
class HFModelSpec:
    """A HuggingFace causal LM to train: architecture class name + HF config dict.

    Attributes:
        architecture: a transformers causal-LM class name, e.g. "DeepseekV4ForCausalLM".
        hf_config: the HF config as a dict (with "model_type"); canonicalized on construction
            (rebuilt through the config class, `transformers_version` and `_name_or_path` dropped).

    Raises:
        ValueError: an unknown architecture or model type, an architecture that does not belong
            to the config's model type, or a config the config class rejects.
    """

    architecture: str
    hf_config: dict

    def __post_init__(self) -> None:
        classes = _causal_lm_classes()
        if not isinstance(self.architecture, str) or self.architecture not in set(classes.values()):
            raise ValueError(f"architecture={self.architecture!r} is invalid: allowed a transformers causal-LM class "
                             "name, e.g. 'DeepseekV4ForCausalLM' or 'Qwen3ForCausalLM'")
        if not isinstance(self.hf_config, dict) or "model_type" not in self.hf_config:
            raise ValueError(f"hf_config={type(self.hf_config).__name__} is invalid: allowed a dict with 'model_type' "
                             "(a transformers config's to_dict())")
        model_type = self.hf_config["model_type"]
        if classes.get(model_type) != self.architecture:
            raise ValueError(f"architecture={self.architecture!r} is invalid for hf_config model_type={model_type!r}: "
                             f"allowed {classes.get(model_type)!r}")
        fields = {k: v for k, v in self.hf_config.items() if k not in ("model_type", *_VOLATILE)}
        try:
            config = _config_class(model_type).from_dict(fields)
        except (TypeError, ValueError) as e:
            raise ValueError(f"hf_config is invalid for {self.architecture}: {e}") from e
        object.__setattr__(self, "hf_config", _canonical_config(config))

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_config(cls, config, architecture: str | None = None) -> "HFModelSpec":
        """Spec of a transformers `PretrainedConfig` (architecture: `config.architectures[0]` when
        set, else the causal-LM class of its model type)."""
        if architecture is None:
            archs = getattr(config, "architectures", None) or []
            architecture = archs[0] if archs else _causal_lm_classes().get(config.model_type)
        return cls(architecture, config.to_dict())

    def hf_config_object(self):
        """A fresh transformers config object."""
        fields = {k: v for k, v in self.hf_config.items() if k != "model_type"}
        return _config_class(self.hf_config["model_type"]).from_dict(fields)

    def model_class(self):
        import transformers

        return getattr(transformers, self.architecture)

    def build(self, seed: int = 0) -> "HFCausalLM":
        """A randomly initialized model (the HF class's own init, seeded; the global RNG is left alone)."""
        return HFCausalLM(self, seed=seed)

    def replace(self, **changes: Any) -> "HFModelSpec":
        """A copy with HF config fields changed (e.g. `spec.replace(hidden_size=32)`)."""
        return HFModelSpec(self.architecture, {**self.hf_config, **changes})

    # ---- what the trainer and the measurement code read --------------------------------------

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config["vocab_size"])

    @property
    def n_ctx(self) -> int:
        """Longest input the trainer accepts: `max_position_embeddings` (or `n_positions`)."""
        for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
            if self.hf_config.get(key):
                return int(self.hf_config[key])
        return 2**31 - 1

    @property
    def n_layers(self) -> int:
        return int(self.hf_config.get("num_hidden_layers", 0))

    @property
    def strides(self) -> tuple[int, ...]:
        """Distinct compressor strides of the layers, sorted (from the flavour of the config's
        model type, e.g. DeepSeek-V4's compress rates); empty for a model type without one."""
        flavour = hf_flavour(self.hf_config["model_type"])
        strides = None if flavour is None else flavour.hf_layer_strides(self.hf_config)
        return () if strides is None else tuple(sorted({s for s in strides if s is not None}))

    @property
    def residue_modulus(self) -> int | None:
        """The period of the phase effect (`period_of` the strides); None without compressed layers."""
        return period_of(self.strides)

    def describe(self) -> str:
        """One line, e.g. "HF DeepseekV4ForCausalLM: HCA m=8, CSA m=4, sliding window 16"."""
        flavour = hf_flavour(self.hf_config["model_type"])
        schedule = None if flavour is None else flavour.describe_hf(self.hf_config)
        return f"HF {self.architecture}" if schedule is None else f"HF {self.architecture}: {schedule}"

    # ---- serialization -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "hf_config": json.loads(json.dumps(self.hf_config))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HFModelSpec":
        if not isinstance(d, dict) or set(d) != {"architecture", "hf_config"}:
            keys = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"an HF model spec is a dict with keys ['architecture', 'hf_config']; got {keys}")
        return cls(d["architecture"], d["hf_config"])

    @staticmethod
    def is_spec_dict(d: Any) -> bool:
        """True for a dict written by `to_dict` (how checkpoints and cards tell HF models apart)."""
        return isinstance(d, dict) and "hf_config" in d and "architecture" in d


class HFCausalLM(torch.nn.Module):
    """A HuggingFace causal LM as a tokens -> logits module for the trainer and the measurements.

    Attributes:
        cfg: the `HFModelSpec`.
        hf: the HF model (e.g. a `DeepseekV4ForCausalLM`); hand it to `phaseinterp.backends.backend_for`
            for nnsight interventions, or `hf.save_pretrained(folder)` for an HF model folder.
    """

    is_hf_causal_lm = True

    def __init__(self, spec: HFModelSpec, *, seed: int = 0, hf_model: Any = None) -> None:
        super().__init__()
        self.cfg = spec
        if hf_model is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                hf_model = spec.model_class()(spec.hf_config_object())
        self.hf = hf_model
        flavour = hf_flavour(spec.hf_config["model_type"])
        if flavour is not None:
            flavour.prepare_hf_training(hf_model)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Next-token logits at every position (one full forward, no KV cache)."""
        return self.hf(input_ids=tokens, use_cache=False).logits

    def save(self, path, extra: dict | None = None):
        """Write a checkpoint (`phaseinterp.load` reads it back as an `HFCausalLM`, `load_hf` as the HF model)."""
        import transformers

        from phaseinterp.checkpoint_io import save_model

        return save_model(self, path, extra=extra, fmt=HF_FORMAT, module=self.hf,
                          metadata={"transformers_version": transformers.__version__})


def _as_config(obj: Any) -> HFModelSpec | None:
    """An `HFModelSpec` as is, its stored dict, or a transformers `PretrainedConfig` converted."""
    if isinstance(obj, HFModelSpec):
        return obj
    if HFModelSpec.is_spec_dict(obj):
        return HFModelSpec.from_dict(obj)
    if type(obj).__module__.startswith("transformers."):
        from transformers import PretrainedConfig

        if isinstance(obj, PretrainedConfig):
            return HFModelSpec.from_config(obj)
    return None


def _build(spec: HFModelSpec, seed: int | None) -> HFCausalLM:
    return spec.build(0 if seed is None else seed)


def _hf(model: HFCausalLM) -> Any:
    return model.hf


FAMILY = register_family(ModelFamily(
    name="hf-causal-lm", backend="phaseinterp.families.hf_causal_lm.backend.TrainerHFBackend", recognizes=lambda m: isinstance(m, HFCausalLM),
    formats=(HF_FORMAT,), as_config=_as_config, build=_build, weights=_hf))

__all__ = ["FAMILY", "HFCausalLM", "HFModelSpec", "HF_FORMAT"]
