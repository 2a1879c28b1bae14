"""HuggingFace causal LMs in phaseinterp's trainer: a model spec, a tokens -> logits wrapper and
the model factory the trainer uses.

The trainer needs three things from a model: build it from a config with a seed, map tokens
[batch, pos] to logits [batch, pos, vocab], and save / load it. For our own models that is
`ModelConfig` + `HookedCompressedTransformer`; for a HuggingFace model it is:

- `HFModelSpec`: the architecture name (a transformers causal-LM class, e.g.
  "DeepseekV4ForCausalLM") and the HF config as a plain dict (canonical: the config's own
  `to_dict()`, without `transformers_version` and `_name_or_path`). Frozen, JSON round-trips
  through `to_dict` / `from_dict`, and exposes what the trainer and the measurement code read
  from a config: `vocab_size`, `n_ctx` (`max_position_embeddings`), and for DeepSeek-V4 the
  compressor `strides` and `residue_modulus`.
- `HFCausalLM`: an `nn.Module` holding the HF model as `.hf` and the spec as `.cfg`;
  `forward(tokens)` returns the logits tensor (no KV cache). Its `state_dict` keys are the HF
  model's with an `hf.` prefix; checkpoints store the HF model's own keys.
- `build_model(cfg, seed)`: our model for a `ModelConfig`, an `HFCausalLM` for an `HFModelSpec`
  (or a transformers `PretrainedConfig`, converted by `as_model_config`). The HF model is
  initialized by its own `_init_weights` under `torch.manual_seed(seed)` inside `fork_rng`, so
  building does not touch the caller's random state and the same seed gives the same weights.

Checkpoints (`phaseinterp.checkpoint.save_model` / `load` / `load_hf`) are safetensors with the
HF model's state dict and the spec in the metadata (format "phaseinterp-hf-checkpoint-v1").

Example:
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

#: Fields of an HF config dict that do not describe the model (dropped from the spec).
_VOLATILE = ("transformers_version", "_name_or_path")

#: DeepSeek-V4 layer types with a compressor (compress_rates key = layer type).
_DSV4_COMPRESSED = ("compressed_sparse_attention", "heavily_compressed_attention")
_DSV4_SHORT = {"sliding_attention": "SWA", "compressed_sparse_attention": "CSA", "heavily_compressed_attention": "HCA"}


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
        """Distinct compressor strides (DeepSeek-V4: the compress rate of every CSA / HCA layer
        type in use), sorted; empty for other architectures."""
        if self.hf_config["model_type"] != "deepseek_v4":
            return ()
        rates = self.hf_config.get("compress_rates") or {}
        return tuple(sorted({int(rates[t]) for t in self.hf_config.get("layer_types") or [] if t in _DSV4_COMPRESSED}))

    @property
    def residue_modulus(self) -> int | None:
        """The period of the phase effect (`period_of` the strides); None without compressed layers."""
        return period_of(self.strides)

    def describe(self) -> str:
        """One line, e.g. "HF DeepseekV4ForCausalLM: HCA m=8, CSA m=4, sliding window 16"."""
        if self.hf_config["model_type"] != "deepseek_v4":
            return f"HF {self.architecture}"
        rates = self.hf_config.get("compress_rates") or {}
        parts = [_DSV4_SHORT.get(t, t) + (f" m={rates[t]}" if t in rates else "") for t in self.hf_config["layer_types"]]
        return f"HF {self.architecture}: {', '.join(parts)}, sliding window {self.hf_config['sliding_window']}"

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

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Next-token logits at every position (one full forward, no KV cache)."""
        return self.hf(input_ids=tokens, use_cache=False).logits

    def save(self, path, extra: dict | None = None):
        """Write a checkpoint (`phaseinterp.load` reads it back as an `HFCausalLM`, `load_hf` as the HF model)."""
        from phaseinterp.checkpoint_io import save_model

        return save_model(self, path, extra=extra)


def as_model_config(cfg: Any):
    """The trainer's model config: a `ModelConfig` or `HFModelSpec` as is, a transformers
    `PretrainedConfig` as its `HFModelSpec`; anything else raises ValueError."""
    from phaseinterp.config import ModelConfig
    from phaseinterp.model.nsa.config import NSAConfig

    if isinstance(cfg, (ModelConfig, HFModelSpec, NSAConfig)):
        return cfg
    if type(cfg).__module__.startswith("transformers."):
        from transformers import PretrainedConfig

        if isinstance(cfg, PretrainedConfig):
            return HFModelSpec.from_config(cfg)
    raise ValueError(f"model_cfg={type(cfg).__name__} is invalid: allowed a ModelConfig, an HFModelSpec, an "
                     "NSAConfig or a transformers PretrainedConfig")


def build_model(cfg: Any, seed: int) -> torch.nn.Module:
    """A fresh model for `cfg` (see `as_model_config`), initialized from `seed`."""
    cfg = as_model_config(cfg)
    if isinstance(cfg, HFModelSpec):
        return cfg.build(seed)
    from phaseinterp.model.nsa.config import NSAConfig

    if isinstance(cfg, NSAConfig):
        from phaseinterp.model.nsa.transformer import NSATransformer

        return NSATransformer(cfg, seed=seed)
    from phaseinterp.model import HookedCompressedTransformer

    return HookedCompressedTransformer(cfg, seed=seed)


def model_config_from_dict(d: dict[str, Any]):
    """A `ModelConfig`, `HFModelSpec` or `NSAConfig` from its `to_dict()` (as stored in checkpoints and cards)."""
    from phaseinterp.model.nsa.config import NSAConfig

    if HFModelSpec.is_spec_dict(d):
        return HFModelSpec.from_dict(d)
    if NSAConfig.is_nsa_dict(d):
        return NSAConfig.from_dict(d)
    from phaseinterp.config import ModelConfig

    return ModelConfig.from_dict(d)


def tiny_deepseek_v4_spec(vocab_size: int = 256, *, hidden_size: int = 64, head_dim: int = 128, rope_dims: int = 16,
                          sliding_window: int = 16,
                          csa_rate: int = 4, hca_rate: int = 8, n_ctx: int = 128,
                          layer_types: tuple[str, ...] = ("heavily_compressed_attention", "compressed_sparse_attention"),
                          hc_sinkhorn_iters: int = 5) -> HFModelSpec:
    """A tiny DeepSeek-V4 (HF code) for 64-token record lookup; the model of recipe "hf-deepseek-v4".

    Two layers, an HCA layer (W = S = `hca_rate`) then a CSA layer (m = `csa_rate`, W = 2m), like
    V4's schedule that opens with HCA; every layer also has the exact sliding window of
    `sliding_window` tokens (current included, as our `local_window`). Hidden 64, 4 query heads of
    `head_dim` = 128 over the one shared K = V head, RoPE on 16 of the 128 dims (V4: 64 of 512), a
    per-head sink, mHC with 4 streams, MoE with 4 routed experts (2 per token) + 1 shared expert,
    all routed by the learned router (no hash layers: their token -> expert table is a checkpoint
    constant, zero at init). About 0.37M parameters.

    Why head_dim 128 and not 32: V4 RMS-normalizes queries without a weight and K = V with one,
    so the largest attention logit is about sqrt(head_dim) x the norm weight (5.7 at 32, 11.3 at
    128; V4: 22.6). At 32 a query cannot single out one of ~30 keys until the norm weights have
    grown: the same recipe with head_dim 32 reached 6% query accuracy at step 675 (40% with 128)
    and only 15% on the far lookup after 2000 steps.

    Departures from V4-Flash, all size or speed: HCA's rate is 8, not 128 (a 64-token row has no
    complete 128-token window); the lightning indexer keeps `index_topk = n_ctx / csa_rate`
    entries, i.e. every visible one (V4 keeps 512 of up to 32K; with fewer kept the top-k flips
    between near-ties under rounding and training is not reproducible); Sinkhorn runs 5
    iterations instead of 20 (40% of a CPU step otherwise).
    """
    from transformers import DeepseekV4Config

    n = len(layer_types)
    config = DeepseekV4Config(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=n, num_attention_heads=4, head_dim=head_dim,
        qk_rope_head_dim=rope_dims, q_lora_rank=hidden_size, o_groups=2, o_lora_rank=hidden_size // 2,
        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden_size, n_shared_experts=1,
        layer_types=list(layer_types), mlp_layer_types=["moe"] * n,
        compress_rates={"compressed_sparse_attention": csa_rate, "heavily_compressed_attention": hca_rate},
        sliding_window=sliding_window, index_n_heads=2, index_head_dim=16, index_topk=n_ctx // csa_rate,
        max_position_embeddings=n_ctx, hc_sinkhorn_iters=hc_sinkhorn_iters, bos_token_id=0, eos_token_id=None,
        architectures=["DeepseekV4ForCausalLM"])
    return HFModelSpec.from_config(config)


__all__ = ["HFCausalLM", "HFModelSpec", "as_model_config", "build_model", "model_config_from_dict",
           "tiny_deepseek_v4_spec"]
