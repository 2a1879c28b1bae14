"""TransformerLens-named access to any backend, for code written against our hooked model.

`phaseinterp.interventions` edits activations by hook name (`{name: fn(block) -> block}`) through
`final_logits`, `run_units` and `capture`. `TLCompat` gives every backend those three with the same
signatures and meanings, for the hook names that exist on every model:

    blocks.{l}.attn.hook_z                      [batch, pos, head, d_head]
    blocks.{l}.hook_attn_out                    [batch, pos, d_model]
    blocks.{l}.attn.compress_{b}.hook_gate_logits  [batch, entry, offset, kv_head(, d_head)]
    blocks.{l}.attn.compress_{b}.hook_gate      [batch, entry, offset, kv_head(, d_head)]
    blocks.{l}.attn.compress_{b}.hook_out       [batch, entry, kv_head, d_entry]

(`b` is a branch of `cfg.gate_branches[l]`; gates carry the channel axis only for vector gates,
as on our model; DeepSeek-V4 gates are vector gates with one KV head, and their logits are rebuilt
from the gate projection, see `backends.compression`.) TransformerLens-style hooks
`(name, fn(activation, hook))` become edits with `hook_edit`, so code written as forward hooks
(gate overrides, attribution's leaves) runs on a backend unchanged.
"""

from __future__ import annotations

import difflib
import re
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Sequence

from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.backends.edits import HookEdit
from phaseinterp.backends.prompts import units_per_forward
from phaseinterp.backends.units import Read
from phaseinterp.checks import check_at_least_one

_PATTERNS = [
    (re.compile(r"^blocks\.(\d+)\.attn\.hook_z$"), "head"),
    (re.compile(r"^blocks\.(\d+)\.hook_attn_out$"), "layer"),
    (re.compile(r"^blocks\.(\d+)\.attn\.compress_(\w+)\.hook_gate_logits$"), "gate_logits"),
    (re.compile(r"^blocks\.(\d+)\.attn\.compress_(\w+)\.hook_gate$"), "gate"),
    (re.compile(r"^blocks\.(\d+)\.attn\.compress_(\w+)\.hook_out$"), "entry"),
]


class TLCompat:
    """Mixin giving a backend `final_logits`, `run_units` and `capture` by hook name."""

    def hook_names(self) -> list[str]:
        """Every hook name this backend answers to."""
        names = []
        for layer in range(self.cfg.n_layers):
            names += [f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_attn_out"]
            for b in self.cfg.gate_branches[layer]:
                names += [f"blocks.{layer}.attn.compress_{b}.{h}" for h in ("hook_gate_logits", "hook_gate", "hook_out")]
        return names

    def resolve_hook(self, name: str) -> tuple[str, int, int, bool]:
        """(site, layer, branch, squeeze_channel) of a hook name; ValueError suggesting close names."""
        for pattern, site in _PATTERNS:
            m = pattern.match(name)
            if m and int(m.group(1)) < self.cfg.n_layers:
                layer = int(m.group(1))
                if site in ("head", "layer"):
                    return site, layer, 0, False
                branches = self.cfg.gate_branches[layer]
                if m.group(2) in branches:
                    branch = branches.index(m.group(2))
                    return site, layer, branch, site in ("gate", "gate_logits") and self.gate_shape(layer)[1] == 1
        close = difflib.get_close_matches(name, self.hook_names(), n=5, cutoff=0.5)
        raise ValueError(f"hook name {name!r} is not available on this backend ({self.cfg.model_class}); "
                         f"closest: {close}; see backend.hook_names()")

    def check_hook_name(self, name: str) -> None:
        """ValueError (suggesting close names) unless this backend answers to hook `name`."""
        self.resolve_hook(name)

    def compressor_names(self, layer: int) -> list[str]:
        """Hook-name prefixes of the compressor branches of `layer` ("compress_k", "compress_v" or
        "compress_kv"; none for full attention)."""
        return [f"compress_{b}" for b in self.cfg.gate_branches[layer]]

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[str, Callable]] = ()) -> Iterator[None]:
        """TransformerLens-style forward hooks as edits of every call inside the block (removed on
        exit, also on error)."""
        with self.intervene(*[self.hook_edit(name, fn) for name, fn in fwd_hooks]):
            yield

    def hook_edit(self, name: str, fn: Callable[[Tensor, Any], Tensor]) -> HookEdit:
        """The edit a TransformerLens-style forward hook `fn(activation, hook)` makes at hook `name`
        (`hook.name` is the name; the activation is in the hook's own layout)."""
        site, layer, branch, squeeze = self.resolve_hook(name)
        hook = SimpleNamespace(name=name)
        return HookEdit(site, layer, branch, lambda x: fn(x, hook), squeeze)

    def final_logits(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                     fwd_hooks: Sequence[tuple[str, Callable]] = (), *, grad: bool = False
                     ) -> Float[Tensor, "batch vocab"]:
        """Next-token logits at `query_pos[i]` of each row (as `interventions.final_logits`),
        with the edits of enclosing `intervene` blocks, then `fwd_hooks` (TransformerLens-style
        `(name, fn(activation, hook))`); `grad` keeps the autograd graph."""
        edits = [*self._active, *[self.hook_edit(name, fn) for name, fn in fwd_hooks]]
        return self.run_batched(tokens, [edits], positions=query_pos, grad=grad)[0]

    def run_units(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                  units: Sequence[dict[str, Callable[[Tensor], Tensor]]], *, max_rows: int = 2048,
                  base_hooks: Sequence[tuple[str, Callable]] = ()) -> Float[Tensor, "unit batch vocab"]:
        """Logits at `query_pos` for each unit's `{hook name: fn(block) -> block}` edit, several
        units per forward (as `interventions.run_units`; at most `max_rows` rows and `prompts.FORWARD_TOKENS` tokens each);
        `base_hooks` (TransformerLens-style) edit every unit's run first (e.g. a gate override).

        Example:
            >>> zero = {"blocks.0.attn.hook_z": lambda z: torch.zeros_like(z)}
            >>> backend.run_units(tokens, qpos, [{}, zero]).shape  # [units, batch, vocab]
            torch.Size([2, 8, 512])
        """
        check_at_least_one("max_rows", max_rows)
        base = [*self._active, *[self.hook_edit(name, fn) for name, fn in base_hooks]]
        sites = {name: self.resolve_hook(name) for u in units for name in u}  # each name resolved once
        variants = [base + [HookEdit(*sites[name][:3], fn, sites[name][3]) for name, fn in u.items()] for u in units]
        per = units_per_forward(tokens.shape[0], max_rows, tokens.shape[1])
        return self.run_batched(tokens, variants, positions=query_pos, variants_per_forward=per)

    def capture(self, tokens: Int[Tensor, "batch pos"], names: Sequence[str],
                sites: Int[Tensor, "batch site"] | None = None) -> dict[str, Tensor]:
        """Activations at the given hook names from one forward (as `interventions.runner.capture`);
        `sites` [batch, n_sites] keeps only those positions of head and layer sites (only they are
        copied out of the trace)."""
        reads = {}
        for name in names:
            site, layer, branch, squeeze = self.resolve_hook(name)
            if sites is not None and site not in ("head", "layer"):
                raise ValueError(f"sites are invalid for hook {name!r} (it has no position axis): allowed only for "
                                 "blocks.{l}.attn.hook_z and blocks.{l}.hook_attn_out")
            reads[name] = (Read(site, layer, branch, sites), squeeze)
        _, values = self.run(tokens, reads=[r for r, _ in reads.values()])
        return {name: values[r][..., 0] if squeeze else values[r] for name, (r, squeeze) in reads.items()}
