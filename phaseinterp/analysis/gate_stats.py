"""Gate statistics (docs/paper.md, the mechanism): how concentrated each compression gate is, statically
and per window, which phases it weighs, and how both evolve over training checkpoints.

For one gate (layer, branch, KV head; each channel of a vector gate separately, then averaged),
with a[w, i] its weight on offset i in window w (complete windows starting at position >= 0):

    static     = exp(H(E_w[a]))       effective number of offsets of the average gate
    per-window = E_w[exp(H(a_w))]     average effective number of offsets of one window's gate

Both lie in [1, W]. Profile g(r) = (gate mass on offsets at phase r) / (their uniform share),
phase of offset i = (start + i) mod S = i mod S; value-branch profiles are rolled by -1
(g'(r) = g(r + 1)), so a head storing a key at r and its value at r + 1 peaks at r in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, Union

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.interventions.overrides import BRANCH_NAMES, compressors
from phaseinterp.interventions.runner import capture, runnable

ModelOrPath = Union[str, Path, torch.nn.Module]


def entropy(p: Float[Tensor, "*batch offset"]) -> Float[Tensor, "*batch"]:
    """Shannon entropy in nats over the last axis (0 log 0 = 0)."""
    return -torch.special.xlogy(p, p).sum(-1)


def effective_offsets(a: Float[Tensor, "window offset *channels"]
                      ) -> tuple[Float[Tensor, " *channels"], Float[Tensor, " *channels"]]:
    """(static, per-window) effective numbers of offsets of gate weights a[window, offset, ...],
    per trailing channel. Example: a gate that is one-hot on a different offset in each window
    has per-window 1 and static W; a fixed one-hot gate has both 1; uniform has both W.

    Example:
        >>> s, p = effective_offsets(torch.eye(4))  # one-hot, offset = window index
        >>> round(float(s), 3), round(float(p), 3)
        (4.0, 1.0)
    """
    a = a.double().movedim(1, -1)  # [window, *channels, offset]
    static = torch.exp(entropy(a.mean(0)))
    per_window = torch.exp(entropy(a)).mean(0)
    return static, per_window


def gate_weights(model, tokens: Int[Tensor, "batch pos"], *, layers: Sequence[int] | None = None
                 ) -> dict[tuple[int, str], Float[Tensor, "window offset *channels"]]:
    """Gate weights of every (layer, branch) on `tokens`, as [window, offset, kv_head(, d_head)]
    over all complete windows of all rows that start at position >= 0."""
    model = runnable(model)
    comps = compressors(model, layers)
    names = {f"blocks.{l}.attn.{next(a for a, b in BRANCH_NAMES.items() if b == br)}.hook_gate": (l, br, c)
             for l, br, c in comps}
    acts = capture(model, tokens, list(names))
    out = {}
    for name, (l, br, c) in names.items():
        g = acts[name]
        first = -(-c.cc.pad // c.cc.entry_stride)  # entries whose window starts before 0 are skipped
        out[(l, br)] = g[:, first:].flatten(0, 1)
    return out


def _configs(model, layers: Sequence[int] | None) -> dict:
    """Each compressed layer's CompressionConfig (our model or a backend with gates)."""
    return {l: c.cc for l, _, c in compressors(model, layers)}


def gate_statistics(model, tokens: Int[Tensor, "batch pos"], *, layers: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per (layer, branch, kv_head): window W, stride S, static and per-window effective
    number of offsets (vector gates: mean over channels), and the windows counted.

    Example:
        >>> from phaseinterp.interventions import planted_model
        >>> df = gate_statistics(planted_model(32), torch.randint(1, 32, (2, 24)))
        >>> df[["branch", "kv_head", "static", "per_window"]].round(2).values.tolist()[:1]
        [['key', 0, 1.0, 1.0]]
    """
    model = runnable(model)  # a raw HF model gets its backend once, for both reads
    rows = []
    ccs = _configs(model, layers)
    for (l, br), a in gate_weights(model, tokens, layers=layers).items():
        cc = ccs[l]
        if a.shape[0] == 0:
            raise ValueError(f"tokens of length {tokens.shape[1]} hold no complete window of layer {l} (W={cc.window})")
        static, per = effective_offsets(a)
        static = static.reshape(static.shape[0], -1).mean(1) if static.ndim > 1 else static
        per = per.reshape(per.shape[0], -1).mean(1) if per.ndim > 1 else per
        for h in range(a.shape[2]):
            rows.append({"layer": l, "branch": br, "kv_head": h, "window": cc.window, "stride": cc.stride,
                         "gate": cc.gate, "static": float(static[h]), "per_window": float(per[h]),
                         "windows": int(a.shape[0])})
    return pd.DataFrame(rows)


def gate_profiles(model, tokens: Int[Tensor, "batch pos"], *, layers: Sequence[int] | None = None,
                  roll_values: bool = True) -> pd.DataFrame:
    """One row per (layer, branch, kv_head, phase r in 0..S-1): `mass` (mean gate weight on the
    offsets at phase r, summed), `share` (their uniform share, count / W) and `g` = mass / share.
    Value-branch profiles are rolled by -1 when `roll_values` (column `rolled`); the tied "kv"
    branch is not rolled.

    Example:
        >>> from phaseinterp.interventions import planted_model
        >>> df = gate_profiles(planted_model(32), torch.randint(1, 32, (2, 24)))
        >>> df[(df.branch == "value") & (df.kv_head == 0)].g.round(1).tolist()  # value at 1, rolled to 0
        [4.0, 0.0, 0.0, 0.0]
    """
    model = runnable(model)  # a raw HF model gets its backend once, for both reads
    rows = []
    ccs = _configs(model, layers)
    for (l, br), a in gate_weights(model, tokens, layers=layers).items():
        cc = ccs[l]
        if cc.chunkings > 1:
            raise ValueError(f"layer {l} has chunkings={cc.chunkings}: gate profiles by phase need one chunk grid "
                             "(allowed chunkings=1); use gate_statistics or read hook_gate per chunking")
        S, W = cc.stride, cc.window
        mean = a.double().mean(0)  # [offset, kv_head(, d)]
        mean = mean.reshape(W, mean.shape[1], -1).mean(-1)  # channels averaged
        phase = (torch.arange(W) - cc.pad) % S
        count = torch.bincount(phase, minlength=S).double()
        mass = torch.zeros(S, mean.shape[1], dtype=torch.float64).index_add_(0, phase, mean)
        g = mass / (count / W)[:, None]
        roll = roll_values and br == "value"
        if roll:
            g, mass = torch.roll(g, -1, 0), torch.roll(mass, -1, 0)
            count = torch.roll(count, -1, 0)
        for h in range(mean.shape[1]):
            for r in range(S):
                rows.append({"layer": l, "branch": br, "kv_head": h, "phase": r, "mass": float(mass[r, h]),
                             "share": float(count[r] / W), "g": float(g[r, h]), "rolled": roll})
    return pd.DataFrame(rows)


def checkpoint_step(path: str | Path, index: int) -> int:
    """Training step recorded in a checkpoint's metadata ("step" in its extra dict), else `index`."""
    from phaseinterp.checkpoint import read_metadata

    extra = read_metadata(path).get("extra", {})
    for key in ("step", "global_step", "tokens_seen"):
        if isinstance(extra.get(key), (int, float)):
            return int(extra[key])
    return index


def gate_dynamics(checkpoints: Sequence[ModelOrPath], tokens: Int[Tensor, "batch pos"], *,
                  steps: Sequence[int] | None = None, layers: Sequence[int] | None = None) -> pd.DataFrame:
    """`gate_statistics` for a series of checkpoints (paths or models), stacked with a `step`
    column (from each checkpoint's metadata, else `steps`, else the index) and `source`.

    Example:
        >>> df = gate_dynamics(sorted(Path("runs/w8s8").glob("step*.safetensors")), tokens)  # doctest: +SKIP
    """
    from phaseinterp.checkpoint import load

    if not checkpoints:
        raise ValueError("no checkpoints given")
    if steps is not None and len(steps) != len(checkpoints):
        raise ValueError(f"steps has {len(steps)} entries for {len(checkpoints)} checkpoints")
    frames = []
    for i, ck in enumerate(checkpoints):
        if isinstance(ck, (str, Path)):
            model, source = load(ck).eval(), str(ck)
            step = steps[i] if steps is not None else checkpoint_step(ck, i)
        else:
            model, source = ck, f"model {i}"
            step = steps[i] if steps is not None else i
        frames.append(gate_statistics(model, tokens, layers=layers).assign(step=step, source=source))
    return pd.concat(frames, ignore_index=True).sort_values(["step", "layer", "branch", "kv_head"], kind="stable")
