"""The Backend entry of the trainer's `HFCausalLM` (family "hf-causal-lm")."""

from __future__ import annotations

from phaseinterp.backends.base import Backend
from phaseinterp.families.hf.backend import HFCausalLMBackend
from phaseinterp.family import backend_of


class TrainerHFBackend(HFCausalLMBackend):
    """The family entry of the trainer's `HFCausalLM` (`families.hf_causal_lm`): never built itself;
    such a model runs behind the backend of the HF model it holds (`DeepseekV4Backend`, `DSABackend`,
    `HFCausalLMBackend`, ...), chosen by that model's family."""

    @classmethod
    def wrap(cls, model, stride: int | None = None) -> Backend:
        return backend_of(model.hf, stride)


__all__ = ["TrainerHFBackend"]
