"""`HFCausalLMBackend`: any HuggingFace causal LM behind the backend interface (heads and layers).

Sites, found by module names (override them for unusual architectures):
- Query heads: the input of the attention output projection (`o_proj` in Llama / Qwen / Mistral /
  Gemma, `c_proj` in GPT-2, `dense` in GPT-NeoX), [batch, pos, heads * head_dim] viewed as
  [batch, pos, head, head_dim]: the per-head attention outputs z before they are mixed.
- Layers: the attention module's output (element 0 when it returns a tuple).
KV heads follow `num_key_value_heads` (query head h reads KV head h // (heads / kv_heads)).

Such models have no compressor and so no stride of their own: pass `stride` (the period to test,
e.g. the S of a compressed model the run is compared with); `phase_sweep` then uses it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from phaseinterp.backends.base import Backend, Site, input_head_site
from phaseinterp.backends.incremental import checked_query_pos
from phaseinterp.backends.kv_cache import KVCacheFinalRun, kv_cache_fallback
from phaseinterp.backends.units import BackendConfig

LAYER_PATHS = ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers", "transformer.layers")
ATTN_NAMES = ("self_attn", "attn", "attention", "self_attention")
OUT_NAMES = ("o_proj", "c_proj", "dense", "out_proj")


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def _find(obj: Any, names: tuple[str, ...], what: str) -> str:
    for name in names:
        try:
            _get(obj, name)
            return name
        except (AttributeError, IndexError):
            continue
    raise ValueError(f"could not find the {what} (tried {list(names)}); pass its name explicitly")


def chunked_final_logits(model: torch.nn.Module, tokens: Tensor, query_pos: Tensor, chunk: int) -> Tensor:
    """Logits [batch, vocab] at `query_pos` of each row, reading the prompt `chunk` tokens at a time
    through the model's KV cache and projecting only the needed positions (`logits_to_keep`).

    Peak memory is that of a `chunk`-token forward plus the cache, instead of a full-length
    forward and [batch, pos, vocab] logits. Equal to one full forward up to float rounding (tested
    on tiny DeepSeek-V4 and Qwen3; DeepSeek-V4's top-k indexer can flip between near-tied entries).

    Example:
        >>> from phaseinterp.backends.tiny import tiny_qwen3
        >>> chunked_final_logits(tiny_qwen3(seed=0), tokens, torch.full((len(tokens),), tokens.shape[1] - 1), 8).shape
        torch.Size([8, 512])
    """
    batch, T = tokens.shape
    out = None
    cache = None
    with torch.no_grad():
        for start in range(0, T, chunk):
            end = min(T, start + chunk)
            inside = (query_pos >= start) & (query_pos < end)
            keep = torch.where(inside, query_pos - start, torch.zeros_like(query_pos))[:, None]
            step = model(input_ids=tokens[:, start:end], cache=cache, use_cache=end < T, logits_to_keep=keep.to(tokens.device))
            cache = step.cache if end < T else None
            if out is None:
                out = step.logits.new_zeros(batch, step.logits.shape[-1])
            out[inside.to(out.device)] = step.logits[:, 0][inside.to(out.device)]
    return out


class HFMixin:
    """What every HuggingFace backend shares: plain calls without a cache, logits only at the scored
    positions (`logits_to_keep`), and optional chunked prefill for `final_logits`."""

    prefill_chunk: int | None = None

    def _forward(self, tokens: Tensor) -> Tensor:
        return self.model(input_ids=tokens, use_cache=False).logits

    def _logits(self, output) -> Tensor:
        return output.logits

    def _call_kwargs(self, positions: Tensor | None = None, n_invokes: int = 1) -> dict:
        if positions is None:
            return {"use_cache": False}
        return {"use_cache": False, "logits_to_keep": positions.repeat(n_invokes)[:, None]}

    def _pick(self, logits: Tensor, rows: Tensor, positions: Tensor) -> Tensor:
        return logits[:, 0]  # the call kept only each row's position

    def final_logits(self, tokens: Tensor, query_pos: Tensor, fwd_hooks=(), *, grad: bool = False) -> Tensor:
        """Next-token logits at `query_pos` of each row (`TLCompat.final_logits`); with
        `prefill_chunk` set (and no edits, hooks or gradients), the prompt is read in chunks
        through the KV cache (long contexts)."""
        chunk = self.prefill_chunk
        if chunk is None or self._active or fwd_hooks or grad or tokens.shape[1] <= chunk:
            return super().final_logits(tokens, query_pos, fwd_hooks, grad=grad)
        tokens = self._check_tokens(tokens)
        return chunked_final_logits(self.model, tokens, checked_query_pos(query_pos, tokens), chunk)

    def sweep_logits(self, tokens: Tensor, query_pos: Tensor, prompt_id: Tensor) -> Tensor:
        """Logits at the query positions for the phase sweep: one plain forward over the distinct
        prompts (the rows of a multi-token answer share theirs), projecting the minibatch's query
        positions; `final_logits` of every row instead with edits open, with `prefill_chunk` set, or
        when every prompt projecting every position would cost more than twice the rows' own."""
        from phaseinterp.backends.prompts import distinct_prompts

        first, which = distinct_prompts(prompt_id, tokens)
        kept, where = torch.unique(query_pos.cpu(), return_inverse=True)
        if self._active or self.prefill_chunk is not None or len(first) * len(kept) > 2 * len(query_pos):
            return super().sweep_logits(tokens, query_pos, prompt_id)
        tokens = self._check_tokens(tokens)
        checked_query_pos(query_pos, tokens)
        with torch.no_grad():
            logits = self.model(input_ids=tokens[first.to(tokens.device)], use_cache=False,
                                logits_to_keep=kept.to(tokens.device)).logits
        return logits[which.to(logits.device), where.to(logits.device)]

    @staticmethod
    def _check_chunk(prefill_chunk: int | None) -> int | None:
        if prefill_chunk is not None and (isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int)
                                          or prefill_chunk < 1):
            raise ValueError(f"prefill_chunk={prefill_chunk!r} is invalid: allowed None or an integer >= 1")
        return prefill_chunk


class HFCausalLMBackend(HFMixin, Backend):
    """Backend for any HF causal LM (`model(input_ids).logits`), e.g. `Qwen3ForCausalLM`.

    Args:
        model: the causal LM (random weights from a config, or `from_pretrained`).
        stride: period S for the phase statistics (None: no default period).
        layers, attn, out_proj: module paths, if the defaults do not find them.
        prefill_chunk: read long prompts this many tokens at a time in `final_logits` (None: one
            forward).

    Example:
        >>> from phaseinterp.backends.tiny import tiny_qwen3
        >>> backend = HFCausalLMBackend(tiny_qwen3(seed=0), stride=4)  # a Qwen3ForCausalLM of a tiny config
        >>> backend.head_outputs(tokens[:2, :32]).shape  # [batch, layer, 1, head, head_dim]
        torch.Size([2, 2, 1, 4, 16])
    """

    @classmethod
    def wrap(cls, model, stride: int | None = None) -> "HFCausalLMBackend":
        return cls(model, stride=stride)

    def __init__(self, model: torch.nn.Module, stride: int | None = None, *, layers: str | None = None,
                 attn: str | None = None, out_proj: str | None = None, prefill_chunk: int | None = None) -> None:
        if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int) or stride < 1):
            raise ValueError(f"stride={stride!r} is invalid: allowed None or an integer >= 1")
        hf = getattr(model, "config", None)
        if hf is None:
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed a HF model with a .config")
        self.layers_path = layers or _find(model, LAYER_PATHS, "decoder layer list")
        blocks = _get(model, self.layers_path)
        self.attn_name = attn or _find(blocks[0], ATTN_NAMES, "attention module")
        self.out_name = out_proj or _find(_get(blocks[0], self.attn_name), OUT_NAMES, "attention output projection")
        n_heads = getattr(hf, "num_attention_heads", None) or hf.n_head
        d_model = getattr(hf, "hidden_size", None) or hf.n_embd
        d_head = getattr(hf, "head_dim", None) or d_model // n_heads
        n_kv = getattr(hf, "num_key_value_heads", None) or n_heads
        n = len(blocks)
        cfg = BackendConfig(
            kind="hf", model_class=type(model).__name__, n_layers=n, n_heads=n_heads, n_kv_heads=n_kv,
            d_head=d_head, d_model=d_model, vocab_size=hf.vocab_size, layer_strides=(None,) * n,
            gate_windows=(None,) * n, gate_branches=((),) * n, user_stride=stride,
            n_ctx=getattr(hf, "max_position_embeddings", None) or getattr(hf, "n_positions", None),
        )
        super().__init__(model, cfg)
        self.prefill_chunk = self._check_chunk(prefill_chunk)

    incremental_path = "kv_cache"

    def incremental_ok(self) -> bool:
        """Whether knockout / patching at the final position run through the KV cache
        (`backends.kv_cache`): Llama / Qwen / Mistral decoders without compression, outside `intervene`."""
        return not self.has_hooks() and self.incremental_fallback() is None

    def incremental_fallback(self) -> str | None:
        """Why `incremental_ok` is False for this model (None when the KV-cache path applies)."""
        return kv_cache_fallback(self)

    def final_position_run(self, tokens: Tensor, query_pos: Tensor) -> KVCacheFinalRun:
        return KVCacheFinalRun(self, tokens, query_pos)

    def _site(self, site: str, layer: int, branch: int) -> Site:
        attn = _get(_get(self.nn, self.layers_path)[layer], self.attn_name)
        if site == "head":
            return input_head_site(_get(attn, self.out_name), self.cfg.n_heads, self.cfg.d_head)
        if site == "layer":
            held: dict[str, Any] = {}

            def get() -> Tensor:
                held["out"] = attn.output
                out = held["out"]
                return out if isinstance(out, Tensor) else out[0]

            def set_output(value: Tensor) -> None:
                out = held["out"]
                attn.output = value if isinstance(out, Tensor) else (value, *tuple(out)[1:])

            return Site(get=get, set=set_output)
        raise ValueError(f"{self.cfg.model_class} has no compressor (site {site!r})")
