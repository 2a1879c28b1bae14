"""Exact loss of static rules at eps = 0, and the Theorem 1 optimum.

A static rule gives each head h distributions ``p^K_h, p^V_h`` over the S chunk positions that do
not depend on the chunk's content. At eps = 0 with distinct contexts, kappa cancels (it shifts
all attention logits of a head, and all vocabulary logits, by the same constant) and the loss of
a query at position r* is the same for every context, so the expectation is exact:

    A_h = exp(gamma p^K_h(r*)),  a_h = A_h / (A_h + L - 1),  b_h = 1 / (A_h + L - 1)
    s(r) = sum_h a_h p^V_h(r)  (query chunk),   o(r) = sum_h b_h p^V_h(r)  (each other chunk)
    loss(r*) = -beta s(r*+1) + log( N - L S + sum_r exp(beta s(r)) + (L-1) sum_r exp(beta o(r)) )
    loss = mean over r* in 0..S-2.

Theorem 1 (the paper, docs/paper.md): the optimal rules are one-hot, head h keyed on a position r_h and valued on
r_h + 1, with distinct r_h (m < S heads cover m of the S-1 non-final positions).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.theory.config import TheoryConfig
from phaseinterp.theory.task import DTYPE


def _check_exact(cfg: TheoryConfig) -> None:
    if cfg.eps != 0 or not cfg.distinct_context:
        raise ValueError(
            f"exact loss needs eps=0 and distinct_context=True (got eps={cfg.eps}, "
            f"distinct_context={cfg.distinct_context}); use model.static_loss_mc otherwise")


def exact_static_loss(
    pk: Float[Tensor, "*batch m S"], pv: Float[Tensor, "*batch m S"], cfg: TheoryConfig
) -> Float[Tensor, "*batch"]:
    """Exact expected cross-entropy of static rules at eps = 0 (formula in the module docstring).

    Example:
        >>> cfg = TheoryConfig(m=1, S=4, L=2, N=8)
        >>> pk, pv = theorem1_rules(cfg)
        >>> float(exact_static_loss(pk, pv, cfg)) < float(exact_static_loss(torch.full((1, 4), 0.25,
        ...     dtype=torch.float64), torch.full((1, 4), 0.25, dtype=torch.float64), cfg))
        True
    """
    _check_exact(cfg)
    S, L = cfg.S, cfg.L
    if pk.shape[-2:] != (cfg.m, S) or pv.shape[-2:] != (cfg.m, S):
        raise ValueError(f"rules of shape {tuple(pk.shape)}, {tuple(pv.shape)}: need [..., m={cfg.m}, S={S}]")
    A = torch.exp(cfg.gamma * pk[..., : S - 1])  # [*batch, m, r*]
    a, b = A / (A + L - 1), 1.0 / (A + L - 1)
    s = torch.einsum("...hq,...hr->...qr", a, pv)  # s[r*, r]: query chunk
    o = torch.einsum("...hq,...hr->...qr", b, pv)  # o[r*, r]: each other chunk
    parts = [cfg.beta * s, cfg.beta * o + math.log(L - 1)]
    if cfg.N > L * S:
        parts.append(torch.full_like(s[..., :1], math.log(cfg.N - L * S)))
    answer = torch.diagonal(s, offset=1, dim1=-2, dim2=-1)  # s[r*, r*+1]
    return (torch.logsumexp(torch.cat(parts, dim=-1), dim=-1) - cfg.beta * answer).mean(dim=-1)


def theorem1_rules(
    cfg: TheoryConfig, key_positions: list[int] | None = None
) -> tuple[Float[Tensor, "m S"], Float[Tensor, "m S"]]:
    """One-hot rules: head h keyed on ``key_positions[h]`` and valued on the next position.

    Args:
        cfg: the model.
        key_positions: m positions in 0..S-2; default ``0..m-1`` (distinct: the Theorem 1 optimum).

    Example:
        >>> pk, pv = theorem1_rules(TheoryConfig(m=2, S=3, N=8, L=2))
        >>> pk.tolist(), pv.tolist()
        ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    """
    keys = list(range(cfg.m)) if key_positions is None else list(key_positions)
    if len(keys) != cfg.m or any(not isinstance(r, int) or not 0 <= r <= cfg.S - 2 for r in keys):
        raise ValueError(f"key_positions={key_positions!r}: need m={cfg.m} integers in [0, S-2={cfg.S - 2}]")
    eye = torch.eye(cfg.S, dtype=DTYPE)
    return eye[keys], eye[[r + 1 for r in keys]]


def theorem1_loss(cfg: TheoryConfig) -> float:
    """Exact loss of the Theorem 1 optimum (distinct one-hot positions) at eps = 0."""
    pk, pv = theorem1_rules(cfg)
    return float(exact_static_loss(pk, pv, cfg))


def optimize_static_rules(
    cfg: TheoryConfig, n_starts: int, seed: int, steps: int = 300, lr: float = 0.5
) -> tuple[Float[Tensor, "start m S"], Float[Tensor, "start m S"], Float[Tensor, " start"]]:
    """Minimize the exact loss over static rules (softmax-parametrized) from random starts.

    A numerical check of Theorem 1: the minima reached should be (near) one-hot with distinct
    keys and values one position after the key, and never beat `theorem1_loss`.

    Returns:
        The rules reached and their exact losses.
    """
    _check_exact(cfg)
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(n_starts, 2, cfg.m, cfg.S, generator=g, dtype=DTYPE).requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    for _ in range(steps):
        p = theta.softmax(dim=-1)
        loss = exact_static_loss(p[:, 0], p[:, 1], cfg)
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
    with torch.no_grad():
        p = theta.softmax(dim=-1)
        return p[:, 0], p[:, 1], exact_static_loss(p[:, 0], p[:, 1], cfg)


def static_rule_survey(cfg: TheoryConfig, n: int = 20, seed: int = 0, optimize_starts: int = 8,
                       optimize_steps: int = 300):
    """Exact losses (eps = 0) of many static rules, to compare with the Theorem 1 optimum.

    Kinds (n rules each, seeded): ``uniform``; ``random`` (Dirichlet(1) key and value per head);
    ``mixture`` ((1-t) optimum + t random, t ~ U(0.05, 0.95)); ``split`` (each head half on two
    pairs (r, r+1)); ``unpaired one-hot`` (one-hot, value not at key+1); ``duplicate one-hot``
    (all heads on one pair); ``optimized`` (local minima of the exact loss from random starts).

    Returns:
        A DataFrame with columns ``kind, loss, onehot, theorem1_loss, excess``.

    Example:
        >>> df = static_rule_survey(TheoryConfig(N=64), n=3, optimize_starts=0)
        >>> bool((df["excess"] > 0).all())
        True
    """
    import pandas as pd

    _check_exact(cfg)
    g = torch.Generator().manual_seed(seed)
    m, S = cfg.m, cfg.S
    opt_k, opt_v = theorem1_rules(cfg)
    eye = torch.eye(S, dtype=DTYPE)

    def dirichlet(*shape: int) -> Tensor:
        e = -torch.log(torch.rand(*shape, S, generator=g, dtype=DTYPE))
        return e / e.sum(-1, keepdim=True)

    def pairs(k: int) -> Tensor:
        return torch.randint(0, S - 1, (n, m, k), generator=g)

    rules: dict[str, tuple[Tensor, Tensor]] = {
        "uniform": (torch.full((1, m, S), 1 / S, dtype=DTYPE),) * 2,
        "random": (dirichlet(n, m), dirichlet(n, m)),
    }
    t = 0.05 + 0.9 * torch.rand(n, 1, 1, generator=g, dtype=DTYPE)
    rules["mixture"] = ((1 - t) * opt_k + t * dirichlet(n, m), (1 - t) * opt_v + t * dirichlet(n, m))
    r = pairs(2)
    r[..., 1] = (r[..., 0] + 1 + torch.randint(0, S - 2, (n, m), generator=g)) % (S - 1)  # two distinct pairs
    rules["split"] = ((eye[r[..., 0]] + eye[r[..., 1]]) / 2, (eye[r[..., 0] + 1] + eye[r[..., 1] + 1]) / 2)
    keys = pairs(1)[..., 0]
    shift = torch.randint(2, S, (n, m), generator=g)  # value at key + shift (mod S), never key + 1
    rules["unpaired one-hot"] = (eye[keys], eye[(keys + shift) % S])
    same = pairs(1)[:, :1, 0].expand(n, m)
    rules["duplicate one-hot"] = (eye[same], eye[same + 1])
    if optimize_starts > 0:
        pk, pv, _ = optimize_static_rules(cfg, optimize_starts, seed, steps=optimize_steps)
        rules["optimized"] = (pk, pv)
    best = theorem1_loss(cfg)
    rows = []
    for kind, (pk, pv) in rules.items():
        with torch.no_grad():
            losses = exact_static_loss(pk, pv, cfg)
        onehot = (torch.minimum(pk.max(-1).values, pv.max(-1).values).min(-1).values > 1 - 1e-12)
        for loss, oh in zip(losses.tolist(), onehot.tolist()):
            rows.append({"kind": kind, "loss": loss, "onehot": oh, "theorem1_loss": best, "excess": loss - best})
    return pd.DataFrame(rows)
