"""`DeepseekV4Backend`: HuggingFace `DeepseekV4ForCausalLM` behind the backend interface (nnsight).

Where the units live in the HF code (`transformers/models/deepseek_v4/modeling_deepseek_v4.py`):

- Query heads: the input of `self_attn.o_a_proj` ([batch, pos, o_groups, heads/o_groups * head_dim],
  group g holding heads g*H/G .. (g+1)*H/G - 1), viewed as [batch, pos, head, head_dim]. This is the
  per-head attention output *after* the conjugate RoPE that undoes the rotation K = V picked up,
  and before the grouped low-rank output projection mixes heads: the analogue of our `hook_z`.
  There is one shared KV head (K = V), so the KV-head unit `L{l}.kv0` is every query head.
- Layers: `self_attn` output[0], the attention output [batch, pos, hidden] before the
  hyper-connection expands it into the `hc_mult` residual streams.
- Gates (CSA and HCA layers, branch 0): the softmax inside the compressor's forward, reached
  with nnsight's `.source` (`new_gate_softmax_0` in CSA, `chunk_gate_softmax_0` in HCA): exactly the
  weights HF multiplies the payloads with, [batch, entry, offset, head_dim] -> canonical
  [batch, entry, offset, 1, head_dim]. CSA: W = 2m, offsets 0..m-1 are the previous block's
  `a` slots (entry 0: before position 0, weight 0), m..2m-1 the current block's `b` slots;
  HCA: W = m. The lightning indexer's own compressor is not a unit; a gate edit changes the
  entries, not which top-k entries the indexer selects.
- Gate logits (`compression(layer).logits == "projection"`): they exist only inside the compressor's
  forward, laid out from `gate_proj`'s output plus `position_bias`. The backend rebuilds them from
  `gate_proj`'s output ([batch, pos, 2 * head_dim] in CSA: map row 0 = the `a` half, row 1 = the
  `b` half; [batch, pos, head_dim] in HCA) and the bias, bit for bit (`compression.slot_logits`);
  an edit of the logits is written back as its softmax (float32, as HF) into the gate weights.
  Gate cycling (`CycleGate`) rebuilds them with the maps and bias of offset (i - delta) mod W.
- Entries: the compressor `output[0]` `[batch, 1, entry, head_dim]` (after RMSNorm and RoPE at j*m)
  -> canonical [batch, entry, 1, head_dim].

The first access to `.source` instruments the compressor's forward in place (numerically
identical; nnsight keeps it for later traces).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool
from torch import Tensor

from phaseinterp.backends.base import Backend, Site, input_head_site
from phaseinterp.backends.compression import Compression, slot_logits
from phaseinterp.families.hf.backend import HFMixin
from phaseinterp.backends.units import BackendConfig
from phaseinterp.families.deepseek_v4.convert import CSA, HCA, compression_config_from_hf, layer_strides
from phaseinterp.layouts import hf_layouts
from phaseinterp.model.compressor import slot_positions


def _tuple_site(envoy, index: int) -> Site:
    """Site at `envoy.output[index]` of a module returning a tuple."""
    held: dict[str, tuple] = {}

    def get() -> Tensor:
        held["out"] = tuple(envoy.output)
        return held["out"][index]

    def set_output(value: Tensor) -> None:
        out = list(held["out"])
        out[index] = value
        envoy.output = tuple(out)

    return Site(get=get, set=set_output)

_SHORT = {"sliding_attention": "SWA", CSA: "CSA", HCA: "HCA"}


class DeepseekV4Backend(HFMixin, Backend):
    """Backend for HF `DeepseekV4ForCausalLM` (random-weight tiny models or real checkpoints).

    Args:
        model: the HF model.
        prefill_chunk: read long prompts this many tokens at a time in `final_logits` (the HF
            attention is eager: one forward materializes [heads, pos, pos + entries] scores).

    Example:
        >>> from phaseinterp.backends.tiny import tiny_deepseek_v4
        >>> backend = DeepseekV4Backend(tiny_deepseek_v4(seed=0))  # a DeepseekV4ForCausalLM of a tiny config
        >>> backend.cfg.strides, [u.name for u in backend.units("gate")]  # CSA stride 4, HCA stride 16
        ((4, 16), ['L1.G0', 'L2.G0', 'L3.G0'])
        >>> backend.gate_weights(tokens[:2, :32], Unit("gate", 1, 0)).shape  # [batch, entry, 2S, 1, head_dim]
        torch.Size([2, 8, 8, 1, 64])
    """

    @classmethod
    def wrap(cls, model, stride: int | None = None) -> "DeepseekV4Backend":
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for DeepSeek-V4: allowed None (its strides come from its config)")
        return cls(model)

    @classmethod
    def hf_model_types(cls) -> tuple[str, ...]:
        return ("deepseek_v4",)

    @classmethod
    def hf_layer_strides(cls, hf_config) -> tuple[int | None, ...]:
        return layer_strides(hf_config)

    @classmethod
    def describe_hf(cls, hf_config: dict) -> str:
        """The layer schedule, e.g. "HCA m=8, CSA m=4, sliding window 16"."""
        parts = [_SHORT.get(t, t) + (f" m={s}" if s is not None else "")
                 for t, s in zip(hf_config["layer_types"], layer_strides(hf_config))]
        return f"{', '.join(parts)}, sliding window {hf_config['sliding_window']}"

    def __init__(self, model: torch.nn.Module, *, prefill_chunk: int | None = None) -> None:
        hf = model.config
        if getattr(hf, "model_type", None) != "deepseek_v4" or not hasattr(model, "model"):
            raise ValueError(f"model of type {type(model).__name__} is invalid: allowed DeepseekV4ForCausalLM")
        types, strides, layouts = list(hf.layer_types), layer_strides(hf), hf_layouts()
        cfg = BackendConfig(
            kind="deepseek_v4", model_class=type(model).__name__, n_layers=hf.num_hidden_layers,
            n_heads=hf.num_attention_heads, n_kv_heads=1, d_head=hf.head_dim, d_model=hf.hidden_size,
            vocab_size=hf.vocab_size,
            layer_strides=strides,
            gate_windows=tuple(None if s is None else layouts[t].window_strides * s for t, s in zip(types, strides)),
            gate_branches=tuple(() if s is None else ("kv",) for s in strides),
            n_ctx=getattr(hf, "max_position_embeddings", None),
        )
        super().__init__(model, cfg)
        self.prefill_chunk = self._check_chunk(prefill_chunk)
        self.layer_types = types
        self._softmax_op: dict[int, str] = {}

    #: knockout and patching at the final position decode it from a prefilled cache (`decode_final`)
    incremental_path = "decode_cache"

    def incremental_ok(self) -> bool:
        """The decode path applies outside `intervene` (its edits would be ignored)."""
        return not self.has_hooks() and self.incremental_fallback() is None

    def incremental_fallback(self) -> str | None:
        from phaseinterp.families.deepseek_v4.decode_final import decode_fallback

        return decode_fallback(self.model)

    def final_position_run(self, tokens: Tensor, query_pos: Tensor):
        from phaseinterp.families.deepseek_v4.decode_final import DecodeFinalRun

        return DecodeFinalRun(self, tokens, query_pos, lambda layer: self.model.model.layers[layer].self_attn.o_a_proj)

    def _compressed(self, layer: int) -> str:
        t = self.layer_types[layer]
        if self.cfg.layer_strides[layer] is None:
            raise ValueError(f"layer {layer} is {t!r}: it has no compressor")
        return t

    def n_entries(self, layer: int, seq_len: int) -> int:
        self._compressed(layer)
        return seq_len // self.cfg.layer_strides[layer]

    def gate_valid(self, layer: int, n_entries: int) -> Bool[Tensor, "entry offset"]:
        return slot_positions(self.compression(layer).cc, n_entries) >= 0

    def gate_shape(self, layer: int) -> tuple[int, int]:
        self._compressed(layer)
        return (1, self.cfg.d_head)

    def entry_shape(self, layer: int) -> tuple[int, int]:
        self._compressed(layer)
        return (1, self.cfg.d_head)

    def compression(self, layer: int, branch: int = 0) -> Compression:
        cc = compression_config_from_hf(self.model.config, self._compressed(layer))
        if branch != 0:
            raise ValueError(f"branch={branch} is invalid for layer {layer}: allowed 0 (one tied K = V branch)")
        return Compression(layer, "kv", cc, logits="projection")

    def _gate_projection(self, layer: int, branch: int) -> Tensor:
        out = self.nn.model.layers[layer].self_attn.compressor.gate_proj.output
        return out.view(*out.shape[:2], -1, 1, self.cfg.d_head)  # CSA rows a, b; HCA one row

    def _gate_bias(self, layer: int, branch: int) -> Tensor:
        bias = self.model.model.layers[layer].self_attn.compressor.position_bias  # [m, rows * head_dim]
        rows = bias.view(bias.shape[0], -1, 1, self.cfg.d_head)
        return rows.transpose(0, 1).flatten(0, 1)  # CSA: offsets 0..m-1 use `a`, m..2m-1 use `b`

    def _compressor_code(self, layer: int):
        """The envoy of the module whose forward holds the gate softmax: the HF compressor, or the
        compressor a wrapper module runs as its `original_component` (a TransformerLens bridge
        component, see `families.bridges.backend`)."""
        envoy = self.nn.model.layers[layer].self_attn.compressor
        wrapped = self.model.model.layers[layer].self_attn.compressor
        return envoy._original_component if isinstance(getattr(wrapped, "original_component", None), torch.nn.Module) \
            else envoy

    def _gate_op(self, layer: int) -> str:
        """Name of the softmax over window slots in the compressor's forward (found once)."""
        if layer not in self._softmax_op:
            names = [op.name for op in self._compressor_code(layer).source if "softmax" in op.name]
            if len(names) != 1:
                raise ValueError(f"layer {layer}: expected one softmax in the HF compressor forward, found {names}; "
                                 "this transformers version lays the compressor out differently")
            self._softmax_op[layer] = names[0]
        return self._softmax_op[layer]

    def _site(self, site: str, layer: int, branch: int) -> Site:
        attn = self.nn.model.layers[layer].self_attn
        if site == "head":
            return input_head_site(attn.o_a_proj, self.cfg.n_heads, self.cfg.d_head)
        if site == "layer":
            return _tuple_site(attn, 0)
        if site == "entry":
            s = _tuple_site(attn.compressor, 0)
            s.to_canon = lambda raw: raw.permute(0, 2, 1, 3)
            s.from_canon = lambda canon, raw: canon.permute(0, 2, 1, 3).to(raw.dtype)
            return s
        op = getattr(self._compressor_code(layer).source, self._gate_op(layer))

        def set_gate(value: Tensor) -> None:
            op.output = value

        if site == "gate":
            return Site(get=lambda: op.output, set=set_gate, to_canon=lambda raw: raw.unsqueeze(3),
                        from_canon=lambda canon, raw: canon.squeeze(3).to(raw.dtype))
        cc = self.compression(layer).cc

        def get_logits() -> Tensor:
            proj = self._gate_projection(layer, branch)
            return slot_logits(proj, cc, self._gate_bias(layer, branch), proj.shape[1] // cc.stride)

        # the logits are not a tensor of the forward: an edited copy reaches it as its softmax,
        # taken as HF takes it (float32 over the window slots)
        return Site(get=get_logits, set=lambda logits: set_gate(logits.softmax(dim=2, dtype=torch.float32).squeeze(3)))

    def _trace(self, tokens, variants, reads, positions, grad=False):
        # resolve the gate softmax names before the trace (iterating `.source` is structural)
        layers = {e.unit.layer for v in variants for e in v if e.site[0] in ("gate", "gate_logits")}
        for layer in layers | {r.layer for r in reads if r.site in ("gate", "gate_logits")}:
            self._gate_op(layer)
        return super()._trace(tokens, variants, reads, positions, grad)
