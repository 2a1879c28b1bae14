"""Many training runs at once on one GPU: each run's whole optimizer step captured as one CUDA graph
and replayed on its own stream, batches made by worker processes.

A tiny model's step is a thousand small kernels; launched one by one from Python, a run spends its
time in dispatch, and separate processes on one GPU take turns rather than overlap. Captured, a step
is one launch, and the graphs of different runs, each on its own stream, partly overlap (measured on an
H200: assets/results/long_rows/probe.json). Batches are the trainer's (`make_batch`, a pure function of
mixture, seed and step), made ahead by CPU workers.

Each run is the run `train()` would make from the same configs: the same initialization, batches,
AdamW groups, schedule, clipping and loss (weighted cross-entropy over the positions with a target;
logits are computed at every position, which changes only float rounding). Its run folder gets
run.json, metrics.jsonl and a checkpoint `train(..., resume="latest")` continues from. On CPU (or with
`graphs=False`) the same steps run eagerly: that path is what the tests compare with `train()`; on
CUDA the graphs equal the eager steps bit for bit (checked by the long-row GPU script of the repository).

Example:
    >>> from phaseinterp import preset
    >>> from phaseinterp.train import Mixture, TrainConfig
    >>> cfg = preset("tiny-w4s4").replace(vocab_size=128)
    >>> mix = Mixture(vocab_size=128, seq_len=32, max_records=4, min_demos=0, max_demos=2)
    >>> tcfg = TrainConfig(steps=2, batch_size=2, warmup_steps=1, mixture=mix, device="cpu")
    >>> import tempfile
    >>> [r.step for r in train_fleet([FleetRun("a", cfg, tcfg, tempfile.mkdtemp())], workers=0, report=None)]
    [2]
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from phaseinterp.config import ModelConfig
from phaseinterp.families import family_of_config
from phaseinterp.measure.provenance import versions
from phaseinterp.model import HookedCompressedTransformer
from phaseinterp.model.static import static_graph
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.data import IGNORE, Mixture, TrainBatch, make_batch
from phaseinterp.checkpoint import read_metadata
from phaseinterp.train.loop import TrainResult, _param_groups, _prepare_log, _summary, resolve_device
from phaseinterp.train.state import latest_checkpoint, load_checkpoint_for_resume, save_checkpoint

#: Position codes of an encoded batch: no target, a demonstration's answer, the final query's answer,
#: a language token. Weights and masks are functions of the code (`decode_batch`).
NONE, DEMO, QUERY, LANGUAGE = 0, 1, 2, 3
#: Eager steps before a run's step is captured (AdamW's state and every lazy buffer then exist).
WARMUP_STEPS = 3
#: Steps handed to the workers per round (every active run's next ROUND steps).
ROUND = 25


@dataclass(frozen=True)
class FleetRun:
    """One run of a fleet: what `train(model_cfg, tcfg, run_dir)` would train, labeled `name`."""

    name: str
    model_cfg: ModelConfig
    tcfg: TrainConfig
    run_dir: str | os.PathLike

    def __post_init__(self) -> None:
        if not isinstance(self.model_cfg, ModelConfig):
            raise ValueError(f"run {self.name!r}: model_cfg of type {type(self.model_cfg).__name__} is invalid: the fleet "
                             "trains our model (allowed a ModelConfig); HF models train with `train()`")
        if self.tcfg.mitigation.active or self.tcfg.compile:
            raise ValueError(f"run {self.name!r}: mitigations and compile=True are invalid in a fleet: allowed neither "
                             "(train such a run with `train()`)")
        if self.tcfg.mixture.vocab_size > self.model_cfg.vocab_size or self.tcfg.mixture.vocab_size > 2 ** 15:
            raise ValueError(f"run {self.name!r}: mixture.vocab_size={self.tcfg.mixture.vocab_size} is invalid: allowed "
                             f"<= the model's vocab_size ({self.model_cfg.vocab_size}) and <= 32768")
        if self.tcfg.mixture.seq_len > self.model_cfg.n_ctx:
            raise ValueError(f"run {self.name!r}: mixture.seq_len={self.tcfg.mixture.seq_len} is invalid: allowed <= the "
                             f"model's n_ctx ({self.model_cfg.n_ctx})")


def encode_batch(batch: TrainBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens int16, targets int16, position codes uint8): a batch in a quarter of its bytes."""
    code = np.zeros(batch.tokens.shape, dtype=np.uint8)
    has = (batch.targets != IGNORE).numpy()
    lookup, query = batch.lookup.numpy(), batch.query.numpy()
    code[has & ~lookup] = LANGUAGE
    code[lookup] = DEMO
    code[query] = QUERY
    return batch.tokens.numpy().astype(np.int16), batch.targets.numpy().astype(np.int16), code


def decode_batch(tokens: Tensor, targets: Tensor, code: Tensor, lm_weight: float) -> TrainBatch:
    """The `TrainBatch` of `encode_batch`'s arrays (on their device, without a host read)."""
    query, lookup, language = code == QUERY, (code == DEMO) | (code == QUERY), code == LANGUAGE
    weights = lookup.float() + language.float() * float(np.float32(lm_weight))
    return TrainBatch(tokens.long(), targets.long(), weights, query, lookup)


def step_loss(model: HookedCompressedTransformer, batch: TrainBatch) -> tuple[Tensor, Tensor]:
    """(loss, metric sums in the trainer's order) of one batch, logits at every position."""
    has = batch.targets != IGNORE
    with static_graph():
        logits = model(batch.tokens)
    ce = F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.clamp(min=0).flatten(), reduction="none")
    ce = ce.view_as(batch.weights) * has
    loss = (ce * batch.weights).sum() / batch.weights.sum().clamp(min=1e-12)
    with torch.no_grad():
        correct = logits.argmax(-1) == batch.targets
        language = has & ~batch.lookup
        sums = torch.stack([
            loss.detach(), (ce * batch.lookup).sum(), batch.lookup.sum(), (ce * language).sum(), language.sum(),
            (correct & batch.query).sum(), batch.query.sum(), (correct & batch.lookup).sum()]).double()
    return loss, sums


# ---- batches from worker processes ------------------------------------------------------------------
_WORKER_RUNS: list[tuple[Mixture, int, int]] = []


def _worker_init(runs: list[tuple[Mixture, int, int]]) -> None:
    global _WORKER_RUNS
    _WORKER_RUNS = runs
    torch.set_num_threads(1)


def _make(task: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    run, step = task
    mixture, seed, batch_size = _WORKER_RUNS[run]
    return encode_batch(make_batch(mixture, seed, step, batch_size))


def _batches(runs: list[tuple[Mixture, int, int]], todo: list[range], workers: int) -> Iterator[tuple[int, int, tuple]]:
    """(run, step, encoded batch) for every step of every run, interleaved round by round."""
    rounds = max((len(r) for r in todo), default=0)
    tasks_of = lambda k: [(i, s) for j in range(k, min(k + ROUND, rounds)) for i, r in enumerate(todo)  # noqa: E731
                          if j < len(r) for s in (r[j],)]
    if workers == 0:
        _worker_init(runs)
        for k in range(0, rounds, ROUND):
            for task in tasks_of(k):
                yield (*task, _make(task))
        return
    with multiprocessing.get_context("fork").Pool(workers, initializer=_worker_init, initargs=(runs,)) as pool:
        for k in range(0, rounds, ROUND):
            tasks = tasks_of(k)
            for task, arrays in zip(tasks, pool.imap(_make, tasks, chunksize=8)):
                yield (*task, arrays)


# ---- one run's state ---------------------------------------------------------------------------------
@dataclass
class _Run:
    spec: FleetRun
    model: HookedCompressedTransformer
    opt: torch.optim.Optimizer
    params: list[Tensor]
    device: torch.device
    graphs: bool
    lr: Tensor | None = None
    stream: Any = None
    inputs: tuple[Tensor, ...] = ()
    staging: tuple[Tensor, ...] = ()
    copied: Any = None
    graph: Any = None
    eager: bool = False
    acc: Tensor | None = None
    norm: Tensor | None = None
    logged: list[tuple[int, float, Tensor, Tensor, float]] = field(default_factory=list)
    done: int = 0
    first: int = 0
    prior_s: float = 0.0
    t0: float = 0.0

    @property
    def tcfg(self) -> TrainConfig:
        return self.spec.tcfg

    def body(self, batch: TrainBatch) -> None:
        """The optimizer step (eager, or what the graph captures)."""
        loss, sums = step_loss(self.model, batch)
        loss.backward()
        if self.tcfg.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.tcfg.grad_clip, foreach=True)
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.params if p.grad is not None]))
        self.opt.step()
        self.acc.add_(sums)
        self.norm.copy_(norm)

    def set_lr(self, step: int) -> float:
        lr = self.tcfg.lr_at(step)
        if self.lr is not None:
            self.lr.fill_(lr)
        else:
            for group in self.opt.param_groups:
                group["lr"] = lr
        return lr

    def run_step(self, step: int, arrays: tuple[np.ndarray, ...]) -> float:
        if not self.graphs:
            lr = self.set_lr(step)
            self.body(decode_batch(*(torch.from_numpy(a).to(self.device) for a in arrays), self.tcfg.mixture.lm_weight))
            self.opt.zero_grad(set_to_none=True)
        else:
            with torch.cuda.stream(self.stream):
                self.stage(arrays)
                lr = self.set_lr(step)
                if self.graph is None and not self.eager and step >= self.first + WARMUP_STEPS and step + 1 < self.tcfg.steps:
                    self.capture()
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self.body(decode_batch(*self.inputs, self.tcfg.mixture.lm_weight))
                    self.opt.zero_grad(set_to_none=True)
        self.done = step + 1
        return lr

    def capture(self) -> None:
        """Capture the step; a run whose step cannot be captured goes on eagerly, saying why."""
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=self.stream):
                self.body(decode_batch(*self.inputs, self.tcfg.mixture.lm_weight))
        except RuntimeError as e:
            self.eager = True
            self.opt.zero_grad(set_to_none=True)
            print(f"{self.spec.name}: its step could not be captured as a CUDA graph ({e}); it trains eagerly", flush=True)
            return
        self.graph = graph

    def stage(self, arrays: tuple[np.ndarray, ...]) -> None:
        """Copy a batch into the static inputs through pinned buffers, on this run's stream."""
        if self.copied is not None:
            self.copied.synchronize()  # the previous copy has left the pinned buffers
        for buf, a in zip(self.staging, arrays):
            buf.numpy()[...] = a
        for dst, src in zip(self.inputs, self.staging):
            dst.copy_(src, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record(self.stream)

    def log(self, done: int, lr: float) -> None:
        """Keep this window's sums (read back when the run ends: no host sync while it trains)."""
        ctx = torch.cuda.stream(self.stream) if self.graphs else _nothing()
        with ctx:
            self.logged.append((done, lr, self.acc.clone(), self.norm.clone(), time.perf_counter()))
            self.acc.zero_()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def resume_step(run_dir: str | os.PathLike) -> int:
    """The step a run folder's newest checkpoint reached (0: none)."""
    from phaseinterp.checkpoint import read_metadata

    ckpt = latest_checkpoint(Path(run_dir))
    return 0 if ckpt is None else int(read_metadata(ckpt)["extra"]["step"])


def _optimizer(model, tcfg: TrainConfig, lr: Tensor | None, graphs: bool) -> torch.optim.Optimizer:
    kw = dict(lr=lr if graphs else tcfg.lr, betas=tcfg.betas, weight_decay=tcfg.weight_decay)
    try:
        return torch.optim.AdamW(_param_groups(model, tcfg.weight_decay), fused=True, capturable=graphs, **kw)
    except (RuntimeError, ValueError):  # a torch without fused capturable AdamW
        return torch.optim.AdamW(_param_groups(model, tcfg.weight_decay), foreach=True, capturable=graphs, **kw)


def start_run(spec: FleetRun, device: torch.device, graphs: bool, resume: bool = False) -> _Run:
    """One run of a fleet built on `device`, resumed from its folder's newest checkpoint with `resume`; its
    `run_step(step, arrays)` trains one step (captured as a CUDA graph with `graphs`). For probes and tests:
    `train_fleet` starts its runs with it."""
    tcfg, run_dir = spec.tcfg, Path(spec.run_dir)
    family, cfg = family_of_config(spec.model_cfg)
    torch.manual_seed(tcfg.seed)
    model = family.build(cfg, tcfg.seed).to(device).train()
    lr = torch.tensor(tcfg.lr_at(0), device=device) if graphs else None
    opt = _optimizer(model, tcfg, lr, graphs)
    run = _Run(spec, model, opt, list(model.parameters()), device, graphs, lr=lr)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is not None and not resume:
        raise ValueError(f"run_dir={str(run_dir)!r} already holds checkpoints: resume it (resume=True) or use a new folder")
    if ckpt is not None:
        run.done = run.first = load_checkpoint_for_resume(ckpt, model, opt, tcfg)
        for group in opt.param_groups:  # the saved groups replaced the run's: the run's device and graphs decide
            group.update(lr=lr if graphs else group["lr"], capturable=graphs)
        run.prior_s = float(read_metadata(ckpt)["extra"].get("metrics", {}).get("elapsed_s", 0.0))
        _prepare_log(run_dir / "metrics.jsonl", run.done)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        info = {"model_config": cfg.to_dict(), "train_config": tcfg.to_dict(), "world_size": 1, "device": str(device),
                "trainer": "fleet" + (" (CUDA graphs)" if graphs else ""), "versions": versions()}
        (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
        _prepare_log(run_dir / "metrics.jsonl", None)
    run.acc = torch.zeros(8, dtype=torch.float64, device=device)
    run.norm = torch.zeros((), device=device)
    if graphs:
        run.stream = torch.cuda.Stream(device)
        shape = (tcfg.batch_size, tcfg.mixture.seq_len)
        dtypes = (torch.int16, torch.int16, torch.uint8)
        run.inputs = tuple(torch.zeros(shape, dtype=d, device=device) for d in dtypes)
        run.staging = tuple(torch.zeros(shape, dtype=d).pin_memory() for d in dtypes)
    run.t0 = time.perf_counter()
    return run


def _finish(run: _Run, stop: int) -> TrainResult:
    """Append the run's metrics, write its checkpoint at `stop` (resumable by `train()` or a fleet)."""
    if run.graphs:
        run.stream.synchronize()
    run.graph = None
    lines, t_prev, prev_step = [], run.t0, run.first
    for done, lr, sums, norm, t in run.logged:
        steps = done - prev_step
        lines.append({"step": done, **_summary(sums.cpu(), steps), "lr": lr, "grad_norm": float(norm),
                      "tokens_per_s": steps * run.tcfg.batch_size * run.tcfg.mixture.seq_len / max(t - t_prev, 1e-9),
                      "elapsed_s": run.prior_s + t - run.t0})
        t_prev, prev_step = t, done
    run_dir = Path(run.spec.run_dir)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))
    for group in run.opt.param_groups:  # plain settings, so that `train()` on any device can resume the state
        group.update(lr=run.tcfg.lr_at(max(stop - 1, 0)), capturable=False)
    ckpt = save_checkpoint(run.model, run.opt, stop, run.tcfg, run_dir, 1, lines[-1] if lines else {})
    return TrainResult(model=run.model.eval(), run_dir=run_dir, step=stop, checkpoint=ckpt, metrics=lines,
                       wall_time_s=lines[-1]["elapsed_s"] if lines else run.prior_s)


def train_fleet(runs: list[FleetRun], *, device: str = "auto", workers: int | None = None, graphs: bool | None = None,
                resume: bool = False, until: int | None = None, deadline_s: float | None = None,
                report: Callable[[str], None] | None = print) -> list[TrainResult | None]:
    """Train every run of `runs` at once (see the module docstring); returns their results in order.

    Args:
        runs: the runs (one folder each).
        device: "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
        workers: batch-making processes (default: CPU cores - 1; 0 makes batches in this process).
        graphs: capture each step as a CUDA graph (default: on CUDA).
        resume: continue each run from its newest checkpoint (a run without one starts fresh); without
            it, a folder holding checkpoints raises.
        until: stop every run after this step (and checkpoint it), as if interrupted; None = its steps.
        deadline_s: stop starting steps after this many seconds; every run is checkpointed at the step
            it reached (None in the results for a run that made no step).
        report: where progress lines go (None: nowhere).

    Raises:
        ValueError: a run the fleet cannot train, repeated run folders, or bad arguments.
    """
    if not runs:
        raise ValueError("runs=[] is invalid: allowed one or more FleetRun")
    folders = [Path(r.run_dir).resolve() for r in runs]
    if len(set(folders)) != len(folders):
        raise ValueError("runs share a run folder: allowed one folder per run")
    if until is not None and (isinstance(until, bool) or not isinstance(until, int) or until < 1):
        raise ValueError(f"until={until!r} is invalid: allowed an integer >= 1 or None")
    dev = resolve_device(device)
    graphs = dev.type == "cuda" if graphs is None else graphs
    if graphs and dev.type != "cuda":
        raise ValueError(f"graphs=True is invalid on device {str(dev)!r}: CUDA graphs need a CUDA device")
    workers = max(1, (os.cpu_count() or 2) - 1) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers={workers!r} is invalid: allowed an integer >= 0")
    say = report or (lambda _line: None)
    stops = [r.tcfg.steps if until is None else min(until, r.tcfg.steps) for r in runs]
    todo = [range(resume_step(r.run_dir) if resume else 0, stop) for r, stop in zip(runs, stops)]
    batches = _batches([(r.tcfg.mixture, r.tcfg.seed, r.tcfg.batch_size) for r in runs], todo, workers)
    first = next(batches, None)  # the worker pool forks here, before CUDA starts in `start_run`
    state: list[_Run | None] = [start_run(r, dev, graphs, resume) for r in runs]
    t0, results = time.perf_counter(), [None] * len(runs)
    for i, step, arrays in itertools.chain([first] if first else [], batches):
        if deadline_s is not None and time.perf_counter() - t0 > deadline_s:
            batches.close()
            break
        run = state[i]
        lr = run.run_step(step, arrays)
        if run.done % run.tcfg.log_every == 0 or run.done == stops[i]:
            run.log(run.done, lr)
        if run.done == stops[i]:
            results[i] = _finish(run, run.done)
            say(f"{run.spec.name}: step {run.done} of {run.tcfg.steps}, {time.perf_counter() - run.t0:.0f} s, loss "
                f"{results[i].metrics[-1]['loss']:.3f}, query acc {results[i].metrics[-1]['acc']:.2f}")
            state[i] = None  # its graph and buffers go
    for i, run in enumerate(state):
        if run is not None and run.done > run.first:
            say(f"{run.spec.name}: stopped by the deadline at step {run.done} of {run.tcfg.steps}")
            if not run.logged or run.logged[-1][0] != run.done:
                run.log(run.done, run.tcfg.lr_at(run.done - 1))
            results[i] = _finish(run, run.done)
    return results


__all__ = ["FleetRun", "decode_batch", "encode_batch", "start_run", "step_loss", "train_fleet"]
