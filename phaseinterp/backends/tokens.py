"""TransformerLens's tokenizer methods on every backend: `to_tokens`, `to_string`, `to_str_tokens`,
with TransformerLens's signatures and meanings (those of `TransformerBridge`, checked against it in
tests/test_backend_tokens.py).

A backend answers them with its tokenizer: `backend.tokenizer`, taken from what it wraps when that
carries one (a TransformerLens bridge, an nnsight `LanguageModel`), else set by hand
(`backend.tokenizer = tokenizer`, e.g. the one `load_smollm2()` returns). Our own model needs none:
its backend asks the model, whose role-aware names come from its vocabulary (`K5`, `V130`, `FILL`).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor


class TokenizerMethods:
    """Mixin: `to_tokens`, `to_string`, `to_str_tokens` through `self.tokenizer` (an HF tokenizer), or
    through the wrapped model's own methods where it has them (our `HookedCompressedTransformer`)."""

    model: Any
    #: an HF tokenizer (`PreTrainedTokenizerBase`), or None: then the wrapped model must name its tokens
    tokenizer: Any = None
    #: what `prepend_bos=None` means; None: whether the tokenizer itself puts BOS first (a bridge passes
    #: its `cfg.default_prepend_bos`)
    default_prepend_bos: bool | None = None

    def _token_names(self) -> Any:
        """The wrapped model when it names its own tokens and no tokenizer is set, else None."""
        if self.tokenizer is None and hasattr(self.model, "to_str_tokens"):
            return self.model
        if self.tokenizer is None:
            raise ValueError(f"{type(self).__name__}.tokenizer is None: a backend reads text only with a tokenizer; "
                             "set backend.tokenizer = <an HF tokenizer of this model> (a TransformerLens bridge or an "
                             "nnsight LanguageModel passes its own)")
        return None

    def _prepend_bos(self, prepend_bos: bool | None) -> bool:
        if prepend_bos is not None:
            return prepend_bos
        if self.default_prepend_bos is not None:
            return self.default_prepend_bos
        ids = self.tokenizer("a")["input_ids"]
        return bool(ids) and ids[0] == self.tokenizer.bos_token_id

    def _n_ctx(self) -> int | None:
        config = getattr(self.model, "config", None)
        return getattr(getattr(config, "text_config", None) or config, "max_position_embeddings", None)

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None,
                  padding_side: Literal["left", "right"] | None = None, move_to_device: bool = True,
                  truncate: bool = True) -> Int[Tensor, "batch pos"]:
        """Token ids of a string or a list of strings, `[batch, pos]` (TransformerLens's `to_tokens`).

        Args:
            prepend_bos: put the tokenizer's BOS first (default `default_prepend_bos`: a bridge's
                setting, else whether the tokenizer puts BOS first itself); no other special token is added.
            padding_side: where shorter rows are padded (default: the tokenizer's `padding_side`).
            move_to_device: put the ids on the model's device.
            truncate: cut rows to the model's context (`max_position_embeddings`).
        """
        own = self._token_names()
        if own is not None:
            return own.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side,
                                 move_to_device=move_to_device, truncate=truncate)
        texts = [input] if isinstance(input, str) else input
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"input {input!r} is invalid: allowed a string or a non-empty list of strings")
        side = padding_side or getattr(self.tokenizer, "padding_side", "right")
        if side not in ("left", "right"):
            raise ValueError(f"padding_side={padding_side!r} is invalid: allowed 'left' or 'right'")
        bos = self.tokenizer.bos_token_id
        rows = [([bos] if self._prepend_bos(prepend_bos) and bos is not None else [])
                + self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        n_ctx = self._n_ctx()
        if truncate and n_ctx is not None:
            rows = [r[:n_ctx] for r in rows]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(len(r) for r in rows)
        if pad is None and any(len(r) < width for r in rows):
            raise ValueError("the tokenizer has neither a pad nor an EOS token: rows of different lengths cannot be "
                             "padded; pass one string at a time")
        rows = [([pad] * (width - len(r)) + r) if side == "left" else (r + [pad] * (width - len(r))) for r in rows]
        tokens = torch.tensor(rows, dtype=torch.long)
        return tokens.to(next(self.model.parameters()).device) if move_to_device else tokens

    def to_string(self, tokens: Any) -> str | list[str]:
        """Decoded text: a string for a scalar or 1-D input, a list for `[batch, pos]`."""
        own = self._token_names()
        if own is not None:
            return own.to_string(tokens)
        ids = torch.as_tensor(np.asarray(tokens.cpu() if isinstance(tokens, Tensor) else tokens))
        if ids.ndim > 2:
            raise ValueError(f"tokens of shape {tuple(ids.shape)} are invalid: allowed a scalar, [pos] or [batch, pos]")
        if ids.ndim == 2:
            return self.tokenizer.batch_decode(ids.tolist(), clean_up_tokenization_spaces=False)
        return self.tokenizer.decode(ids.reshape(-1).tolist(), clean_up_tokenization_spaces=False)

    def to_str_tokens(self, input: Any, prepend_bos: bool | None = None,
                      padding_side: Literal["left", "right"] | None = None) -> list[str] | list[list[str]]:
        """One string per token, of a string (read by `to_tokens`) or of ids (1-D, or `[1, pos]`); a
        list input gives one list per item (TransformerLens's `to_str_tokens`)."""
        own = self._token_names()
        if own is not None:
            return own.to_str_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side)
        if isinstance(input, list) and not (input and all(isinstance(x, int) for x in input)):
            return [self.to_str_tokens(item, prepend_bos, padding_side) for item in input]  # type: ignore[misc]
        if isinstance(input, str):
            ids = self.to_tokens(input, prepend_bos=prepend_bos, padding_side=padding_side, move_to_device=False)[0]
        else:
            ids = torch.as_tensor(np.asarray(input.cpu() if isinstance(input, Tensor) else input)).squeeze()
            if ids.ndim > 1:
                raise ValueError(f"tokens of shape {tuple(ids.shape)} are invalid: allowed a scalar, [pos] or [1, pos] "
                                 "(pass a list of rows for more)")
        return self.tokenizer.batch_decode([[int(t)] for t in ids.reshape(-1).tolist()],
                                           clean_up_tokenization_spaces=False)


__all__ = ["TokenizerMethods"]
