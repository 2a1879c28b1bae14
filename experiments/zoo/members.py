"""The zoo: every member is a set of arguments of the recipe rule (`phaseinterp.train.rule`),
shipped with seeds 0 and 1 as `assets/checkpoints/zoo/zoo-NAME-sSEED`.

Example:
    >>> model_cfg, tcfg = zoo_recipe("w8s8-kv4", seed=1)
    >>> model_cfg.n_kv_heads, tcfg.seed, zoo_name("w8s8", 0, width=256, kv_heads=8)
    (4, 1, 'zoo-w8s8-d256-kv8-s0')
"""

from __future__ import annotations

from typing import Any

from phaseinterp.config import ModelConfig
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.rule import WIDTH, rule_recipe

#: name -> rule arguments (each shipped with seeds 0 and 1 as `zoo-NAME-sSEED`).
ZOO: dict[str, dict[str, Any]] = {
    "full-kv4": {"layout": "full", "kv_heads": 4},
    **{f"w{w}s{w}": {"window": w, "stride": w} for w in (2, 4, 8, 12, 16)},
    "w8s8-kv4": {"window": 8, "stride": 8, "kv_heads": 4},
    "w8s4": {"window": 8, "stride": 4},
    "w16s8": {"window": 16, "stride": 8},
    "csa": {"layout": "deepseek-csa"},
    "w8s8-uniform": {"window": 8, "stride": 8, "gate": "uniform"},
    "w8s8-norope": {"window": 8, "stride": 8, "rope": False},
}

#: Members beyond the shipped zoo: for the control on the harder task (`experiments/control`, 4 seeds:
#: full attention with the compressed members' head size, 8 KV heads), and the paper's variants.
EXTRA: dict[str, dict[str, Any]] = {
    "full-d64": {"layout": "full", "d_head": 64},
    # at the rule's lr (3e-3) full attention with d_head 64 stays on the exclusion plateau (full-d64, 2 of 2 seeds)
    "full-d64-lr1e3": {"layout": "full", "d_head": 64, "lr": 1e-3},
    "full-d64-kv4-lr1e3": {"layout": "full", "d_head": 64, "kv_heads": 4, "lr": 1e-3},
    "w8s8-kv8": {"window": 8, "stride": 8, "kv_heads": 8},
    # the paper's controlled variants not in the zoo (docs/paper.md: the setting), 2 seeds each
    "w8s8-nobias": {"window": 8, "stride": 8, "offset_bias": False},
    "w8s8-shared": {"window": 8, "stride": 8, "payload": "shared"},
    "w8s8-rope32": {"window": 8, "stride": 8, "rope_dims": 32},
    "w8s8-noqknorm": {"window": 8, "stride": 8, "qk_norm": False},
    "w8s6": {"window": 8, "stride": 6},
    "w8s8-kv2": {"window": 8, "stride": 8, "kv_heads": 2},
    # the rule's generalization sweep (`SWEEP`): pairs that are not zoo members, W = S and overlapping
    **{f"w{w}s{s}": {"window": w, "stride": s} for w, s in ((3, 3), (6, 6), (10, 10), (20, 20), (6, 3), (10, 5),
                                                             (14, 7), (24, 12))},
    # the sweep's W10 pairs with the aligned start the rule gives windows of 12 and more (tried as a change of the rule)
    "w10s10-aligned": {"window": 10, "stride": 10, "aligned": True},
    "w10s5-aligned": {"window": 10, "stride": 5, "aligned": True},
    # W14/S7 aligned modulo two periods (14: four positions of a 64-token row) instead of the table's 56 (one)
    "w14s7-mod14": {"window": 14, "stride": 7, "aligned_modulus": 14},
}
#: The generalization sweep of the recipe rule (issue 32): window 3 to 24, W = S and overlapping.
SWEEP = ("w3s3", "w6s6", "w10s10", "w20s20", "w6s3", "w10s5", "w14s7", "w24s12")
#: Every member a run can name: the zoo and the extras.
MEMBERS: dict[str, dict[str, Any]] = {**ZOO, **EXTRA}


def member(name: str, kv_heads: int | None = None) -> dict[str, Any]:
    """The rule arguments of zoo member `name`, optionally with `kv_heads` KV heads instead of its own."""
    if name not in MEMBERS:
        raise ValueError(f"unknown zoo member {name!r}: allowed {sorted(MEMBERS)}")
    return {**MEMBERS[name], **({} if kv_heads is None else {"kv_heads": kv_heads})}


def zoo_recipe(name: str, seed: int = 0, *, width: int = WIDTH, kv_heads: int | None = None
               ) -> tuple[ModelConfig, TrainConfig]:
    """The rule's configs of zoo member `name` (see `ZOO`), optionally at another width or with
    `kv_heads` KV heads instead of the member's (the larger zoo of `experiments/zoo/train_gpu.sh`)."""
    args = member(name, kv_heads)
    lr = args.pop("lr", None)
    model_cfg, tcfg = rule_recipe(**args, width=width, seed=seed)
    return model_cfg, tcfg if lr is None else tcfg.replace(lr=lr)


def rule_options(name: str, kv_heads: int | None = None) -> list[str]:
    """The `phaseinterp train --recipe rule` options that train zoo member `name` (`zoo_recipe`'s configs)."""
    args = member(name, kv_heads)
    out = []
    for key in ("window", "stride", "gate", "kv_heads", "layout", "d_head", "payload", "rope_dims", "lr", "aligned_modulus"):
        if key in args:
            out += [f"--{key.replace('_', '-')}", str(args[key])]
    if args.get("aligned") is True:
        out.append("--aligned-start")
    for key, flag in (("rope", "--no-rope"), ("offset_bias", "--no-offset-bias"), ("qk_norm", "--no-qk-norm"),
                      ("aligned", "--no-aligned-start")):
        if args.get(key) is False:
            out.append(flag)
    return out


def zoo_name(name: str, seed: int = 0, *, width: int = WIDTH, kv_heads: int | None = None) -> str:
    """The run and card name of a zoo member: `zoo-NAME-sSEED`, with `-dWIDTH` and `-kvK` when they
    differ from the shipped zoo's (e.g. "zoo-w8s8-d256-kv8-s0")."""
    extras = (f"-d{width}" if width != WIDTH else "") + ("" if kv_heads is None else f"-kv{kv_heads}")
    return f"zoo-{name}{extras}-s{seed}"


__all__ = ["EXTRA", "MEMBERS", "SWEEP", "ZOO", "member", "rule_options", "zoo_name", "zoo_recipe"]
