"""`NSATransformer`: our hooked decoder (embedding, RMSNorm, SwiGLU, unembedding, TransformerLens
hook names) with NSA attention in every block.

Example:
    >>> from phaseinterp.model.nsa import NSAConfig, NSATransformer
    >>> model = NSATransformer(NSAConfig(num_selected=1), seed=0)
    >>> logits, cache = model.run_with_cache(torch.zeros(1, 32, dtype=torch.long))
    >>> cache["blocks.1.attn.select.hook_indices"].shape   # batch, pos, kv_head, k
    torch.Size([1, 32, 2, 1])
"""

from __future__ import annotations

import os
from typing import Any, Callable, Literal

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import ActivationCache, HookedRootModule

from phaseinterp.model.hook_point import HookPoint, missing_hook_point
from phaseinterp.model.layers import RMSNorm
from phaseinterp.model.nsa.attention import NSAAttention
from phaseinterp.model.nsa.config import NSA_FORMAT, NSAConfig
from phaseinterp.model.transformer import MLP


class NSABlock(nn.Module):
    def __init__(self, cfg: NSAConfig, layer: int):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, cfg.norm_eps, hooked=True)
        self.attn = NSAAttention(cfg, layer)
        self.ln2 = RMSNorm(cfg.d_model, cfg.norm_eps, hooked=True)
        self.mlp = MLP(cfg.d_model, cfg.d_mlp)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, resid: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        resid = self.hook_resid_pre(resid)
        resid = self.hook_resid_mid(resid + self.hook_attn_out(self.attn(self.ln1(resid))))
        return self.hook_resid_post(resid + self.hook_mlp_out(self.mlp(self.ln2(resid))))


class NSATransformer(HookedRootModule):
    """Decoder-only transformer with Native Sparse Attention and TransformerLens hooks.

    `forward(tokens)` returns logits [batch, pos, vocab]. Weights: NSA's modules keep the
    library's initialization; embeddings, MLPs and the unembedding are Normal(0, init_std)
    (MLP output scaled by 1/sqrt(2 n_layers)); all drawn from `seed` without touching the
    caller's random state.
    """

    is_nsa = True

    def __init__(self, cfg: NSAConfig, seed: int | None = 0):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.W_E = nn.Parameter(torch.randn(cfg.vocab_size, cfg.d_model) * cfg.init_std)
            self.hook_embed = HookPoint()
            self.blocks = nn.ModuleList(NSABlock(cfg, layer) for layer in range(cfg.n_layers))
            self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps, hooked=True)
            self.W_U = nn.Parameter(torch.randn(cfg.d_model, cfg.vocab_size) * cfg.init_std)
            with torch.no_grad():
                for block in self.blocks:
                    for name, p in block.mlp.named_parameters():
                        scale = cfg.init_std / (2 * cfg.n_layers) ** 0.5 if name == "W_out" else cfg.init_std
                        p.copy_(torch.randn(p.shape) * scale)
        self.setup()

    def forward(self, tokens: Int[Tensor, "batch pos"], return_type: Literal["logits", "loss"] | None = "logits") -> Any:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens {shape} are invalid: allowed an integer tensor [batch, pos]")
        if not 1 <= tokens.shape[1] <= self.cfg.n_ctx:
            raise ValueError(f"sequence length {tokens.shape[1]} is invalid: allowed 1..n_ctx={self.cfg.n_ctx}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size):
            raise ValueError(f"token ids out of range: allowed 0..{self.cfg.vocab_size - 1}")
        if return_type not in ("logits", "loss", None):
            raise ValueError(f"return_type={return_type!r} is invalid: allowed 'logits', 'loss' or None")
        resid = self.hook_embed(self.W_E[tokens])
        for block in self.blocks:
            resid = block(resid)
        logits = self.ln_final(resid) @ self.W_U
        if return_type == "loss":
            return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        return logits if return_type else None

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, ActivationCache]:
        """As TransformerLens: (output, ActivationCache)."""
        out, cache = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    def check_hook_name(self, name: str) -> None:
        """KeyError with the nearest valid names when `name` is not a hook point."""
        if name not in self.hook_dict:
            raise missing_hook_point(name, list(self.hook_dict), "docs/nsa.md")

    def _enable_hook_with_name(self, name: str, hook: Callable, dir: Literal["fwd", "bwd"]) -> None:
        self.check_hook_name(name)
        super()._enable_hook_with_name(name, hook, dir)

    def save(self, path: str | os.PathLike, extra: dict | None = None):
        """Write weights and config (safetensors, atomically); `phaseinterp.load` reads it back."""
        from phaseinterp.checkpoint_io import save_model

        return save_model(self, path, extra=extra, fmt=NSA_FORMAT)


__all__ = ["NSABlock", "NSATransformer"]
