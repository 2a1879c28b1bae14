"""The Backend entry of the trainer's `HFCausalLM` (family "hf-causal-lm")."""

from __future__ import annotations

from phaseinterp.backends.base import Backend
from phaseinterp.families.hf.backend import HFCausalLMBackend
from phaseinterp.family import backend_of, hf_flavour


class TrainerHFBackend(HFCausalLMBackend):
    """The family entry of the trainer's `HFCausalLM` (`families.hf_causal_lm`): never built itself;
    such a model runs behind the backend of the HF model it holds (`DeepseekV4Backend`, `DSABackend`,
    `HFCausalLMBackend`, ...), chosen by that model's family."""

    @classmethod
    def wrap(cls, model, stride: int | None = None) -> Backend:
        return backend_of(model.hf, stride)

    @classmethod
    def describe_card(cls, model_config: dict) -> list[str]:
        """E.g. ["HF DeepseekV4ForCausalLM", "2 layers (... (rate 8), ... (rate 4))", "hidden 64"]; the
        layers as the flavour of the config's model type phrases them (DSA: its token selection)."""
        hf = model_config["hf_config"]
        flavour = hf_flavour(hf.get("model_type"))
        kinds = None if flavour is None else flavour.describe_hf_layers(hf)
        if kinds is None:
            kinds = ", ".join(f"{t} (rate {hf.get('compress_rates', {}).get(t, '?')})" for t in hf.get("layer_types") or [])
        return [f"HF {model_config.get('architecture')}", f"{hf.get('num_hidden_layers')} layers" + (f" ({kinds})" if kinds else ""),
                f"hidden {hf.get('hidden_size')}"]


__all__ = ["TrainerHFBackend"]
