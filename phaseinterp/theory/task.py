"""The induction task: near-equiangular embeddings, contexts of L chunks, and the queries.

Embeddings: the Gram matrix ``G = I + kappa 11^T + E`` with ``E`` symmetric, zero diagonal and
``E_ij = eps * U_ij``, ``U_ij ~ Uniform[-1, 1]`` i.i.d. for ``i < j``; hence
``|x_i^T x_j - kappa - 1{i = j}| <= eps``. The embeddings are the rows of its Cholesky factor
(dimension d = N), so ``X X^T = G`` exactly. At eps = 0 all seeds share the same embeddings.

Contexts: ``tokens[n, j, r]`` is the token at position r of chunk j; all L*S tokens of a context are
distinct (``distinct_context``) or only the S tokens of each chunk. Queries: every chunk j and every
non-final position ``r* in 0..S-2``; the query token is ``tokens[j, r*]`` and the answer
``tokens[j, r*+1]``. The query's phase is ``r*``.

Every random draw comes from `generator(seed, stream)`, so runs are reproducible and independent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from phaseinterp.theory.config import TheoryConfig

DTYPE = torch.float64
#: Independent random streams per seed.
STREAMS = {"embeddings": 0, "train": 1, "eval": 2, "init": 3}


def generator(seed: int, stream: str) -> torch.Generator:
    """A CPU generator for one (seed, stream) pair, via numpy's SeedSequence.

    Example:
        >>> a = torch.rand(2, generator=generator(0, "train"))
        >>> bool((a == torch.rand(2, generator=generator(0, "train"))).all())
        True
    """
    if stream not in STREAMS:
        raise ValueError(f"stream={stream!r}: need one of {sorted(STREAMS)}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed={seed!r} out of range: need an integer >= 0")
    state = np.random.SeedSequence([int(seed), STREAMS[stream]]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def near_equiangular_gram(N: int, kappa: float, eps: float, seed: int) -> Float[Tensor, "N N"]:
    """The target Gram matrix ``I + kappa 11^T + E`` (see the module docstring).

    Example:
        >>> G = near_equiangular_gram(16, 0.5, 0.05, seed=0)
        >>> bool(((G - 0.5 - torch.eye(16)).abs() <= 0.05).all())
        True
    """
    if not 0 <= eps < 0.5:
        raise ValueError(f"eps={eps!r} out of range: need 0 <= eps < 0.5")
    upper = torch.rand(N, N, generator=generator(seed, "embeddings"), dtype=DTYPE).mul_(2).sub_(1).triu_(1)
    perturbation = eps * (upper + upper.T)
    return torch.eye(N, dtype=DTYPE) + kappa * torch.ones(N, N, dtype=DTYPE) + perturbation


def make_embeddings(cfg: TheoryConfig, seed: int) -> Float[Tensor, "N d"]:
    """Embeddings x_1..x_N (rows), ``d = N``, with ``X X^T = near_equiangular_gram(...)``.

    Raises:
        ValueError: if eps is too large for this N (the Gram matrix is not positive definite).

    Example:
        >>> X = make_embeddings(TheoryConfig(N=32, kappa=0.5), seed=0)
        >>> round(float(X[0] @ X[1]), 6), round(float(X[0] @ X[0]), 6)
        (0.5, 1.5)
    """
    gram = near_equiangular_gram(cfg.N, cfg.kappa, cfg.eps, seed)
    factor, info = torch.linalg.cholesky_ex(gram)
    if int(info) != 0:
        bound = 0.8 / cfg.N**0.5
        raise ValueError(
            f"eps={cfg.eps} too large for N={cfg.N}: the Gram matrix I + kappa 11^T + E is not positive "
            f"definite; random perturbations need roughly eps < 0.8/sqrt(N) = {bound:.4f}")
    return factor


def sample_contexts(cfg: TheoryConfig, n: int, seed: int, stream: str = "train") -> Int[Tensor, "n L S"]:
    """``n`` contexts of token ids, ``tokens[i, j, r]`` = token at position r of chunk j.

    Example:
        >>> t = sample_contexts(TheoryConfig(N=32), n=5, seed=0)
        >>> t.shape, all(len(set(c.flatten().tolist())) == 32 for c in t)
        (torch.Size([5, 4, 8]), True)
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} out of range: need an integer >= 1")
    g = generator(seed, stream)
    if cfg.distinct_context:
        order = torch.rand(n, cfg.N, generator=g, dtype=DTYPE).argsort(dim=-1)
        return order[:, : cfg.L * cfg.S].reshape(n, cfg.L, cfg.S)
    order = torch.rand(n, cfg.L, cfg.N, generator=g, dtype=DTYPE).argsort(dim=-1)
    return order[..., : cfg.S].contiguous()


def query_positions(cfg: TheoryConfig) -> tuple[Int[Tensor, " Q"], Int[Tensor, " Q"]]:
    """Chunk and position of the ``Q = L (S-1)`` queries of a context, chunk-major.

    Example:
        >>> j, r = query_positions(TheoryConfig(S=3, L=2, N=6, m=1))
        >>> j.tolist(), r.tolist()
        ([0, 0, 1, 1], [0, 1, 0, 1])
    """
    chunk = torch.arange(cfg.L).repeat_interleave(cfg.S - 1)
    pos = torch.arange(cfg.S - 1).repeat(cfg.L)
    return chunk, pos


@dataclass
class RunData:
    """Embeddings and a context sample for R independent runs (one per seed), stacked.

    Attributes:
        X: embeddings ``[run, N, d]``; G: their Gram matrices ``[run, N, N]``;
        tokens: contexts ``[run, n, L, S]``; seeds: the seed of each run.
        structured: True when ``G = I + kappa 11^T`` exactly (eps = 0) and contexts are distinct;
            the model then uses an exact shortcut for the vocabulary softmax (see `model.py`).
    """

    X: Float[Tensor, "run N d"]
    G: Float[Tensor, "run N N"]
    tokens: Int[Tensor, "run n L S"]
    seeds: list[int]
    structured: bool = False
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def query_gram(self, cfg: TheoryConfig) -> Float[Tensor, "run n Q L S"]:
        """``<x_q, x_{j,r}>`` for every query q (chunk-major) and context slot (j, r); cached."""
        if "query_gram" not in self._cache:
            R, n, L, S = self.tokens.shape
            jq, rq = query_positions(cfg)
            query = self.tokens[:, :, jq, rq][..., None]  # [R, n, Q, 1]
            flat = self.tokens.reshape(R, n, 1, L * S)
            rows = torch.arange(R)[:, None, None, None]
            self._cache["query_gram"] = self.G[rows, query, flat].reshape(R, n, len(jq), L, S)
        return self._cache["query_gram"]

    def context_gram(self) -> Float[Tensor, "run n LS N"]:
        """``<x_i, x_v>`` for every context slot i and vocabulary token v; cached."""
        if "context_gram" not in self._cache:
            R, n, L, S = self.tokens.shape
            self._cache["context_gram"] = self.G[torch.arange(R)[:, None, None], self.tokens.reshape(R, n, L * S)]
        return self._cache["context_gram"]


def build_runs(cfg: TheoryConfig, seeds: list[int], n_contexts: int, stream: str = "train") -> RunData:
    """Embeddings (stream "embeddings") and ``n_contexts`` contexts (``stream``) for each seed.

    Example:
        >>> d = build_runs(TheoryConfig(N=32), seeds=[0, 1], n_contexts=3)
        >>> tuple(d.X.shape), tuple(d.tokens.shape)
        ((2, 32, 32), (2, 3, 4, 8))
    """
    if len(seeds) == 0:
        raise ValueError("seeds=[]: need at least one seed")
    if cfg.eps == 0:  # the same embeddings for every seed: one copy, broadcast (no memory per run)
        X = make_embeddings(cfg, seeds[0])[None].expand(len(seeds), -1, -1)
        G = near_equiangular_gram(cfg.N, cfg.kappa, 0.0, seeds[0])[None].expand(len(seeds), -1, -1)
    else:
        X = torch.stack([make_embeddings(cfg, s) for s in seeds])
        G = torch.stack([near_equiangular_gram(cfg.N, cfg.kappa, cfg.eps, s) for s in seeds])
    tokens = torch.stack([sample_contexts(cfg, n_contexts, s, stream) for s in seeds])
    structured = cfg.eps == 0 and cfg.distinct_context
    return RunData(X=X, G=G, tokens=tokens, seeds=list(seeds), structured=structured)
