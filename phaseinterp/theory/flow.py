"""Gradient flow on the log-linear gates, batched over independent runs (seeds).

The flow is the ODE ``dc/dt = -grad_c L(c)`` on all gate vectors ``c = (c^K_{h,r}, c^V_{h,r})``,
where ``L`` is the Monte Carlo loss `model.gated_loss` on a fixed training sample (common random
numbers, so ``L`` is deterministic). Since the loss depends on ``c`` only through the gate table
``theta = c X^T``, the same flow written on ``theta`` is

    d theta / dt = -(dL/d theta) G,        G = X X^T = I + kappa 11^T + E,

which is what is integrated (identical trajectories; with eps = 0, ``A G = A + kappa (A 1) 1^T``
costs O(N)). The ``kappa 11^T`` part moves every token's gate logit together: it is the static,
content-independent component of the gates, and it grows with kappa and with the sample size.

Each run (seed) has its own embeddings, sample and start; runs do not interact (the gradient of
the summed loss is each run's own gradient).

Integrators:
    * ``"euler"``: ``theta_{k+1} = theta_k - dt (dL/d theta)(theta_k) G`` (fixed small step; the
      loss is recorded at every step).
    * ``"rk45"``: scipy's adaptive Dormand-Prince solver on the same vector field.

Start: each ``c^B_{h,r}`` uniform on the sphere of radius ``init_radius`` in R^d (stream "init").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from phaseinterp.theory.config import FlowConfig, TheoryConfig
from phaseinterp.theory.model import gate_probs, gate_table, gated_loss
from phaseinterp.theory.task import DTYPE, RunData, build_runs, generator


def init_table(cfg: TheoryConfig, flow: FlowConfig, data: RunData) -> Float[Tensor, "run 2 m S N"]:
    """Initial gate table ``theta = c X^T`` with every ``c^B_{h,r}`` uniform on the sphere of
    radius ``init_radius`` (one generator per seed, stream "init").

    Example:
        >>> cfg = TheoryConfig(N=32)
        >>> theta = init_table(cfg, FlowConfig(init_radius=0.3), build_runs(cfg, [0], 1))
        >>> tuple(theta.shape)
        (1, 2, 3, 8, 32)
    """
    d = data.X.shape[-1]
    draws = [torch.randn(2, cfg.m, cfg.S, d, generator=generator(s, "init"), dtype=DTYPE) for s in data.seeds]
    c = torch.stack(draws)
    return gate_table(flow.init_radius * c / c.norm(dim=-1, keepdim=True), data.X)


def flow_field(theta: Float[Tensor, "run 2 m S N"], data: RunData, cfg: TheoryConfig
               ) -> tuple[Float[Tensor, " run"], Float[Tensor, "run 2 m S N"]]:
    """The loss per run and the vector field ``-(dL/d theta) G`` of the flow at ``theta``."""
    theta = theta.detach().requires_grad_(True)
    loss = gated_loss(theta, data, cfg)
    (grad,) = torch.autograd.grad(loss.sum(), theta)
    if data.structured:
        field = grad + cfg.kappa * grad.sum(dim=-1, keepdim=True)
    else:
        field = torch.einsum("rbhsv,rvw->rbhsw", grad, data.G)
    return loss.detach(), -field


def mean_gates(theta: Float[Tensor, "run 2 m S N"], data: RunData) -> Float[Tensor, "run 2 m S"]:
    """Gates averaged over the contexts and chunks of ``data`` (the static profile)."""
    return gate_probs(theta, data.tokens).mean(dim=(3, 4))


@dataclass
class FlowResult:
    """A gradient-flow run for R seeds.

    Attributes:
        cfg, flow: the configurations; seeds: one per run.
        theta: end point, gate table ``[run, 2, m, S, N]``.
        times: flow times of the loss record ``[T]``; loss: training loss ``[T, run]``.
        record_times: flow times of the gate record ``[K]``.
        gates: mean gates over the training sample ``[K, run, 2, m, S]`` (branch 0 = key, 1 = value).
        speed: norm of the vector field per run at the record times ``[K, run]`` (-> 0 at rest).

    The training sample is ``build_runs(cfg, seeds, flow.n_contexts, "train")`` (deterministic).
    """

    cfg: TheoryConfig
    flow: FlowConfig
    seeds: list[int]
    theta: Tensor
    times: np.ndarray
    loss: np.ndarray
    record_times: np.ndarray
    gates: np.ndarray
    speed: np.ndarray

    @property
    def loss_increases(self) -> np.ndarray:
        """Per run, the number of recorded steps where the loss went up (0 for a good small step)."""
        return (np.diff(self.loss, axis=0) > 1e-12 * np.abs(self.loss[:-1]).clip(1.0)).sum(axis=0)


def _run_chunk(cfg: TheoryConfig, n_contexts: int) -> int:
    """Runs integrated together: all of them on the exact shortcut, else ~2e7 logits per chunk."""
    if cfg.eps == 0 and cfg.distinct_context:
        return 128
    return max(1, int(2e7 // (n_contexts * cfg.n_queries * cfg.N)))


def integrate(cfg: TheoryConfig, flow: FlowConfig, seeds: list[int], progress: bool = False) -> FlowResult:
    """Run the gradient flow from the seeded start for every seed, until ``t = flow.t_end``.

    Runs are integrated in batches (all together on the exact eps = 0 shortcut) and are
    independent: a seed's trajectory does not depend on which other seeds are run with it.

    Args:
        cfg: task and model.
        flow: start, integrator, step, horizon and record interval.
        seeds: one independent run per seed.
        progress: show a tqdm bar.

    Example:
        >>> res = integrate(TheoryConfig(N=32, S=4, m=1), FlowConfig(n_contexts=4, n_steps=5), seeds=[0])
        >>> res.loss.shape, res.gates.shape
        ((6, 1), (2, 1, 2, 1, 4))
    """
    seeds = list(seeds)
    if len(seeds) == 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={seeds!r}: need at least one seed, no repeats")
    size = _run_chunk(cfg, flow.n_contexts)
    parts = [_integrate(cfg, flow, seeds[i:i + size], progress) for i in range(0, len(seeds), size)]
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    return FlowResult(cfg, flow, seeds, torch.cat([p.theta for p in parts]), first.times,
                      np.concatenate([p.loss for p in parts], axis=1), first.record_times,
                      np.concatenate([p.gates for p in parts], axis=1),
                      np.concatenate([p.speed for p in parts], axis=1))


def _integrate(cfg: TheoryConfig, flow: FlowConfig, seeds: list[int], progress: bool) -> FlowResult:
    data = build_runs(cfg, seeds, flow.n_contexts, "train")
    theta = init_table(cfg, flow, data)
    if flow.method == "rk45":
        return _integrate_rk45(cfg, flow, data, theta)
    losses, rec_t, gates, speed = [], [], [], []
    steps = range(flow.n_steps + 1)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc=f"gradient flow ({len(seeds)} runs)", leave=False)
    for k in steps:
        loss, field = flow_field(theta, data, cfg)
        losses.append(loss.numpy())
        if k % flow.record_every == 0 or k == flow.n_steps:
            with torch.no_grad():
                gates.append(mean_gates(theta, data).numpy())
            rec_t.append(k * flow.dt)
            speed.append(field.flatten(1).norm(dim=1).numpy())
        if k < flow.n_steps:
            theta = theta + flow.dt * field
    return FlowResult(cfg, flow, list(seeds), theta.detach(), flow.dt * np.arange(flow.n_steps + 1),
                      np.stack(losses), np.array(rec_t), np.stack(gates), np.stack(speed))


def _integrate_rk45(cfg: TheoryConfig, flow: FlowConfig, data: RunData, theta0: Tensor) -> FlowResult:
    from scipy.integrate import solve_ivp

    shape = theta0.shape

    def field(_t: float, y: np.ndarray) -> np.ndarray:
        return flow_field(torch.from_numpy(y).reshape(shape), data, cfg)[1].flatten().numpy()

    t_rec = np.arange(0, flow.n_steps + 1, flow.record_every) * flow.dt
    if t_rec[-1] < flow.t_end:
        t_rec = np.append(t_rec, flow.t_end)
    sol = solve_ivp(field, (0.0, flow.t_end), theta0.flatten().numpy(), method="RK45", t_eval=t_rec,
                    rtol=1e-6, atol=1e-9)
    if not sol.success:
        raise RuntimeError(f"rk45 integration failed: {sol.message}")
    losses, gates, speed = [], [], []
    for y in sol.y.T:
        theta = torch.from_numpy(np.ascontiguousarray(y)).reshape(shape)
        loss, f = flow_field(theta, data, cfg)
        losses.append(loss.numpy())
        speed.append(f.flatten(1).norm(dim=1).numpy())
        with torch.no_grad():
            gates.append(mean_gates(theta, data).numpy())
    return FlowResult(cfg, flow, list(data.seeds), theta, sol.t, np.stack(losses), sol.t, np.stack(gates),
                      np.stack(speed))
