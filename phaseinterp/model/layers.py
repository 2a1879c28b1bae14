"""Small building blocks: RMSNorm and rotary position embeddings (NeoX and interleaved styles)."""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from phaseinterp.model.hook_point import HookPoint


class RMSNorm(nn.Module):
    """`x / sqrt(mean(x^2) + eps) * weight`, computed in float32 (as Qwen3 and DeepSeek-V4 do).

    Hooked norms (the blocks' `ln1`, `ln2` and `ln_final`) expose TransformerLens's `hook_scale`
    [..., 1] = sqrt(mean(x^2) + eps), which `ActivationCache.apply_ln_to_stack` divides by, and
    `hook_normalized` (the output, weight applied)."""

    def __init__(self, dim: int, eps: float, hooked: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        if hooked:
            self.hook_scale = HookPoint()
            self.hook_normalized = HookPoint()

    def forward(self, x: Float[Tensor, "*lead dim"]) -> Float[Tensor, "*lead dim"]:
        dtype = x.dtype
        xf = x.float()
        ms = xf.pow(2).mean(-1, keepdim=True) + self.eps
        hook = getattr(self, "hook_normalized", None)
        if hook is None:
            return (self.weight.float() * (xf * torch.rsqrt(ms))).to(dtype)
        scale = ms.sqrt()
        hooked_scale = self.hook_scale(scale)
        # without an edit of the scale, rsqrt keeps the output bit-identical to the unhooked norm
        normed = xf * torch.rsqrt(ms) if hooked_scale is scale else xf / hooked_scale
        return hook((self.weight.float() * normed).to(dtype))


def rope_angles(positions: Int[Tensor, " *pos"], dims: int, theta: float) -> Float[Tensor, " *pos half"]:
    """Angles `pos * theta^(-2k/dims)` for k = 0..dims/2-1: shape [*positions.shape, dims/2]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dims, 2, dtype=torch.float32, device=positions.device) / dims))
    return positions.float()[..., None] * inv_freq


def apply_rope(x: Float[Tensor, "*lead pos head d"], angles: Float[Tensor, "pos half"], style: str
               ) -> Float[Tensor, "*lead pos head d"]:
    """Rotate the trailing `2 * angles.shape[-1]` channels of `x` ([..., pos, head, d]).

    `angles` is [pos, dims/2] and broadcasts over batch and heads. "neox" pairs channel k with
    k + dims/2 (Qwen3 `rotate_half`); "interleaved" pairs 2k with 2k+1 (DeepSeek-V4).
    """
    dims = 2 * angles.shape[-1]
    if dims == 0:
        return x
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    keep, rot = x[..., : x.shape[-1] - dims], x[..., x.shape[-1] - dims :].float()
    half = dims // 2
    # rot * cos + swapped * sin with the pair partner's sign in `sin` (HF's rotate_half form): one
    # fused multiply-add instead of four products and two concatenations
    if style == "neox":
        swapped = torch.cat([rot[..., half:], rot[..., :half]], dim=-1)
        cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)
    else:
        swapped = rot.unflatten(-1, (half, 2)).flip(-1).flatten(-2)
        cos, sin = cos.repeat_interleave(2, dim=-1), torch.stack([-sin, sin], dim=-1).flatten(-2)
    out = torch.addcmul(rot * cos, swapped, sin).to(x.dtype)
    return out if keep.shape[-1] == 0 else torch.cat([keep, out], dim=-1)
