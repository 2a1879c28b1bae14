"""Configuration of the idealized retrieval model (docs/paper.md, the mechanism, "Theory") and of its flow.

Two validated dataclasses. `TheoryConfig` fixes the task and the model (everything the loss
depends on); `FlowConfig` fixes how the gradient flow is started, integrated and evaluated.
Bad values raise `ValueError` naming the value and the allowed range.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

#: Largest allowed eps. Above 1/2 a token can be closer to another token than to itself.
EPS_MAX = 0.5


def _check_int(name: str, value: object, low: int, high: int | float, hint: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        upper = "inf" if high == math.inf else str(int(high))
        raise ValueError(f"{name}={value!r} out of range: need an integer in [{low}, {upper}]{hint}")


def _check_float(name: str, value: object, low: float, high: int | float, *, open_low: bool = False,
                 open_high: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if open_low else value >= low)
    ok = ok and (value < high if open_high else value <= high)
    if not ok:
        lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
        raise ValueError(f"{name}={value!r} out of range: need a finite number in {lo}{low}, {high}{hi}")


@dataclass(frozen=True)
class TheoryConfig:
    """The induction task and the compressed-attention model.

    Task: a context is L chunks of S tokens; token ids index N embeddings x_1..x_N whose Gram matrix
    is ``G = I + kappa 11^T + E`` with ``E`` symmetric, zero diagonal, ``|E_ij| <= eps``, i.e.
    ``|x^T x' - kappa - 1{x = x'}| <= eps`` (docs/paper.md). With ``distinct_context`` (default) all L*S
    tokens of a context are distinct, so every query has one unambiguous answer; otherwise only the
    S tokens inside each chunk are distinct (chunks drawn independently; a repeated query token then
    also appears in other chunks). A query repeats the token at non-final position ``r* < S-1`` of
    some chunk and asks for its successor (position ``r*+1`` of the same chunk).

    Model: m heads, each with query-independent log-linear gates ``p^B_h(r) ~ exp(<c^B_{h,r}, x_r>)``
    for B in {K, V}, attention scale ``gamma`` and unembedding scale ``beta`` (see `model.py`).

    Args:
        m: heads, ``1 <= m <= S-1`` (m < S).
        S: chunk length (stride), ``S >= 2``.
        L: chunks per context, ``L >= 2``.
        N: vocabulary size, ``N >= L*S`` with ``distinct_context`` else ``N >= S``.
        kappa: shared component of the embeddings, ``kappa >= 0``.
        eps: tolerance of the near-equiangular Gram, ``0 <= eps < 0.5``.
        gamma: attention scale, ``> 0``.
        beta: unembedding scale, ``> 0``.
        distinct_context: all L*S context tokens distinct (True) or only within a chunk (False).

    Example:
        >>> TheoryConfig(m=3, S=8).n_queries
        28
    """

    m: int = 3
    S: int = 8
    L: int = 4
    N: int = 256
    kappa: float = 1.0
    eps: float = 0.0
    gamma: float = 4.0
    beta: float = 3.0
    distinct_context: bool = True

    def __post_init__(self) -> None:
        _check_int("S", self.S, 2, math.inf)
        _check_int("m", self.m, 1, self.S - 1, f" (m < S = {self.S})")
        _check_int("L", self.L, 2, math.inf)
        if not isinstance(self.distinct_context, bool):
            raise ValueError(f"distinct_context={self.distinct_context!r}: need True or False")
        if self.distinct_context:
            _check_int("N", self.N, self.L * self.S, math.inf,
                       f" (N >= L*S = {self.L * self.S}: a context holds L*S distinct tokens)")
        else:
            _check_int("N", self.N, self.S, math.inf, f" (N >= S = {self.S}: a chunk holds S distinct tokens)")
        _check_float("kappa", self.kappa, 0.0, 1e6)
        _check_float("eps", self.eps, 0.0, EPS_MAX, open_high=True)
        _check_float("gamma", self.gamma, 0.0, 1e6, open_low=True)
        _check_float("beta", self.beta, 0.0, 1e6, open_low=True)

    @property
    def n_queries(self) -> int:
        """Queries per context: every chunk times every non-final position, ``L (S-1)``."""
        return self.L * (self.S - 1)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FlowConfig:
    """Initialization, integration and evaluation of the gradient flow ``dc/dt = -grad L(c)``.

    The objective ``L`` is the Monte Carlo cross-entropy over a fixed sample of ``n_contexts``
    contexts per run (common random numbers: the same sample at every step, so ``L`` is a
    deterministic function of ``c`` and the flow is an ODE), each with all ``L (S-1)`` queries.
    Diagnostics and accuracies are measured on a fresh held-out sample of ``n_eval_contexts``.

    Args:
        init_radius: every gate vector ``c^B_{h,r}`` starts uniform on the sphere of this radius, ``> 0``.
        n_contexts: contexts in the training sample (the objective), ``>= 1``.
        n_eval_contexts: contexts in the held-out evaluation sample, ``>= 1``.
        dt: Euler step (flow time per step), ``> 0``; small enough that the loss never increases
            (dt = 10 at the defaults; the count of increases is in `FlowResult.loss_increases`).
        n_steps: Euler steps; flow time ``T = dt * n_steps``, ``>= 1``.
        record_every: record gates every this many steps, ``>= 1`` (rk45 reports the loss and
            gates on the same grid of times ``k * dt * record_every``).
        method: ``"euler"`` (fixed small step, batched over runs) or ``"rk45"`` (adaptive, scipy).
        onehot_threshold: a gate is one-hot when its mean max-probability is at least this, in (0.5, 1).
    """

    init_radius: float = 0.05
    n_contexts: int = 8
    n_eval_contexts: int = 64
    dt: float = 10.0
    n_steps: int = 300
    record_every: int = 5
    method: str = "euler"
    onehot_threshold: float = 0.9

    def __post_init__(self) -> None:
        _check_float("init_radius", self.init_radius, 0.0, 1e6, open_low=True)
        _check_int("n_contexts", self.n_contexts, 1, math.inf)
        _check_int("n_eval_contexts", self.n_eval_contexts, 1, math.inf)
        _check_float("dt", self.dt, 0.0, 1e6, open_low=True)
        _check_int("n_steps", self.n_steps, 1, math.inf)
        _check_int("record_every", self.record_every, 1, math.inf)
        if self.method not in ("euler", "rk45"):
            raise ValueError(f"method={self.method!r}: need one of 'euler', 'rk45'")
        _check_float("onehot_threshold", self.onehot_threshold, 0.5, 1.0, open_low=True, open_high=True)

    @property
    def t_end(self) -> float:
        """Flow time at the end, ``dt * n_steps``."""
        return self.dt * self.n_steps

    def to_dict(self) -> dict:
        return asdict(self)
