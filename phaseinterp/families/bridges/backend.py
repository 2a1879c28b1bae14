"""Models researchers already hold in another toolkit: a TransformerLens 4.3 `TransformerBridge`
and an nnsight `LanguageModel` (or `TransformersModel`, `NNsight`), over a HuggingFace causal LM.

Both run behind the backend of the HF model underneath (`DeepseekV4Backend`, `HFCausalLMBackend`,
...; the model families `families.bridges` register them): a bridge replaces submodules of its HF
model in place with bridge components that call the original modules, so the HF model *is* what
the bridge runs, hooks included; a `LanguageModel` wraps its HF model unchanged (`_module`).

Where our sites are on the bridge (`bridge_hook_name`): the hook a TransformerLens user would
hook to see, or edit, what a backend site holds, and the layout it has there.

| site | DeepSeek-V4 adapter | other adapters (Qwen3, Llama, ...) |
|---|---|---|
| `head` (`Replace` of head, KV-head, layer units) | `blocks.{l}.attn.o_a_proj.hook_in` | `blocks.{l}.attn.hook_z` |
| `layer` | `blocks.{l}.attn.hook_out` | `blocks.{l}.attn.hook_out` |
| `entry` | `blocks.{l}.attn.compressor.hook_out` | none |
| `gate` | `blocks.{l}.attn.compressor.hook_gate` (added by `add_gate_hooks`) | none |
| `gate_logits` | `blocks.{l}.attn.compressor.hook_gate_logits` (added) | none |

Layouts there (ours in `backends.edits`): `hook_z` and `hook_out` as ours; V4's `o_a_proj.hook_in`
is `[batch, pos, o_groups, heads / o_groups * d_head]` (reshape to `[batch, pos, head, d_head]`);
`compressor.hook_out` is `[batch, 1, entry, d_head]` (ours `[batch, entry, 1, d_head]`); the gate
hooks are `[batch, entry, offset, d_head]` (ours with a KV-head axis of 1 before `d_head`), the
logits `-inf` at window slots before position 0, as ours.

TransformerLens's DeepSeek-V4 adapter has no gate site: the gate softmax is an expression inside
the HF compressor's forward, not a module. `add_gate_hooks` adds the two HookPoints to every
compressor bridge component and fires them from that softmax (a `TorchFunctionMode` active during
the compressor's forward while a hook is attached, which hands the softmax's input to
`hook_gate_logits` and its output to `hook_gate`; only the softmax the compressor's own forward
calls, not the lightning indexer's).

Example:
    >>> from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module
    >>> from phaseinterp.backends import backend_for
    >>> from phaseinterp.families.deepseek_v4 import tiny_deepseek_v4_spec
    >>> hf = tiny_deepseek_v4_spec().build(seed=0).hf  # random weights, no download
    >>> bridge = build_bridge_from_module(hf, "DeepseekV4ForCausalLM", hf_config=hf.config)
    >>> add_gate_hooks(bridge)[-1], bridge_hook_name(bridge, Unit("gate", 1, 0))
    ('blocks.1.attn.compressor.hook_gate', 'blocks.1.attn.compressor.hook_gate')
    >>> type(backend_for(bridge)).__name__, backend_for(bridge).cfg.strides  # its HF model, behind its backend
    ('DeepseekV4Backend', (4, 8))
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from phaseinterp.backends.base import Backend
from phaseinterp.family import backend_of
from phaseinterp.units import Unit

SITES = ("head", "layer", "entry", "gate", "gate_logits")
DEEPSEEK_V4_HOOKS = {
    "head": "blocks.{l}.attn.o_a_proj.hook_in",
    "layer": "blocks.{l}.attn.hook_out",
    "entry": "blocks.{l}.attn.compressor.hook_out",
    "gate": "blocks.{l}.attn.compressor.hook_gate",
    "gate_logits": "blocks.{l}.attn.compressor.hook_gate_logits",
}
DEFAULT_HOOKS = {"head": "blocks.{l}.attn.hook_z", "layer": "blocks.{l}.attn.hook_out"}
COMPRESSOR_SITES = ("entry", "gate", "gate_logits")


def bridged_model(bridge: Any) -> torch.nn.Module:
    """The HF model a bridge runs (its submodules partly bridge components that call the originals)."""
    model = getattr(bridge, "original_model", None)
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise ValueError(f"bridge over {type(model).__name__} is invalid: allowed a TransformerBridge over a "
                         "HuggingFace causal LM (TransformerBridge.boot_transformers or build_bridge_from_module)")
    return model


def language_model_module(lm: Any) -> torch.nn.Module:
    """The HF model an nnsight wrapper (`LanguageModel`, `TransformersModel`, `NNsight`) wraps
    (its weights loaded now if it was made without them)."""
    if getattr(lm, "dispatched", True) is False and hasattr(lm, "dispatch"):
        lm.dispatch()  # a wrapper made without weights (meta) loads them now
    model = getattr(lm, "_module", None)  # nnsight 0.8: the wrapped module (an Envoy's `_module`)
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise ValueError(f"{type(lm).__name__} over {type(model).__name__} is invalid: allowed an nnsight "
                         "LanguageModel, TransformersModel or NNsight over a HuggingFace causal LM")
    return model


def _architecture(bridge: Any) -> str:
    return getattr(bridge.cfg, "architecture", None) or type(bridged_model(bridge)).__name__


def bridge_hook_name(bridge: Any, site: str | Unit, layer: int | None = None) -> str:
    """The bridge hook a TransformerLens user hooks to see what backend site `site` of `layer` holds
    (layouts: the module docstring's table). A `Unit` gives the site its edits act on: `head`
    for head, KV-head and layer units (knockouts replace head outputs), `gate` for gate units.

    Example:
        >>> from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module
        >>> from phaseinterp.backends.tiny import tiny_qwen3
        >>> hf = tiny_qwen3(seed=0)
        >>> bridge = build_bridge_from_module(hf, "Qwen3ForCausalLM", hf_config=hf.config)
        >>> bridge_hook_name(bridge, Unit("kv_head", 1, 0)), bridge_hook_name(bridge, "layer", 0)
        ('blocks.1.attn.hook_z', 'blocks.0.attn.hook_out')
    """
    if isinstance(site, Unit):
        site, layer = ("gate" if site.kind == "gate" else "head"), site.layer
    table = DEEPSEEK_V4_HOOKS if _architecture(bridge) == "DeepseekV4ForCausalLM" else DEFAULT_HOOKS
    if site not in table:
        raise ValueError(f"site={site!r} is invalid for a {_architecture(bridge)} bridge: allowed {list(table)}")
    n_layers = bridge.cfg.n_layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer={layer!r} is out of range: allowed 0..{n_layers - 1}")
    name = table[site].format(l=layer)
    if name not in bridge.hook_dict:
        what = "has no compressor" if site in COMPRESSOR_SITES else "has no such hook"
        extra = " (call add_gate_hooks(bridge) first)" if site in ("gate", "gate_logits") else ""
        raise ValueError(f"{name!r} is not a hook of this bridge: layer {layer} {what}{extra}")
    return name


def _calling_module(depth: int = 12) -> Any:
    """The module whose forward made the current call: the nearest caller frame whose `self` is a
    module (nnsight's `.source` instrumentation puts wrapper frames in between)."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module):
            return owner
        frame = frame.f_back
    return None


class _GateSoftmax(TorchFunctionMode):
    """Active during one compressor forward: the softmax that forward calls itself goes through
    the component's `hook_gate_logits` (its input) and `hook_gate` (its output)."""

    def __init__(self, component: Any, compressor: torch.nn.Module) -> None:
        super().__init__()
        self.component, self.compressor = component, compressor

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.softmax and _calling_module() is self.compressor:
            logits = self.component.hook_gate_logits(args[0])
            return self.component.hook_gate(func(logits, *args[1:], **kwargs))
        return func(*args, **kwargs)


def _install_gate_mode(component: Any) -> None:
    """Torch hooks on `component` that run its forward under `_GateSoftmax` while a gate hook is
    attached (hooks, not a new forward: nnsight replaces a traced module's `forward` on the instance,
    and module hooks run around whatever forward is there; the exit hook runs on errors too)."""
    active: list[_GateSoftmax | None] = []

    def enter(module: Any, args: Any) -> None:
        mode = None
        if module.hook_gate._forward_hooks or module.hook_gate_logits._forward_hooks:
            mode = _GateSoftmax(module, module.original_component)
            mode.__enter__()
        active.append(mode)

    def leave(module: Any, args: Any, output: Any) -> None:
        mode = active.pop() if active else None
        if mode is not None:
            mode.__exit__(None, None, None)

    component.register_forward_pre_hook(enter)
    component.register_forward_hook(leave, always_call=True)


def add_gate_hooks(bridge: Any) -> list[str]:
    """Add `hook_gate_logits` and `hook_gate` to every DeepSeek-V4 compressor bridge component
    (idempotent); returns the names of the gate hooks, which `bridge.hook_dict`, `run_with_hooks`
    and `run_with_cache` then know.

    Raises:
        ValueError: a bridge whose compressors are not DeepSeek-V4's (no gate softmax to hook).
    """
    from transformer_lens.hook_points import HookPoint

    names = []
    for layer, block in enumerate(bridge.blocks):
        component = getattr(getattr(block, "attn", None), "compressor", None)
        if component is None or getattr(component, "original_component", None) is None:
            continue  # sliding-window layers: the optional compressor is absent
        source = getattr(type(component.original_component), "forward", None)
        code = getattr(getattr(source, "__wrapped__", source), "__code__", None)
        if code is None or "softmax" not in code.co_names:
            raise ValueError(f"layer {layer}: the compressor {type(component.original_component).__name__} calls no "
                             "softmax in its forward: allowed a DeepSeek-V4 CSA or HCA compressor")
        if not hasattr(component, "hook_gate"):
            component.hook_gate_logits = HookPoint()
            component.hook_gate = HookPoint()
            _install_gate_mode(component)
        names += [f"blocks.{layer}.attn.compressor.hook_gate_logits", f"blocks.{layer}.attn.compressor.hook_gate"]
    if not names:
        raise ValueError(f"a {_architecture(bridge)} bridge is invalid for add_gate_hooks: allowed a bridge with "
                         "DeepSeek-V4 compressors (the DeepseekV4ForCausalLM adapter)")
    bridge.clear_hook_registry()
    bridge._initialize_hook_registry()
    return names


class BridgeBackend(Backend):
    """The family entry of a TransformerLens `TransformerBridge` (`families.bridges`): never built
    itself; a bridge runs behind the backend of the HF model it holds, chosen by that model's family."""

    @classmethod
    def wrap(cls, model: Any, stride: int | None = None) -> Backend:
        return _with_tokenizer(backend_of(bridged_model(model), stride), model)


class LanguageModelBackend(Backend):
    """The family entry of an nnsight `LanguageModel` (`families.bridges`): it runs behind the backend
    of the HF model it wraps, chosen by that model's family."""

    @classmethod
    def wrap(cls, model: Any, stride: int | None = None) -> Backend:
        return _with_tokenizer(backend_of(language_model_module(model), stride), model)


def _with_tokenizer(backend: Backend, wrapper: Any) -> Backend:
    """The backend reads text with the wrapper's tokenizer (`to_tokens`, `to_str_tokens`), when it has one."""
    if getattr(wrapper, "tokenizer", None) is not None:
        backend.tokenizer = wrapper.tokenizer
        backend.default_prepend_bos = getattr(getattr(wrapper, "cfg", None), "default_prepend_bos", None)
    return backend


__all__ = ["BridgeBackend", "DEEPSEEK_V4_HOOKS", "DEFAULT_HOOKS", "LanguageModelBackend", "SITES", "add_gate_hooks",
           "bridge_hook_name", "bridged_model", "language_model_module"]
