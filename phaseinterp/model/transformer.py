"""HookedCompressedTransformer: a Qwen3-style decoder whose layers attend fully or through a
chunk-compressed KV cache, with TransformerLens hook points everywhere (see docs/hooks.md)."""

from __future__ import annotations

import os
from typing import Any, Callable, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from phaseinterp.config import ModelConfig
from phaseinterp.model.attention import Attention
from phaseinterp.model.compressor import Compressor
from phaseinterp.model.layers import RMSNorm
from transformer_lens import ActivationCache, HookedRootModule
from phaseinterp.model.hook_point import HookPoint, missing_hook_point
from phaseinterp.model.static import tracing
from phaseinterp.model.vocab import TokenNames


class MLP(nn.Module):
    """SwiGLU: `W_out(silu(x W_gate) * (x W_in))`; `hook_pre` is the gate pre-activation,
    `hook_post` the product fed to W_out, both [batch, pos, d_mlp]."""

    def __init__(self, d_model: int, d_mlp: int):
        super().__init__()
        self.W_gate = nn.Parameter(torch.empty(d_model, d_mlp))
        self.W_in = nn.Parameter(torch.empty(d_model, d_mlp))
        self.W_out = nn.Parameter(torch.empty(d_mlp, d_model))
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: Float[Tensor, "*lead d_model"]) -> Float[Tensor, "*lead d_model"]:
        pre = self.hook_pre(x @ self.W_gate)
        return self.hook_post(torch.nn.functional.silu(pre) * (x @ self.W_in)) @ self.W_out


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, cfg.norm_eps, hooked=True)
        self.attn = Attention(cfg, layer)
        self.ln2 = RMSNorm(cfg.d_model, cfg.norm_eps, hooked=True)
        self.mlp = MLP(cfg.d_model, cfg.d_mlp)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, resid: Float[Tensor, "batch pos d_model"], at: Bool[Tensor, "batch pos"] | None = None
                ) -> Float[Tensor, "batch pos d_model"] | Float[Tensor, "n d_model"]:
        """`at` (bool [batch, pos]): run the MLP only at those positions and return them, [n, d_model]."""
        resid = self.hook_resid_pre(resid)
        resid = self.hook_resid_mid(resid + self.hook_attn_out(self.attn(self.ln1(resid))))
        if at is not None:
            resid = resid[at]
        return self.hook_resid_post(resid + self.hook_mlp_out(self.mlp(self.ln2(resid))))


#: Largest model built (about 64 GB of float32 weights): larger configs are refused before allocating.
MAX_PARAMETERS = 16 * 10**9


def approx_parameters(cfg: ModelConfig) -> int:
    """Parameter count without the compressors and norms (a lower bound, for the size check)."""
    attn = cfg.d_model * cfg.d_head * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
    return cfg.vocab_size * cfg.d_model * (1 if cfg.tie_embeddings else 2) + cfg.n_layers * (attn + 3 * cfg.d_model * cfg.d_mlp)


class HookedCompressedTransformer(TokenNames, HookedRootModule):
    """Decoder-only transformer with compressed-KV attention and TransformerLens hooks.

    Example:
        >>> import torch
        >>> from phaseinterp import HookedCompressedTransformer, preset
        >>> model = HookedCompressedTransformer(preset("tiny-w4s4"), seed=0)
        >>> tokens = torch.randint(0, model.cfg.vocab_size, (2, 32))
        >>> logits, cache = model.run_with_cache(tokens)
        >>> cache["blocks.0.attn.compress_k.hook_gate"].shape[:3]  # batch, entry, offset
        torch.Size([2, 8, 4])
    """

    def __init__(self, cfg: ModelConfig, seed: int | None = None):
        super().__init__()
        n = approx_parameters(cfg)
        if n > MAX_PARAMETERS:
            raise ValueError(f"a model of about {n:.3g} parameters (d_model={cfg.d_model}, d_mlp={cfg.d_mlp}, "
                             f"n_layers={cfg.n_layers}, vocab_size={cfg.vocab_size}) out of range: allowed at most "
                             f"{MAX_PARAMETERS:.3g} (refused before any allocation)")
        self.cfg = cfg
        self.W_E = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layers))
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps, hooked=True)
        if not cfg.tie_embeddings:
            self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.vocab_size))
        self.init_weights(seed)
        self.setup()

    # ---- weights -------------------------------------------------------------------------------
    def init_weights(self, seed: int | None = None) -> None:
        """Normal(0, init_std) for matrices, ones for norm weights, zeros for biases and sinks
        (gate biases: Normal(0, gate_bias_init_std) when that is > 0); output projections scaled by
        1/sqrt(2 n_layers) (GPT-2 style)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            with torch.no_grad():
                if leaf == "b_Z" and self.cfg.gate_bias_init_std > 0:
                    p.copy_(torch.randn(p.shape, generator=gen) * self.cfg.gate_bias_init_std)
                elif leaf == "weight" or leaf in ("b_Z", "sink"):
                    p.fill_(1.0 if leaf == "weight" else 0.0)
                else:
                    scale = std / (2 * self.cfg.n_layers) ** 0.5 if leaf in ("W_O", "W_out") else std
                    p.copy_(torch.randn(p.shape, generator=gen) * scale)

    @property
    def W_unembed(self) -> Float[Tensor, "d_model vocab"]:
        return self.W_E.T if self.cfg.tie_embeddings else self.W_U

    def tokens_to_residual_directions(self, tokens: int | Int[Tensor, ""] | Int[Tensor, " batch"] | Int[Tensor, "batch pos"]
                                      ) -> Float[Tensor, "*shape d_model"]:
        """The residual-stream direction whose dot product with the final-norm-scaled residual is
        each token's logit: `ln_final.weight * W_U[:, token]` (the norm's weight folded in, so that
        `ActivationCache.logit_attrs` of a decomposed residual sums to the logits), shaped like
        `tokens` plus d_model (TransformerLens's convention)."""
        if isinstance(tokens, str):
            raise ValueError("tokens as a string need a tokenizer: give token ids (int or tensor)")
        tokens = torch.as_tensor(tokens, device=self.W_unembed.device)
        if tokens.dtype in (torch.bool,) or tokens.is_floating_point():
            raise ValueError(f"tokens of dtype {tokens.dtype} are invalid: allowed integer token ids")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.vocab_size):
            raise ValueError(f"token ids out of range: allowed 0..{self.cfg.vocab_size - 1}")
        directions = self.W_unembed * self.ln_final.weight[:, None]
        return directions[:, tokens].movedim(0, -1)

    def accumulated_bias(self, layer: int | None = None, mlp_input: bool = False, include_mlp_biases: bool = True
                         ) -> Float[Tensor, " d_model"]:
        """The biases added to the residual stream before `layer`: zero (no layer has a bias), as
        `ActivationCache.get_full_resid_decomposition` asks."""
        return torch.zeros(self.cfg.d_model, device=self.W_E.device, dtype=self.W_E.dtype)

    # ---- forward -------------------------------------------------------------------------------
    def forward(
        self,
        tokens: Int[Tensor, "batch pos"],
        return_type: Literal["logits", "loss", "both"] | None = "logits",
        *,
        at: Bool[Tensor, "batch pos"] | None = None,
    ) -> Any:
        """Logits [batch, pos, vocab]; "loss" is the mean next-token cross-entropy.

        `at` (a boolean mask, logits only): compute the last block's MLP and the unembedding only
        at the marked positions and return their logits as [n_marked, vocab] in row-major order.
        Training uses it to skip positions without a loss; the last block's `hook_mlp_*`,
        `hook_resid_post` and `ln2`/`ln_final` hooks then see [n_marked, ...].
        """
        if not isinstance(tokens, torch.Tensor):
            raise ValueError(f"tokens of type {type(tokens).__name__} are invalid: allowed a torch tensor of integer ids "
                             "[batch, pos] (convert with torch.as_tensor(x, dtype=torch.long))")
        if tokens.dtype not in (torch.int64, torch.int32, torch.int16):
            raise ValueError(f"tokens of dtype {tokens.dtype} are invalid: allowed integer ids (torch.long, int32 or int16)")
        if return_type not in ("logits", "loss", "both", None):
            raise ValueError(f"return_type={return_type!r} is invalid: allowed 'logits', 'loss', 'both' or None")
        if at is not None and (return_type != "logits" or at.shape != tokens.shape or at.dtype != torch.bool):
            raise ValueError(f"at= needs return_type='logits' and a bool mask of the tokens' shape {tuple(tokens.shape)}; "
                             f"got return_type={return_type!r}, mask {at.dtype} {tuple(at.shape)}")
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be [batch, pos]; got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > self.cfg.n_ctx:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds n_ctx = {self.cfg.n_ctx}")
        if tokens.shape[1] < (2 if return_type in ("loss", "both") else 1):
            raise ValueError(f"tokens have {tokens.shape[1]} positions: allowed at least "
                             + ("2 for a next-token loss" if return_type in ("loss", "both") else "1"))
        # (a compiled or graph-captured step checks its tokens before the call: this check reads values on the host)
        if not tracing() and tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size):
            bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)][0].item()
            raise ValueError(f"token id {bad} out of range: allowed 0..{self.cfg.vocab_size - 1}")
        resid = self.hook_embed(self.W_E[tokens])
        for i, block in enumerate(self.blocks):
            resid = block(resid, at if i == len(self.blocks) - 1 else None)
        logits = self.ln_final(resid) @ self.W_unembed
        if return_type in ("logits", None):
            return logits if return_type else None
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
        )
        return loss if return_type == "loss" else (logits, loss)

    def run_with_cache(self, *args: Any, **kwargs: Any) -> tuple[Any, ActivationCache]:
        """As TransformerLens: returns (output, ActivationCache). Caching the pattern materializes
        the joint score matrix of every cached layer."""
        names_filter = kwargs.get("names_filter")
        if isinstance(names_filter, str):
            names_filter = [names_filter]
        if isinstance(names_filter, (list, tuple)):
            for name in names_filter:
                self.check_hook_name(name)
        out, cache = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache, self, has_batch_dim=not kwargs.get("remove_batch_dim", False))

    # ---- hook names ----------------------------------------------------------------------------
    def check_hook_name(self, name: str) -> None:
        """Raise a KeyError suggesting the nearest valid hook names when `name` is not one."""
        if name not in self.hook_dict:
            raise missing_hook_point(name, list(self.hook_dict), "docs/hooks.md")

    def _enable_hook_with_name(self, name: str, hook: Callable, dir: Literal["fwd", "bwd"]) -> None:
        self.check_hook_name(name)
        super()._enable_hook_with_name(name, hook, dir)

    def add_hook(self, name: Any, hook: Callable, *args: Any, **kwargs: Any) -> None:
        if isinstance(name, str):
            self.check_hook_name(name)
        super().add_hook(name, hook, *args, **kwargs)

    # ---- conveniences ---------------------------------------------------------------------------
    def compressors(self) -> dict[str, Compressor]:
        """Every compression branch by hook prefix, e.g. {"blocks.0.attn.compress_k": ...}."""
        return {name: m for name, m in self.named_modules() if isinstance(m, Compressor)}

    def set_explicit_attention(self, explicit: bool = True) -> None:
        """Always materialize attention scores and patterns (needed when tools outside
        TransformerLens hooks, e.g. nnsight, read `hook_pattern`)."""
        for block in self.blocks:
            block.attn.explicit = explicit

    def save(self, path: str | os.PathLike, extra: dict | None = None):
        """Write weights and config to `path` (safetensors, atomically; `extra`, JSON-serializable,
        lands in the metadata). See `phaseinterp.load`."""
        from phaseinterp.checkpoint_io import save_model

        return save_model(self, path, extra=extra)
