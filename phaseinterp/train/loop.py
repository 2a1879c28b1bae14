"""The training loop: AdamW, warm-up + cosine schedule, gradient clipping, scheduled checkpoints,
exact resume, a JSONL metrics log, a progress bar, and data parallelism through `torchrun`.

Data parallel: every process builds the same global batch (`make_batch` is a pure function of
seed and step) and trains on its contiguous share of rows; each process's loss is its share of the
*global* weighted sum divided by the global weight, times the world size, so DDP's gradient
average equals the single-process gradient of the same global batch. Rank 0 writes checkpoints,
logs and the progress bar.

Run folder (`run_dir`):

    run.json          model config, train config, versions (written at a fresh start)
    metrics.jsonl     one line per `log_every` steps (window means; elapsed_s is wall time, cpu_s the
                      process's CPU time, both cumulative over resumes); truncated to the resumed step
    checkpoints/      step_N.safetensors (+ step_N.state.pt), see `phaseinterp.train.state`
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from phaseinterp.config import ModelConfig
from phaseinterp.families import FAMILIES, family_of_config, family_of_model
from phaseinterp.progress import tqdm  # tqdm.auto only with ipywidgets (no TqdmWarning)
from phaseinterp.families.hf_causal_lm import HFCausalLM, HFModelSpec
from phaseinterp.measure.provenance import versions
from phaseinterp.model import HookedCompressedTransformer
from phaseinterp.train.config import TrainConfig
from phaseinterp.train.data import IGNORE, TrainBatch, make_batch
from phaseinterp.train.mitigation import check_mitigation, draw_offsets, mitigated_forward
from phaseinterp.train.state import latest_checkpoint, list_checkpoints, load_checkpoint_for_resume, save_checkpoint

# window sums kept per step: weighted loss numerator, lookup CE, lookup count, language CE,
# language count, query correct, query count, lookup correct
_SUMS = ("wloss", "lookup_ce", "lookup_n", "lm_ce", "lm_n", "query_correct", "query_n", "lookup_correct")


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = f"cuda:{local_rank}"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} is invalid: CUDA is not available here (allowed 'cpu' or 'auto')")
    return torch.device(name)


@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owns_group: bool = False

    @classmethod
    def setup(cls, device_name: str) -> "_Dist":
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = resolve_device(device_name, local_rank).type == "cuda"
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if use_cuda else "gloo")
        return cls(dist.get_rank(), dist.get_world_size(), local_rank, owns_group=True)

    def all_sum(self, x: Tensor) -> Tensor:
        if self.world > 1:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def teardown(self) -> None:
        if self.owns_group:
            dist.destroy_process_group()


@dataclass
class TrainResult:
    """What `train` returns (on every rank; `metrics` holds the lines logged by this call)."""

    model: HookedCompressedTransformer | HFCausalLM  # an HFCausalLM when trained from an HF config (HF model: .hf)
    run_dir: Path
    step: int
    checkpoint: Path | None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0
    rank: int = 0
    world_size: int = 1


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def batch_sums(logits: Tensor, batch: TrainBatch) -> tuple[Tensor, Tensor]:
    """(weighted CE sum, metric sums in `_SUMS` order) for one (shard of a) batch.

    `logits` are [batch, pos, vocab], or [n, vocab] at the positions that have a target
    (`batch.targets != IGNORE`, row-major), which is what the trainer computes.
    """
    has_target = batch.targets != IGNORE
    if logits.ndim == 3:
        logits = logits[has_target]
    targets, weights = batch.targets[has_target], batch.weights[has_target]
    lookup, query = batch.lookup[has_target], batch.query[has_target]
    ce = F.cross_entropy(logits.float(), targets, reduction="none")
    wloss = (ce * weights).sum()
    with torch.no_grad():
        correct = logits.argmax(-1) == targets
        sums = torch.stack([
            wloss.detach(), ce[lookup].sum(), lookup.sum(), ce[~lookup].sum(), (~lookup).sum(),
            correct[query].sum(), query.sum(), correct[lookup].sum(),
        ]).double()
    return wloss, sums


def step_logits(forward, model, batch: TrainBatch, mitigation, offsets, *, unembeds_at: bool | None = None
                ) -> tuple[Tensor, Tensor | float]:
    """(logits [n, vocab] at the positions with a target, mitigation penalty) of one training
    batch. A model whose Backend says it `unembeds_at` (ours) unembeds only those positions (`at=`);
    other models and shifted grids compute every position's logits and drop the rest.
    `unembeds_at`: that answer when the caller has it (None: asked of the model's family now)."""
    has_target = batch.targets != IGNORE
    if unembeds_at is None:
        unembeds_at = family_of_model(model).backend_class().unembeds_at()
    if offsets is None and unembeds_at:
        return mitigated_forward(lambda tokens: forward(tokens, at=has_target), model, batch.tokens, mitigation, None)
    logits, reg = mitigated_forward(forward, model, batch.tokens, mitigation, offsets)
    return logits[has_target], reg


def _summary(sums: Tensor, steps: int) -> dict[str, float]:
    s = dict(zip(_SUMS, sums.tolist()))
    div = lambda a, b: a / b if b else float("nan")  # noqa: E731
    return {
        "loss": s["wloss"] / steps,  # mean over steps of the weighted per-step loss
        "lookup_loss": div(s["lookup_ce"], s["lookup_n"]), "lm_loss": div(s["lm_ce"], s["lm_n"]),
        "acc": div(s["query_correct"], s["query_n"]), "lookup_acc": div(s["lookup_correct"], s["lookup_n"]),
    }


def _prepare_log(path: Path, resumed_step: int | None) -> None:
    """Keep only lines up to the resumed step (a fresh run starts an empty log). A torn last line
    (a crash while it was written) is dropped with a warning; a damaged line before it raises."""
    keep = []
    if resumed_step is not None and path.is_file():
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        for i, line in enumerate(lines):
            try:
                step = json.loads(line)["step"]
            except (json.JSONDecodeError, KeyError, TypeError):
                if i == len(lines) - 1:
                    warnings.warn(f"{path}: dropped a torn last line (a crash while it was written): {line[:60]!r}",
                                  stacklevel=3)
                    break
                raise ValueError(f"{str(path)!r} line {i + 1} is not a metrics record: {line[:60]!r}; fix or remove "
                                 "that line to resume") from None
            if step <= resumed_step:
                keep.append(line)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(k + "\n" for k in keep))
    os.replace(tmp, path)


def train(model_cfg: ModelConfig | HFModelSpec, tcfg: TrainConfig, run_dir: str | os.PathLike, *,
          resume: str | os.PathLike | None = None, until: int | None = None, progress: bool = True,
          name: str | None = None) -> TrainResult:
    """Train a `HookedCompressedTransformer` (or a HuggingFace causal LM) from scratch or resume a run.

    Args:
        model_cfg: the model; its `vocab_size` must cover the mixture's vocabulary. A `ModelConfig`
            trains our model; an `HFModelSpec` or a transformers `PretrainedConfig` (e.g. a
            `DeepseekV4Config`) trains that HF causal LM, randomly initialized by its own code
            (`phaseinterp.families.hf_causal_lm`); `result.model` is then an `HFCausalLM`, the HF
            model its `.hf`. Training-time mitigations and data parallelism need our model.
        tcfg: optimizer, schedule, data mixture, seed, checkpoint cadence.
        run_dir: run folder (created); holds run.json, metrics.jsonl and checkpoints/.
        resume: None (fresh run; `run_dir` must not hold checkpoints), "latest" (the newest
            checkpoint in `run_dir`, or a fresh start when there is none) or a checkpoint path.
        until: stop after this step (and checkpoint it), as if interrupted; None = `tcfg.steps`.
        progress: show a progress bar with loss and accuracy (rank 0).
        name: label for the progress bar.

    Returns:
        TrainResult with the trained model (on its device), final step and checkpoint.

    Raises:
        ValueError: bad configs, a batch not divisible by the number of processes, or a
            checkpoint that does not fit (see `load_checkpoint_for_resume`).

    Example:
        >>> from phaseinterp import preset
        >>> from phaseinterp.train import Mixture, TrainConfig, train
        >>> cfg = preset("tiny-w4s4").replace(vocab_size=128)
        >>> mix = Mixture(vocab_size=128, seq_len=32, max_records=4, min_demos=0, max_demos=2)
        >>> tcfg = TrainConfig(steps=2, batch_size=2, warmup_steps=1, mixture=mix, device="cpu")
        >>> train(cfg, tcfg, "runs/doctest", progress=False).step
        2
    """
    family, model_cfg = trainable_config(model_cfg)
    mix = tcfg.mixture
    if mix.vocab_size > model_cfg.vocab_size:
        raise ValueError(f"mixture.vocab_size={mix.vocab_size} is invalid: allowed <= the model's vocab_size ({model_cfg.vocab_size})")
    if mix.seq_len > model_cfg.n_ctx:
        raise ValueError(f"mixture.seq_len={mix.seq_len} is invalid: allowed <= the model's n_ctx ({model_cfg.n_ctx})")
    stop = tcfg.steps if until is None else until
    if isinstance(stop, bool) or not isinstance(stop, int) or not 1 <= stop <= tcfg.steps:
        raise ValueError(f"until={until!r} is invalid: allowed an integer in [1, steps={tcfg.steps}]")
    run_dir = Path(run_dir)
    ctx = _Dist.setup(tcfg.device)
    try:
        return _train(family, model_cfg, tcfg, run_dir, resume, stop, progress and ctx.rank == 0, name, ctx)
    finally:
        ctx.teardown()


def trainable_config(cfg: Any) -> tuple[Any, Any]:
    """(family, config) of a model config the trainer can train (a transformers `PretrainedConfig`
    becomes its `HFModelSpec`); ValueError naming the trainable families otherwise."""
    trainable = [f.name for f in FAMILIES if f.trainable]
    try:
        family, config = family_of_config(cfg)
    except ValueError:
        raise ValueError(f"model_cfg={type(cfg).__name__} is invalid: allowed the config of a trainable family {trainable} "
                         "(a ModelConfig, an HFModelSpec or transformers PretrainedConfig, an NSAConfig)") from None
    if not family.trainable:
        raise ValueError(f"model_cfg={type(cfg).__name__} is invalid: family {family.name!r} is not trainable; allowed "
                         f"the config of {trainable}")
    return family, config


def _train(family, model_cfg, tcfg, run_dir, resume, stop, progress, name, ctx: _Dist) -> TrainResult:
    if tcfg.batch_size % ctx.world:
        raise ValueError(f"batch_size={tcfg.batch_size} is invalid: allowed a multiple of the number of processes ({ctx.world})")
    device = resolve_device(tcfg.device, ctx.local_rank)
    torch.manual_seed(tcfg.seed)
    model = family.build(model_cfg, tcfg.seed).to(device)  # tokens -> logits (HF models: an HFCausalLM)
    model.train()
    _check_setup(model, tcfg, ctx)
    unembeds_at = family.backend_class().unembeds_at()
    opt = torch.optim.AdamW(_param_groups(model, tcfg.weight_decay), lr=tcfg.lr, betas=tcfg.betas,
                            weight_decay=tcfg.weight_decay, **adamw_kernel(device))
    start, prior_elapsed, prior_cpu = _begin(model, opt, model_cfg, tcfg, run_dir, resume, ctx, device)
    wrapped = _wrap(model, tcfg, ctx, device)
    params = list(model.parameters())
    log = _Log(run_dir / "metrics.jsonl", ctx, prior_elapsed, prior_cpu)
    last_ckpt = None
    bar = tqdm(total=tcfg.steps, initial=start, disable=not progress, desc=name, dynamic_ncols=True)
    for step in range(start, stop):
        lr, grad_norm, sums = _step(wrapped, model, params, opt, model_cfg, tcfg, step, ctx, device, unembeds_at)
        log.add(sums, tcfg.batch_size * tcfg.mixture.seq_len)
        done = step + 1
        bar.update(1)
        if done % tcfg.log_every == 0 or done in (tcfg.steps, stop):
            line = log.write(done, lr, grad_norm)
            bar.set_postfix(loss=f"{line['loss']:.3f}", acc=f"{line['acc']:.2f}")
        if done % tcfg.checkpoint_every == 0 or done in (tcfg.steps, stop):
            if ctx.rank == 0:
                last_ckpt = save_checkpoint(model, opt, done, tcfg, run_dir, ctx.world, log.checkpoint_metrics(done))
            ctx.barrier()
    bar.close()
    ctx.barrier()
    final = latest_checkpoint(run_dir) if last_ckpt is None else last_ckpt
    return TrainResult(model=model.eval(), run_dir=run_dir, step=max(start, stop), checkpoint=final, metrics=log.lines,
                       wall_time_s=log.elapsed(), rank=ctx.rank, world_size=ctx.world)


def _check_setup(model, tcfg: TrainConfig, ctx: _Dist) -> None:
    """Refuse mitigations, compilation and data parallelism where the model's Backend does not allow them."""
    family, mitigation = family_of_model(model), tcfg.mitigation
    can = family.backend_class()
    what = f"a model of family {family.name!r} ({type(model).__name__})"
    if mitigation.active and not can.trains_with_mitigations():
        able = [f.name for f in FAMILIES if f.backend is not None and f.recognizes is not None
                and f.backend_class().trains_with_mitigations()]
        raise ValueError(f"mitigation={mitigation} is invalid for {what}: mitigations act on the compressors of "
                         f"{able}; allowed Mitigation()")
    if can.trains_with_mitigations():
        check_mitigation(model, mitigation)
    if ctx.world > 1 and not can.trains_data_parallel():
        raise ValueError(f"data parallel training of {what} is not supported (world size {ctx.world}): allowed with "
                         "one process")
    if mitigation.random_offsets and ctx.world > 1:
        raise ValueError("mitigation.random_offsets=True is not supported with data parallel training "
                         f"(world size {ctx.world}): allowed with one process")
    if tcfg.compile and (mitigation.active or not can.trains_compiled()):
        raise ValueError(f"compile=True is invalid with training-time mitigations or for {what} (their hooks and "
                         "wrappers are not compiled): allowed compile=False")


def _begin(model, opt, model_cfg, tcfg: TrainConfig, run_dir: Path, resume, ctx: _Dist, device) -> tuple[int, float, float]:
    """(first step, wall and CPU seconds already spent): restore a resumed run, or start a fresh
    one (run.json, an empty metrics log); a torn log is trimmed back to the resumed step."""
    start, prior_elapsed, prior_cpu = 0, 0.0, 0.0
    if resume == "latest":
        resume = latest_checkpoint(run_dir)
    elif resume is None and list_checkpoints(run_dir):
        raise ValueError(f"run_dir={str(run_dir)!r} already holds checkpoints: resume it (resume='latest') or use a new folder")
    if resume is not None:
        start = load_checkpoint_for_resume(resume, model, opt, tcfg)
        from phaseinterp.checkpoint import read_metadata

        saved = read_metadata(resume)["extra"].get("metrics", {})
        prior_elapsed, prior_cpu = float(saved.get("elapsed_s", 0.0)), float(saved.get("cpu_s", 0.0))
    if ctx.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume is None:
            info = {"model_config": model_cfg.to_dict(), "train_config": tcfg.to_dict(), "world_size": ctx.world,
                    "device": str(device), "versions": versions()}
            (run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")
        _prepare_log(run_dir / "metrics.jsonl", start if resume is not None else None)
    ctx.barrier()
    return start, prior_elapsed, prior_cpu


def _wrap(model, tcfg: TrainConfig, ctx: _Dist, device):
    """The module the steps call: DDP across processes, compiled when asked."""
    wrapped = model
    if ctx.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if tcfg.compile:
        wrapped = compile_forward(wrapped)
    return wrapped


def adamw_kernel(device: torch.device) -> dict[str, bool]:
    """AdamW's implementation: one fused kernel for every parameter where torch has one (CPU and
    CUDA; 1.8 ms per step against 4.8 ms for foreach in one profile of the w4s4 recipe), else
    foreach."""
    return {"fused": True} if device.type in ("cpu", "cuda") else {"foreach": True}


#: Inductor inlines a pointwise value into every kernel that reads it unless it costs more than
#: this many ops (default 50 on CPU). The rotary tables (pow, cos, sin of the positions) stayed
#: inlined, so the backward recomputed them for every batch row and head; at 16 they are computed
#: once. Compiled step on CPU, both settings side by side in one process: 1.16x (W4/S4) and 1.24x (full)
#: faster than the default (docs/training.md, "Benchmark").
REALIZE_CPU_OPCOUNT = 16


def compile_forward(module):
    """`torch.compile(module)` as one graph: the last block's `resid[at]` (a data-dependent shape)
    is traced instead of breaking the graph (and recompiling per target count), and pointwise
    values costing more than `REALIZE_CPU_OPCOUNT` ops are computed once instead of inlined into
    each reader (benchmarks/train.py measures the result against the previous trainer)."""
    compiled = torch.compile(module, options={"realize_cpu_opcount_threshold": REALIZE_CPU_OPCOUNT})

    def forward(*args, **kwargs):
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            return compiled(*args, **kwargs)

    return forward


def _step(wrapped, model, params: list, opt, model_cfg, tcfg: TrainConfig, step: int, ctx: _Dist, device,
          unembeds_at: bool) -> tuple[float, Tensor, Tensor]:
    """One optimizer step on this process's share of the global batch: (lr, grad norm, sums)."""
    shard = tcfg.batch_size // ctx.world
    full = make_batch(tcfg.mixture, tcfg.seed, step, tcfg.batch_size)
    total_weight = float(full.weights.sum())
    batch = full.rows(ctx.rank * shard, (ctx.rank + 1) * shard).to(device)
    lr = tcfg.lr_at(step)
    for group in opt.param_groups:
        group["lr"] = lr
    offsets = None
    if tcfg.mitigation.random_offsets:
        offsets = draw_offsets(model_cfg.residue_modulus, tcfg.seed, step, tcfg.batch_size)
    logits, reg = step_logits(wrapped, model, batch, tcfg.mitigation, offsets, unembeds_at=unembeds_at)
    wloss, sums = batch_sums(logits, batch)
    # each process adds 1/world of its penalty: DDP's gradient average then equals the mean penalty's
    loss = wloss / max(total_weight, 1e-12) + reg / ctx.world
    (loss * ctx.world).backward()
    if tcfg.grad_clip > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip, foreach=True)
    else:
        grad_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
    opt.step()
    opt.zero_grad(set_to_none=True)
    sums[0] = sums[0] / max(total_weight, 1e-12)
    return lr, grad_norm, sums


class _Log:
    """Sums since the last metrics line, the lines written (rank 0 appends them to the log), and
    the run's clocks (continued across resumes)."""

    def __init__(self, path: Path, ctx: _Dist, prior_elapsed: float, prior_cpu: float):
        self.path, self.ctx = path, ctx
        self.prior_elapsed, self.prior_cpu = prior_elapsed, prior_cpu
        self.window = torch.zeros(len(_SUMS), dtype=torch.float64)
        self.steps, self.tokens, self.lines = 0, 0, []
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.t_window = self.t0

    def add(self, sums: Tensor, tokens: int) -> None:
        self.window += sums.cpu()
        self.steps += 1
        self.tokens += tokens

    def elapsed(self) -> float:
        return self.prior_elapsed + time.perf_counter() - self.t0

    def cpu(self) -> float:
        return self.prior_cpu + time.process_time() - self.c0

    def write(self, step: int, lr: float, grad_norm: Tensor) -> dict:
        total = self.ctx.all_sum(self.window.clone())
        now = time.perf_counter()
        line = {"step": step, **_summary(total, self.steps), "lr": lr, "grad_norm": float(grad_norm),
                "tokens_per_s": self.tokens / max(now - self.t_window, 1e-9), "elapsed_s": self.prior_elapsed + now - self.t0,
                "cpu_s": self.cpu()}
        self.lines.append(line)
        if self.ctx.rank == 0:
            with open(self.path, "a") as f:
                f.write(json.dumps(line) + "\n")
        self.window.zero_()
        self.steps, self.tokens, self.t_window = 0, 0, now
        return line

    def checkpoint_metrics(self, step: int) -> dict:
        """The metrics a checkpoint at `step` records: its step's line, and the clocks."""
        metrics = dict(self.lines[-1]) if self.lines and self.lines[-1]["step"] == step else {}
        metrics["elapsed_s"] = self.elapsed()
        metrics["cpu_s"] = self.cpu()
        return metrics


__all__ = ["TrainResult", "batch_sums", "resolve_device", "step_logits", "train"]
