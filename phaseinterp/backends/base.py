"""`Backend`: one interface to every model (tokens -> logits, named units, reads, interventions).

A backend is a callable `tokens [batch, pos] -> logits [batch, pos, vocab]`, so anything that
accepts a model callable (`phase_sweep`, `evaluate_correct`) accepts a backend. Interventions run
through nnsight on the wrapped model: inside `with backend.intervene(*edits):` every call applies
the edits; on leaving the block (also on error) they are gone, and nothing is left on the model.
`run_batched` runs many intervention variants as one batched forward (one nnsight invoke each).

Subclasses describe where each site lives in their model (`_site`) and its geometry; the trace
engine here is shared, so an edit means the same thing on every model.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from phaseinterp.backends.batching import BatchedNNsight, first_device
from phaseinterp.backends.compat import TLCompat
from phaseinterp.backends.tokens import TokenizerMethods
from phaseinterp.backends.compression import Compression
from phaseinterp.backends.edits import CycleGate, Edit, _positions, sites
from phaseinterp.backends.units import BackendConfig, Positions, Read
from phaseinterp.model.attention import engine_trace
from phaseinterp.units import UNIT_KINDS, Unit, head_units

SITE_ORDER = {"gate_logits": 0, "gate": 1, "entry": 2, "head": 10, "layer": 11}  # forward order inside one layer
COMPRESSOR_SITES = ("gate_logits", "gate", "entry")


@dataclass
class Site:
    """Where a site's activation lives, inside a trace: `get()` the raw value, `set(raw)` a new one,
    and convert between the raw and the canonical layout (see `phaseinterp.backends.edits`)."""

    get: Callable[[], Tensor]
    set: Callable[[Tensor], None]
    to_canon: Callable[[Tensor], Tensor] = lambda raw: raw
    from_canon: Callable[[Tensor, Tensor], Tensor] = lambda canon, raw: canon


def input_head_site(module: Any, n_heads: int, d_head: int) -> Site:
    """Head outputs as the input of `module` (an output projection), [batch, pos, head, d_head]."""

    def set_input(value: Tensor) -> None:
        module.input = value

    return Site(get=lambda: module.input, set=set_input,
                to_canon=lambda raw: raw.reshape(*raw.shape[:2], n_heads, d_head),
                from_canon=lambda canon, raw: canon.reshape(raw.shape))


class Backend(TLCompat, TokenizerMethods):
    """Base class; see `HookedBackend`, `DeepseekV4Backend`, `HFCausalLMBackend`.

    Example:
        >>> from phaseinterp.backends import HookedBackend
        >>> backend = HookedBackend(model)
        >>> clean = backend(tokens)
        >>> with backend.intervene(Replace(Unit("kv_head", 1, 0))):
        ...     knocked = backend(tokens)
        >>> clean.shape, bool((clean != knocked).any())
        (torch.Size([8, 33, 512]), True)
    """

    cfg: BackendConfig
    #: what runs the primitives below ("nnsight"; `HookedBackend`: "transformer_lens"), recorded in results
    engine = "nnsight"
    #: whether `hooks` and `cycled_gates` change the wrapped module itself (TransformerLens hooks,
    #: parameters rolled in place), so that calls on the bare module inside the block see them;
    #: nnsight edits exist only in this backend's calls
    edits_reach_module = False

    def __init__(self, model: torch.nn.Module, cfg: BackendConfig) -> None:
        self.model = model.eval()
        self.cfg = cfg
        self._nn: BatchedNNsight | None = None
        self._active: list[Edit] = []

    # ---- to be provided by subclasses ------------------------------------------------------
    def _forward(self, tokens: Tensor) -> Tensor:
        raise NotImplementedError

    def _logits(self, output: Any) -> Tensor:
        return output

    def _call_kwargs(self, positions: Tensor | None = None, n_invokes: int = 1) -> dict[str, Any]:
        """Keyword arguments of the model call (HF: `use_cache=False`, `logits_to_keep`)."""
        return {}

    def _pick(self, logits: Tensor, rows: Tensor, positions: Tensor) -> Tensor:
        """Each row's logits at its position, from the model output of a traced call."""
        return logits[rows, positions.to(logits.device)]

    def _site(self, site: str, layer: int, branch: int) -> Site:
        raise NotImplementedError

    def n_entries(self, layer: int, seq_len: int) -> int:
        """Complete windows (compressed entries) of `layer` in a sequence of `seq_len` tokens."""
        raise ValueError(f"layer {layer} has no compressor")

    def gate_valid(self, layer: int, n_entries: int) -> Bool[Tensor, "entry offset"]:
        """Which window slots of `layer` hold a real position (False before position 0)."""
        raise ValueError(f"layer {layer} has no compressor")

    def gate_shape(self, layer: int) -> tuple[int, int]:
        """(kv_head, channel) trailing axes of the canonical gate layout of `layer`."""
        raise ValueError(f"layer {layer} has no compressor")

    def entry_shape(self, layer: int) -> tuple[int, int]:
        """(kv_head, d_entry) trailing axes of the canonical entry layout of `layer`."""
        raise ValueError(f"layer {layer} has no compressor")

    def compression(self, layer: int, branch: int = 0) -> Compression:
        """What the gate interventions need to know about compressor branch `branch` of `layer`
        (`backends.compression`): its CompressionConfig and where its gate logits live."""
        if self.cfg.gate_branches[layer]:
            raise ValueError(f"gate interventions are not available on {type(self).__name__}: allowed on "
                             "HookedBackend and DeepseekV4Backend (learned gates with a compression description)")
        raise ValueError(f"layer {layer} has no compressor")

    def _gate_projection(self, layer: int, branch: int) -> Tensor:
        """Inside a trace: every token's gate logits without bias under every gate-map row,
        [batch, pos, row, kv_head, channel] (`compression.slot_logits`)."""
        raise ValueError(f"layer {layer} has no compressor")

    def _gate_bias(self, layer: int, branch: int) -> Tensor | None:
        """The offset bias of the gate logits, [chunking * W, kv_head, channel], or None."""
        raise ValueError(f"layer {layer} has no compressor")

    # ---- what a model family's models can do (asked through `ModelFamily.backend_class()`) -----
    @classmethod
    def wrap(cls, model: Any, stride: int | None = None) -> "Backend":
        """The backend of one of the family's models (`families.backend_of`). `stride`: the period
        to test, for models without compressors; here refused (the strides come from the config)."""
        if stride is not None:
            raise ValueError(f"stride={stride} is invalid for {cls.__name__}: allowed None (its strides come from "
                             "its config)")
        return cls(model)

    @classmethod
    def trains_with_mitigations(cls) -> bool:
        """Training-time mitigations (`train.mitigations`) act on the model's compressors."""
        return False

    @classmethod
    def trains_compiled(cls) -> bool:
        """The trainer may `torch.compile` the model's forward."""
        return False

    @classmethod
    def trains_data_parallel(cls) -> bool:
        """The trainer may run the model with DDP."""
        return False

    @classmethod
    def unembeds_at(cls) -> bool:
        """The model's forward takes `at=` (a mask of positions to unembed), so a training step
        computes the logits of the target positions only."""
        return False

    @classmethod
    def hf_model_types(cls) -> tuple[str, ...]:
        """HuggingFace `model_type`s whose configs this backend's family describes (its HF flavours)."""
        return ()

    @classmethod
    def hf_layer_strides(cls, hf_config: Any) -> tuple[int | None, ...] | None:
        """Per-layer compressor stride (None: no compressor) of an HF config of those model types."""
        return None

    @classmethod
    def describe_hf(cls, hf_config: dict) -> str | None:
        """One line of such an HF config's attention schedule (None: nothing beyond the class name)."""
        return None

    @classmethod
    def describe_card(cls, model_config: dict) -> list[str]:
        """Phrases describing a stored model config of the family (the catalog's one line, before the
        parameter count); here the class name only."""
        return [cls.__name__]

    @classmethod
    def describe_hf_layers(cls, hf_config: dict) -> str | None:
        """The catalog's phrase for the layers of such an HF config (None: each layer type with its
        compress rate)."""
        return None

    @classmethod
    def prepare_hf_training(cls, hf_model: Any) -> None:
        """Called when the trainer's `HFCausalLM` wraps such an HF model (DSA: the indexer's loss hooks)."""

    # ---- what a sweep asks of what it runs (`families.resolve.runner`) -------------------------
    def module(self) -> torch.nn.Module:
        """The torch module whose weights run (eval mode during sweeps, journal fingerprints)."""
        return self.model

    def sweep_device(self, device: torch.device | str | None = None) -> torch.device:
        """The device a sweep records (its journal key): `device`, else "cpu" (a backend moves its
        inputs to its model itself)."""
        return torch.device(device) if device is not None else torch.device("cpu")

    def period(self) -> int | None:
        """The period of the phase effect (`period_of` the strides), None without compressed layers."""
        return self.cfg.residue_modulus

    def model_class(self) -> str:
        """The wrapped model's class name, as results record it."""
        return self.cfg.model_class

    def selection_block(self) -> int | None:
        """Tokens per block of a block-selection branch (NSA's `select`, read by
        `analysis.nsa_selection`), or None when the model selects no blocks."""
        return None

    # ---- what the interventions ask of every backend (`HookedBackend` overrides them) ----------
    def describe(self) -> str:
        """Short name of what runs, e.g. "DeepseekV4Backend(DeepseekV4ForCausalLM)"."""
        return f"{type(self).__name__}({self.cfg.model_class})"

    @property
    def recorded_cfg(self) -> Any:
        """The model configuration results record (`measure.provenance.model_config`): this card;
        models we wrote record their own config."""
        return self.cfg

    def has_hooks(self) -> bool:
        """Whether edits are active (inside `intervene` or `hooks`): what a forward computes may differ."""
        return bool(self._active)

    #: what `final_position_run` does, recorded in the maps' meta ("path")
    incremental_path = "final_position"

    def incremental_ok(self) -> bool:
        """Whether `final_position_run` applies (`HookedBackend`; `HFCausalLMBackend` through the KV cache)."""
        return False

    def incremental_fallback(self) -> str | None:
        """Why knockout and patching run one full forward per unit on this model (a sentence for the
        maps' meta and errors), or None when there is nothing to explain."""
        return None

    def final_position_run(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"]) -> Any:
        """The cached base run that recomputes only each row's query position after edits there
        (`backends.incremental.FinalPositionRun`), where the backend has one."""
        raise ValueError(f"the incremental final-position path is not available on {self.describe()}: allowed on "
                         "HookedBackend, NSABackend, DeepseekV4Backend, DSABackend and HFCausalLMBackend (Llama / Qwen / Mistral / "
                         "Gemma 3 decoders, through the KV cache) without hooks attached (use method='hooks')")

    @contextmanager
    def cycled_gates(self, units: Sequence[Unit], delta: int, *, payload: bool = False) -> Iterator[None]:
        """Every call inside the block runs with the gates of `units` cycled by `delta` offsets
        (`CycleGate` edits: the gate logits rebuilt with the rolled maps and bias). Gates only: the
        edits rebuild gate logits, not payloads, so `payload=True` (payload maps rolled with the
        gates) raises ValueError here; `HookedBackend` rolls our model's payload maps."""
        if payload:
            raise ValueError(f"payload=True is invalid on {self.describe()}: its edits rebuild gate logits only; allowed "
                             "payload=False (gates only, the paper's cycling), or payload=True on our model (HookedBackend)")
        with self.intervene(*[CycleGate(u, delta) for u in units]):
            yield

    def sweep_logits(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                     prompt_id: Int[Tensor, " batch"]) -> Float[Tensor, "batch vocab"]:
        """Logits at the query positions for the phase sweep (`measure.evaluate_correct`): here
        `final_logits`, the query positions only."""
        return self.final_logits(tokens, query_pos)

    def sweep_info(self) -> dict[str, Any] | None:
        """What a phase sweep records about how its logits were computed (None: full forwards)."""
        return {"positions": "query positions only", "prefill_chunk": getattr(self, "prefill_chunk", None)}

    def branch_logits(self, tokens: Int[Tensor, "batch pos"], query_pos: Int[Tensor, " batch"],
                      knockouts: Sequence[tuple[int, str]], *, positions: str = "all", batch_size: int = 128
                      ) -> tuple[Tensor, Tensor]:
        """(clean logits, logits with each (layer, branch) output zeroed) at the query positions:
        NSA's sparse-attention branches (`NSABackend`)."""
        raise ValueError(f"model {self.describe()} is invalid for branch knockout: allowed an NSATransformer "
                         "(phaseinterp.model.nsa); other models: knockout_map")

    # ---- units -------------------------------------------------------------------------------
    def units(self, kind: str | None = None) -> list[Unit]:
        """All units of one kind ("layer", "kv_head", "head", "gate"), or of every kind.

        Example:
            >>> [u.name for u in backend.units("kv_head")]
            ['L0.KV0', 'L1.KV0']
        """
        if kind is not None and kind not in UNIT_KINDS:
            raise ValueError(f"unit kind={kind!r} is invalid: allowed {list(UNIT_KINDS)}")
        c, out = self.cfg, []
        for layer in range(c.n_layers):
            for k in UNIT_KINDS if kind is None else (kind,):
                out += ([Unit("gate", layer, b) for b in range(len(c.gate_branches[layer]))] if k == "gate"
                        else head_units(c, k, [layer]))
        return out

    def check_unit(self, unit: Unit) -> Unit:
        """Return `unit` if this model has it, else raise ValueError with the allowed range."""
        if not isinstance(unit, Unit):
            raise ValueError(f"unit={unit!r} is invalid: allowed a phaseinterp.units.Unit")
        unit.check(self.cfg)
        if unit.kind == "gate":
            n = len(self.cfg.gate_branches[unit.layer])
            if n == 0:
                allowed = [u.name for u in self.units("gate")]
                raise ValueError(f"{unit.name}: layer {unit.layer} has no compressor; gate units: {allowed}")
            if not unit.index < n:
                raise ValueError(f"{unit.name}: gate index={unit.index} is out of range: allowed 0..{n - 1}")
        return unit

    def heads_of(self, unit: Unit) -> list[int]:
        """Query heads a head / KV-head / layer unit covers (`unit.heads(cfg)`: head h reads KV head h // group)."""
        return list(self.check_unit(unit).heads(self.cfg))

    # ---- running ----------------------------------------------------------------------------
    def _check_tokens(self, tokens: Tensor) -> Tensor:
        if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.dtype not in (torch.long, torch.int32, torch.int64):
            shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be an integer tensor [batch, pos]; got {shape}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size):
            bad = tokens[(tokens < 0) | (tokens >= self.cfg.vocab_size)][0].item()
            raise ValueError(f"token id {bad} is out of range: allowed 0..{self.cfg.vocab_size - 1}")
        return tokens.long().to(self.device)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings (first parameter not on the meta
        device, where accelerate keeps offloaded weights between calls; its hooks move the inputs
        on to where the first layer runs)."""
        return first_device(self.model) or torch.device("cpu")

    @property
    def nn(self) -> BatchedNNsight:
        """The nnsight wrapper of the model (built on first use)."""
        if self._nn is None:
            self._nn = BatchedNNsight(self.model)
            object.__setattr__(self._nn, "_phaseinterp_call_kwargs", self._call_kwargs())
        return self._nn

    def __call__(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos vocab"]:
        """Logits [batch, pos, vocab], with the edits of the enclosing `intervene` blocks."""
        tokens = self._check_tokens(tokens)
        if not self._active:
            with torch.no_grad():
                return self._forward(tokens)
        return self.run(tokens, self._active)[0]

    @contextmanager
    def intervene(self, *edits: Edit) -> Iterator[Backend]:
        """Apply `edits` to every call inside the block; removed on exit, also on error.

        Example:
            >>> from phaseinterp.measure import phase_sweep
            >>> with backend.intervene(SetGate(Unit("gate", 1, 0), "uniform")):
            ...     curve = phase_sweep(backend, batch, progress=False)
            >>> curve.modulus
            4
        """
        for e in edits:
            if not hasattr(e, "apply"):
                raise ValueError(f"edit {e!r} is invalid: allowed Replace, SetGate, SetEntries or CycleGate")
            self.check_unit(e.unit)
        n = len(self._active)
        self._active.extend(edits)
        try:
            yield self
        finally:
            del self._active[n:]

    def run(self, tokens: Int[Tensor, "batch pos"], edits: Sequence[Edit] = (),
            reads: Sequence[Read] = ()) -> tuple[Float[Tensor, "batch pos vocab"], dict[Read, Tensor]]:
        """One traced forward with `edits`, returning logits and the requested `reads`
        (each read in its canonical layout, taken before any edit at the same site).

        Example:
            >>> read = Read("head", 1, positions=(-1,))
            >>> logits, values = backend.run(tokens, [SetGate(Unit("gate", 1, 0), "uniform")], [read])
            >>> values[read].shape  # z of layer 1 with its gate edited: [batch, 1, head, d_head]
            torch.Size([8, 1, 4, 16])
        """
        logits, values = self._trace(self._check_tokens(tokens), [list(edits)], list(reads), None)
        return logits[0], values[0]

    def run_batched(self, tokens: Int[Tensor, "batch pos"], variants: Sequence[Sequence[Edit]], *,
                    positions: Int[Tensor, " batch"] | None = None, variants_per_forward: int | None = None,
                    grad: bool = False) -> Float[Tensor, "variant batch ..."]:
        """Logits of `tokens` under each variant (a list of edits), several variants per forward.

        Args:
            tokens: [batch, pos] prompts (every variant runs on all of them).
            variants: one list of edits per variant (an empty list is the clean run).
            positions: per row, the position whose logits to keep ([variant, batch, vocab]);
                None keeps all ([variant, batch, pos, vocab]).
            variants_per_forward: variants per batched forward (default all at once).
            grad: keep the autograd graph (logits, and the edits' tensors, e.g. leaves an edit
                made of a site's activation to differentiate with respect to; attribution).

        Example:
            >>> kv = backend.units("kv_head")
            >>> backend.run_batched(tokens, [[Replace(u)] for u in kv], positions=qpos).shape  # [edit sets, batch, vocab]
            torch.Size([2, 8, 512])
        """
        tokens = self._check_tokens(tokens)
        if positions is not None:
            if positions.shape != (tokens.shape[0],):
                raise ValueError(f"positions must have shape ({tokens.shape[0]},); got {tuple(positions.shape)}")
            for p in positions.tolist():
                _positions(p, tokens.shape[1])
        chunk = len(variants) if variants_per_forward is None else variants_per_forward
        if chunk < 1:
            raise ValueError(f"variants_per_forward={variants_per_forward} is out of range: allowed >= 1")
        out = []
        for start in range(0, len(variants), chunk):
            logits, _ = self._trace(tokens, [list(v) for v in variants[start : start + chunk]], [], positions, grad)
            out.extend(logits)
        return torch.stack(out)

    # ---- reads ------------------------------------------------------------------------------
    def head_outputs(self, tokens: Int[Tensor, "batch pos"], positions: Positions = (-1,),
                     layers: Sequence[int] | None = None) -> Float[Tensor, "batch layer n_pos head d_head"]:
        """Per-head attention outputs z (what `Replace` on head units replaces) at `positions`
        (shared ints, or per row a tensor [batch] / [batch, n_pos], e.g. `batch.query_pos`).

        Example:
            >>> backend.head_outputs(calib.tokens).mean(0).shape  # mean z: [layer, 1, head, d_head]
            torch.Size([2, 1, 4, 16])
        """
        layers = range(self.cfg.n_layers) if layers is None else layers
        reads = [Read("head", self.check_unit(Unit("layer", l)).layer, 0, positions) for l in layers]
        _, values = self.run(tokens, reads=reads)
        return torch.stack([values[r] for r in reads], dim=1)

    def layer_outputs(self, tokens: Int[Tensor, "batch pos"], positions: Positions = (-1,),
                      layers: Sequence[int] | None = None) -> Float[Tensor, "batch layer n_pos d_model"]:
        """Attention outputs of whole layers (what `Replace` on layer units replaces) at `positions`.

        Example:
            >>> backend.layer_outputs(tokens, positions=(-1,)).shape  # [batch, layer, 1, d_model]
            torch.Size([8, 2, 1, 64])
        """
        layers = range(self.cfg.n_layers) if layers is None else layers
        reads = [Read("layer", self.check_unit(Unit("layer", l)).layer, 0, positions) for l in layers]
        _, values = self.run(tokens, reads=reads)
        return torch.stack([values[r] for r in reads], dim=1)

    def gate_weights(self, tokens: Int[Tensor, "batch pos"], unit: Unit) -> Float[Tensor, "batch entry offset kv_head channel"]:
        """Gate weights of a compressor branch (softmax over window offsets; 0 before position 0).

        Example:
            >>> g = backend.gate_weights(tokens, Unit("gate", 1, 0))  # [batch, entry, W, kv_head, channel]
            >>> g.shape, g.mean((0, 1, 3, 4)).shape  # the profile: mean weight per window offset
            (torch.Size([8, 8, 4, 1, 1]), torch.Size([4]))
        """
        self.check_unit(unit)
        if unit.kind != "gate":
            raise ValueError(f"{unit.name}: gate_weights needs a gate unit")
        read = Read("gate", unit.layer, unit.index)
        return self.run(tokens, reads=[read])[1][read]

    def entries(self, tokens: Int[Tensor, "batch pos"], unit: Unit) -> Float[Tensor, "batch entry kv_head d_entry"]:
        """Compressed entries of a compressor branch, in the layout the model stores them.

        Example:
            >>> backend.entries(tokens, Unit("gate", 1, 0)).shape  # [batch, entry, kv_head, d]
            torch.Size([8, 8, 1, 16])
        """
        self.check_unit(unit)
        if unit.kind != "gate":
            raise ValueError(f"{unit.name}: entries needs a gate unit")
        read = Read("entry", unit.layer, unit.index)
        return self.run(tokens, reads=[read])[1][read]

    # ---- the trace engine -------------------------------------------------------------------
    def _check_read(self, read: Read, batch: int, seq_len: int) -> None:
        if read.site not in SITE_ORDER:
            raise ValueError(f"read site={read.site!r} is invalid: allowed {list(SITE_ORDER)}")
        if read.site in COMPRESSOR_SITES:
            self.check_unit(Unit("gate", read.layer, read.branch))
        else:
            self.check_unit(Unit("layer", read.layer))
        if read.positions is not None:
            sites(read.positions, batch, seq_len)

    def _trace(self, tokens: Tensor, variants: list[list[Edit]], reads: list[Read],
               positions: Tensor | None, grad: bool = False) -> tuple[list[Tensor], list[dict[Read, Tensor]]]:
        batch, seq_len = tokens.shape
        for edits in variants:
            for e in edits:
                e.check(self, batch, seq_len)
        for r in reads:
            self._check_read(r, batch, seq_len)
        logits: dict[int, Tensor] = {}
        values: list[dict[Read, Tensor]] = [{} for _ in variants]
        rows = torch.arange(batch, device=tokens.device)
        nn = self.nn
        object.__setattr__(nn, "_phaseinterp_call_kwargs", self._call_kwargs(positions, len(variants)))
        try:
            with engine_trace(), torch.set_grad_enabled(grad), nn.trace() as tracer:
                for i, edits in enumerate(variants):
                    with tracer.invoke(tokens):
                        self._apply(edits, reads, values[i])
                        out = self._logits(nn.output)
                        logits[i] = out if positions is None else self._pick(out, rows, positions)
        finally:  # direct `backend.nn.trace(...)` calls get the plain call again
            object.__setattr__(nn, "_phaseinterp_call_kwargs", self._call_kwargs())
        return [logits[i] for i in range(len(variants))], values

    def _apply(self, edits: list[Edit], reads: list[Read], store: dict[Read, Tensor]) -> None:
        """Inside one invoke: visit the sites in forward order, read, then edit."""
        plan: dict[tuple[int, int, int, str], tuple[list[Edit], list[Read]]] = defaultdict(lambda: ([], []))
        order = lambda site, branch: SITE_ORDER[site] + len(COMPRESSOR_SITES) * branch * (site in COMPRESSOR_SITES)  # noqa: E731
        for e in edits:
            site, layer, branch = e.site
            plan[(layer, order(site, branch), branch, site)][0].append(e)
        for r in reads:
            plan[(r.layer, order(r.site, r.branch), r.branch, r.site)][1].append(r)
        for key in sorted(plan):
            layer, _, branch, name = key
            todo, wanted = plan[key]
            site = self._site(name, layer, branch)
            # the gate projections run before the gate logits: read them first (nnsight's order)
            projection = (self._gate_projection(layer, branch)
                          if any(getattr(e, "needs_projection", False) for e in todo) else None)
            raw = site.get()
            canon = site.to_canon(raw)
            for r in wanted:
                if r.positions is None:
                    v = canon
                else:
                    pos = sites(r.positions, canon.shape[0], canon.shape[1]).to(canon.device)
                    v = canon[torch.arange(canon.shape[0], device=canon.device)[:, None], pos]
                store[r] = v.detach().clone()
            if todo:
                for e in todo:
                    canon = (e.apply(canon, self, projection) if getattr(e, "needs_projection", False)
                             else e.apply(canon, self))
                site.set(site.from_canon(canon, raw))
