"""The compressed-attention retrieval model and its cross-entropy loss.

For head h and chunk j with tokens ``x_{j,0..S-1}``, the gates are query-independent and log-linear:

    p^B_{h,j}(r) = exp(<c^B_{h,r}, x_{j,r}>) / sum_s exp(<c^B_{h,s}, x_{j,s}>),   B in {K, V}

and the chunk is compressed into one key and one value entry per head:

    K_{h,j} = sum_r p^K_{h,j}(r) x_{j,r},    V_{h,j} = sum_r p^V_{h,j}(r) x_{j,r}.

A query token ``x_q`` (position r* < S-1 of chunk j*) attends with one joint softmax over the L
chunks per head, the heads' outputs add up, and the unembedding reads the N vocabulary embeddings:

    a_{h,j}(q) = softmax_j( gamma <x_q, K_{h,j}> ),    o(q) = sum_h sum_j a_{h,j}(q) V_{h,j},
    logit_v(q) = beta <x_v, o(q)>,                      loss(q) = -log softmax_v(logit)[x_{j*, r*+1}].

Parametrization. The gates only see the *gate table* ``theta^B_{h,r}(v) = <c^B_{h,r}, x_v>``
(``theta = c X^T``, shape ``[run, 2, m, S, N]``), and every inner product of embeddings is an entry
of the Gram matrix ``G = X X^T``; the code works with ``theta`` and ``G`` only.

Exact shortcut. When ``G = I + kappa 11^T`` (eps = 0) and the L*S context tokens are distinct,
``logit_v = beta (kappa m + w_v)`` where ``w_v`` is the total weight ``sum_h a_{h,j} p^V_{h,j}(r)``
on the context slot holding v (0 for tokens outside the context), so the softmax over N tokens
reduces to the L*S context slots plus one class "outside the context" of multiplicity N - L*S.
All functions carry a leading ``run`` axis: independent runs (seeds) are evaluated in one batch.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.theory.config import TheoryConfig
from phaseinterp.theory.task import RunData, query_positions


def gate_table(c: Float[Tensor, "run 2 m S d"], X: Float[Tensor, "run N d"]) -> Float[Tensor, "run 2 m S N"]:
    """The gate logit of every token at every position: ``theta^B_{h,r}(v) = <c^B_{h,r}, x_v>``."""
    return torch.einsum("rbhsd,rvd->rbhsv", c, X)


def gate_probs(theta: Float[Tensor, "run 2 m S N"], tokens: Int[Tensor, "run n L S"]) -> Float[Tensor, "run 2 m n L S"]:
    """Log-linear gates ``p^B_{h,j}(r) = softmax_r theta^B_{h,r}(x_{j,r})`` (branch 0 = K, 1 = V).

    Example:
        >>> theta = torch.zeros(1, 2, 1, 2, 4, dtype=torch.float64)
        >>> gate_probs(theta, torch.tensor([[[[0, 1]]]]))[0, 0, 0, 0, 0].tolist()
        [0.5, 0.5]
    """
    R, B, m, S, _ = theta.shape
    n, L = tokens.shape[1:3]
    index = tokens.permute(0, 3, 1, 2).reshape(R, 1, 1, S, n * L).expand(R, B, m, S, n * L)
    logits = theta.gather(-1, index).reshape(R, B, m, S, n, L).permute(0, 1, 2, 4, 5, 3)
    return logits.softmax(dim=-1)


def candidate_logits(
    pk: Float[Tensor, "run m n L S"], pv: Float[Tensor, "run m n L S"], data: RunData, cfg: TheoryConfig
) -> tuple[Float[Tensor, "run n Q K"], Float[Tensor, " K"], Int[Tensor, "run n Q"]]:
    """Logits of the answer candidates of every query (chunk-major, see `query_positions`).

    Args:
        pk, pv: key and value gates per head, context, chunk and position (any rule).
        data: embeddings (through ``G``) and contexts.
        cfg: the model (uses L, S, gamma, beta, kappa, m).

    Returns:
        ``(logits, log_count, answer)``. In general the K = N candidates are the vocabulary,
        ``logits = beta <x_v, o(q)>`` and ``log_count = 0``. With ``data.structured`` the K = L*S+1
        candidates are the context slots and "outside the context", logits are shifted by the
        common constant ``-beta kappa m`` and ``log_count = [0,...,0, log(N - L*S)]``.
        ``answer`` indexes the correct candidate.
    """
    R, n, L, S = data.tokens.shape
    jq, rq = query_positions(cfg)
    Q = len(jq)
    g_query = data.query_gram(cfg)  # <x_q, x_{j,r}>
    attention = (cfg.gamma * torch.einsum("rhnjs,rnqjs->rnqhj", pk, g_query)).softmax(dim=-1)
    weights = torch.einsum("rnqhj,rhnjs->rnqjs", attention, pv).reshape(R, n, Q, L * S)
    if data.structured:
        outside = weights.new_zeros(R, n, Q, 1)
        logits = cfg.beta * torch.cat([weights, outside], dim=-1)
        count = cfg.N - L * S
        log_count = torch.zeros(L * S + 1, dtype=weights.dtype)
        log_count[-1] = math.log(count) if count > 0 else -math.inf
        answer = (jq * S + rq + 1).expand(R, n, Q)
        return logits, log_count, answer
    logits = cfg.beta * torch.einsum("rnqi,rniv->rnqv", weights, data.context_gram())
    return logits, torch.zeros(cfg.N, dtype=weights.dtype), data.tokens[:, :, jq, rq + 1]


def query_losses(
    pk: Float[Tensor, "run m n L S"], pv: Float[Tensor, "run m n L S"], data: RunData, cfg: TheoryConfig
) -> Float[Tensor, "run n Q"]:
    """Cross-entropy ``-log softmax_v(logit)[answer]`` of every query."""
    logits, log_count, answer = candidate_logits(pk, pv, data, cfg)
    return torch.logsumexp(logits + log_count, dim=-1) - logits.gather(-1, answer[..., None])[..., 0]


def query_correct(
    pk: Float[Tensor, "run m n L S"], pv: Float[Tensor, "run m n L S"], data: RunData, cfg: TheoryConfig
) -> Float[Tensor, "run n Q"]:
    """1.0 where the answer's logit is strictly above every other token's (top-1, ties wrong)."""
    logits, log_count, answer = candidate_logits(pk, pv, data, cfg)
    present = torch.isfinite(log_count)  # the "outside" class is empty when N = L*S
    target = logits.gather(-1, answer[..., None])
    others = logits.masked_fill(~present, -torch.inf).scatter(-1, answer[..., None], -torch.inf)
    return (target > others.max(dim=-1, keepdim=True).values)[..., 0].to(logits.dtype)


def gated_loss(theta: Float[Tensor, "run 2 m S N"], data: RunData, cfg: TheoryConfig) -> Float[Tensor, " run"]:
    """Monte Carlo loss of log-linear gates: mean cross-entropy over the n contexts x Q queries.

    With a fixed ``data`` sample (common random numbers) this is a deterministic, smooth function
    of the gates: the objective of the gradient flow.
    """
    pk, pv = gate_probs(theta, data.tokens).unbind(dim=1)
    return query_losses(pk, pv, data, cfg).mean(dim=(1, 2))


def expand_static(rule: Float[Tensor, "run m S"], tokens: Int[Tensor, "run n L S"]) -> Float[Tensor, "run m n L S"]:
    """A static (content-independent) rule, broadcast to every context and chunk."""
    R, n, L, S = tokens.shape
    return rule[:, :, None, None, :].expand(R, rule.shape[1], n, L, S)


def static_loss_mc(
    pk: Float[Tensor, "run m S"], pv: Float[Tensor, "run m S"], data: RunData, cfg: TheoryConfig
) -> Float[Tensor, " run"]:
    """Monte Carlo loss of static rules ``p^K_h(r), p^V_h(r)`` (the same for every chunk)."""
    losses = query_losses(expand_static(pk, data.tokens), expand_static(pv, data.tokens), data, cfg)
    return losses.mean(dim=(1, 2))
