"""Arguments and helpers shared by the model-and-task commands (sweep, knockout, gates).

A command builds one `Request` from its parsed arguments (the model and its resolved source, the
task, the journal folder) and hands it to its helpers; nothing is written onto `args`
(tests/test_entry_points.py checks).

Not a command itself: `phaseinterp/cli.py` skips modules whose name starts with "_"."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", nargs="?", help="model source (or use --preset): a phaseinterp .safetensors file "
                                                 "(ours, a trained HF or NSA model), a training-run folder "
                                                 "(phaseinterp train --out), a HuggingFace model folder, or a "
                                                 "shipped model's name, e.g. w4s4 (phaseinterp.models())")
    p.add_argument("--preset", help="random-weight model of this preset instead of a checkpoint")
    p.add_argument("--seed", type=int, default=0, help="initialization seed for --preset (default 0)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")


def add_task_args(p: argparse.ArgumentParser, n_per_residue: int = 32) -> None:
    from phaseinterp.tasks.names import BUILTIN_TASKS, PROTOCOLS, VARIANTS

    p.add_argument("--modulus", type=int, help="residue modulus R (default: the one its card's phase curve used, else lcm of the model's strides)")
    p.add_argument("--n-per-residue", type=int, default=n_per_residue,
                   help=f"logical examples per residue (default {n_per_residue})")
    p.add_argument("--protocol", choices=PROTOCOLS, help="padding protocol (default: the card's, else prefix)")
    p.add_argument("--task", metavar="NAME",
                   help="the task: a record-lookup variant (" + ", ".join(VARIANTS) + "), a registered task ("
                        + ", ".join(BUILTIN_TASKS) + ", or one added with phaseinterp.tasks.register_task) or an "
                        "import path module:Attr of a Task class, factory or instance (default: the card's task, "
                        "else lookup)")
    p.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the task (repeatable; VALUE read as JSON when it parses, else as text), "
                        "e.g. --task induction --task-option seq_len=96 --task-option vocab=[10,500]")
    p.add_argument("--n-records", type=int, help="records per prompt (default: the card's, else 64)")
    p.add_argument("--n-demos", type=int, help="demonstrations per prompt (default: the card's, else 8)")
    p.add_argument("--seq-len", type=int, help="prompt length (default: the card's, else the shortest that fits)")
    p.add_argument("--card", type=Path, help="checkpoint card whose matched evaluation task sets the defaults "
                                             "(default: CHECKPOINT with .json, or the run's card.json for a run "
                                             "folder or a checkpoint inside one)")
    p.add_argument("--task-seed", type=int, default=0, help="seed of the prompts (default 0)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap replicates (default 2000)")


def add_guard_args(p: argparse.ArgumentParser, result: str, resume: bool = False) -> None:
    """`--overwrite` (and with `resume`, `--resume`) for a verb whose finished folder holds `result`
    (the guard that reads them: `commands/_guard.py`)."""
    p.set_defaults(result_file=result, journal_ok=resume)
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace the results of a finished --out folder (one holding {result}); without it such a "
                        "folder is refused")
    if resume:
        p.add_argument("--resume", action="store_true",
                       help="continue an unfinished run in --out from its journal (OUT/.journal: the units a killed "
                            "run finished); the result is the uninterrupted run's, bit for bit")


def _deprecated_alias(new: str) -> type[argparse.Action]:
    """Action of an old option name kept for scripts: stores into `new`'s dest and warns (FutureWarning:
    shown to command-line users)."""

    class DeprecatedAlias(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            import warnings

            warnings.warn(f"{option_string} is deprecated: use {new} (same meaning, same results)", FutureWarning,
                          stacklevel=2)
            setattr(namespace, self.dest, values)

    return DeprecatedAlias


def add_period_arg(p: argparse.ArgumentParser, help: str) -> None:
    """`--period P` (the period of the residue statistics), with `--stride` as a deprecated alias."""
    p.add_argument("--period", type=int, metavar="P", help=help)
    p.add_argument("--stride", dest="period", type=int, metavar="P", action=_deprecated_alias("--period"),
                   help="deprecated name of --period")


def card_task(args: argparse.Namespace, loaded: Any = None) -> dict[str, Any]:
    """The matched evaluation task of the model's card (`data.eval_task`; the card of the resolved
    source `loaded`, or `--card`), or {} without a card."""
    if loaded is not None:
        task = loaded.eval_task
    elif args.card is not None:
        from phaseinterp.sources import read_card

        task = read_card(args.card).get("data", {}).get("eval_task")
    else:
        return {}
    if not task and args.card is not None:
        raise ValueError(f"card {str(args.card)!r} has no data.eval_task")
    return task or {}


def _card_modulus(loaded: Any) -> int | None:
    """The residue modulus of the card's phase curve (`phase_curve.task.modulus`), or None."""
    card = (loaded.card if loaded is not None else None) or {}
    modulus = (card.get("phase_curve") or {}).get("task", {}).get("modulus")
    return modulus if isinstance(modulus, int) and modulus > 0 else None


def check_device(device: str) -> None:
    """Refuse a device this machine does not have, naming what it has."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"--device {device!r} is invalid ({err}): allowed 'cpu' or 'cuda[:N]'") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0 or (dev.index or 0) >= n:
            raise ValueError(f"--device {device!r} is invalid: this machine has {n} CUDA device(s); allowed 'cpu'"
                             + (f" or cuda:0..cuda:{n - 1}" if n else ""))


@dataclass(frozen=True)
class Loaded:
    """What a command runs on: the model (eval mode; HF models behind their backend) and the
    resolved source it came from (`sources.LoadedModel`, with its card), None for `--preset`."""

    model: Any
    source: Any = None

    @classmethod
    def of(cls, got: Any) -> "Loaded":
        """`got` itself when a `Loaded`, else a bare model without a source (a loader stood in by a test)."""
        return got if isinstance(got, Loaded) else cls(got)


def load_source(args: argparse.Namespace) -> Loaded:
    """`HookedCompressedTransformer(preset(NAME), seed=SEED)`, or the model source CHECKPOINT
    resolved once (`phaseinterp.sources.resolve_source`: a checkpoint file, a training-run folder, a
    HuggingFace model folder or a shipped model's name) into what its family runs experiments on
    (ours as is; HF models behind their backend, DeepSeek-V4 with gates), with the resolved source
    (its card sets the task defaults)."""
    if (args.checkpoint is None) == (args.preset is None):
        raise ValueError("give a CHECKPOINT path or --preset NAME (exactly one)")
    import torch

    from phaseinterp import HookedCompressedTransformer, preset

    check_device(args.device)
    torch.set_num_threads(max(1, args.threads))
    if args.preset:
        return Loaded(HookedCompressedTransformer(preset(args.preset), seed=args.seed).to(args.device).eval())
    from phaseinterp.sources import resolve_source

    loaded = resolve_source(args.checkpoint, args.device, card=args.card)
    return Loaded(loaded.runnable(), loaded)


def load_model(args: argparse.Namespace):
    """The model of `load_source` alone (its card then reaches `make_task` only through `--card`)."""
    return load_source(args).model


def source_of(args: argparse.Namespace, loaded: Any = None, task_card: dict[str, Any] | None = None) -> dict[str, Any]:
    """The provenance a command records: the checkpoint (and the weights file it resolved to) or the
    preset, and the task's card."""
    src = {"checkpoint": str(args.checkpoint)} if args.checkpoint else {"preset": args.preset, "init_seed": args.seed}
    if loaded is not None and loaded.path != Path(args.checkpoint):
        src["weights"] = str(loaded.path)
    return {**src, "task": task_card}


def model_label(args: argparse.Namespace) -> str:
    return Path(args.checkpoint).stem or Path(args.checkpoint).resolve().name if args.checkpoint else \
        f"{args.preset} (seed {args.seed})"


@dataclass(frozen=True)
class Request:
    """One run of a model-and-task command, built once from its parsed arguments and handed to its
    helpers (instead of state written onto `args`): the model and its resolved source, the task and
    its modulus, the task's card (provenance) and the journal folder of a guarded `--out`.

    Example:
        >>> request = Request.build(args)  # doctest: +SKIP
        >>> batch = request.sample(args.n_per_residue)  # doctest: +SKIP
    """

    args: argparse.Namespace  # the parsed command line, read only
    model: Any
    loaded: Any  # sources.LoadedModel, or None for --preset
    task: Any
    modulus: int
    task_card: dict[str, Any]
    journal: Path | None = None

    @classmethod
    def build(cls, args: argparse.Namespace, load: Callable[[argparse.Namespace], Any] = load_source) -> "Request":
        """Load the model (`load(args)`: a `Loaded`, or a bare model without a source) and make the
        task from the arguments and the card."""
        loaded = Loaded.of(load(args))
        task, modulus, card = task_for(args, loaded.model, loaded.source)
        return cls(args, loaded.model, loaded.source, task, modulus, card, args.journal)

    def sample(self, n_per_residue: int, **kw: Any):
        """`task.sample(n_per_residue, modulus, seed=--task-seed, **kw)`."""
        return self.task.sample(n_per_residue, self.modulus, seed=self.args.task_seed, **kw)

    def source(self) -> dict[str, Any]:
        return source_of(self.args, self.loaded, self.task_card)

    @property
    def label(self) -> str:
        return model_label(self.args)

    def journal_for(self, name: str) -> Path | None:
        """The journal folder of one map (or sweep) under OUT/.journal, or None outside a guarded run."""
        return None if self.journal is None else Path(self.journal) / name


def task_options(args: argparse.Namespace) -> dict[str, Any]:
    """`--task-option KEY=VALUE` pairs as a dict (values parsed as JSON when they parse)."""
    import json

    out: dict[str, Any] = {}
    for item in args.task_option:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--task-option {item!r} is invalid: allowed KEY=VALUE")
        try:
            out[key.strip()] = json.loads(text)
        except ValueError:
            out[key.strip()] = text
    return out


def make_task(args: argparse.Namespace, model, loaded: Any = None):
    """(task, modulus) from the arguments, defaults from the checkpoint's card (`loaded`'s, else
    `--card`; see `task_for`)."""
    task, modulus, _ = task_for(args, model, loaded)
    return task, modulus


def task_for(args: argparse.Namespace, model, loaded: Any = None) -> tuple[Any, int, dict[str, Any]]:
    """(task, modulus, the task's card for the provenance) from the arguments, defaults from the
    checkpoint's card (its matched evaluation task: vocabulary split, records, demonstrations,
    length) when there is one; raises ValueError when the prompts do not fit. `--task` names a
    record-lookup variant (the historical path, unchanged), or any task of the protocol
    (`phaseinterp.tasks.make_task`: a registered name or module:Attr) built with `--task-option`s
    over the card's options."""
    from phaseinterp.tasks import default_modulus
    from phaseinterp.tasks.names import VARIANTS

    cfg = model.cfg
    measured = _card_modulus(loaded)  # the modulus the card's phase curve was measured at (models, the API example)
    if args.modulus is None and measured:
        modulus = measured
    elif args.modulus is None:
        try:
            modulus = default_modulus(cfg.strides)
        except ValueError:
            raise ValueError("the model has full attention (no strides): give --modulus R") from None
    else:
        modulus = args.modulus
    card = card_task(args, loaded)
    options = task_options(args)
    name = args.task if args.task is not None else card.get("task", "lookup")
    if name in VARIANTS or name == "record_lookup":
        task, task_card = _record_lookup(args, cfg, card, options,
                                         name if name in VARIANTS else options.pop("variant", "lookup"), modulus)
        return task, modulus, task_card
    from phaseinterp.tasks import make_task as build

    own = card if card.get("task") == name else {}  # the card's options describe this task
    flags = vars(args)
    given = {k: flags[k] for k in ("n_records", "n_demos", "protocol", "seq_len") if flags[k] is not None}
    task = build(name, **{**{k: v for k, v in own.items() if k != "task"}, **given, **options})
    seq_len = task.sample(1, modulus, seed=args.task_seed).tokens.shape[1]
    if seq_len > cfg.n_ctx:
        raise ValueError(f"prompts of {seq_len} tokens exceed the model's n_ctx={cfg.n_ctx}; choose a shorter task")
    return task, modulus, {**task.card(), "from_card": bool(own)}


def _record_lookup(args: argparse.Namespace, cfg, card: dict[str, Any], options: dict[str, Any], variant: str,
                   modulus: int) -> tuple[Any, dict[str, Any]]:
    """(the record lookup of `--task VARIANT`, its settings for the provenance), defaults from the
    card (the historical `make_task`)."""
    from phaseinterp.tasks import RecordLookup

    given = vars(args)
    pick = lambda name, default: given[name] if given[name] is not None else card.get(name, default)  # noqa: E731
    kwargs = dict(vocab_size=card.get("vocab_size", cfg.vocab_size), n_records=pick("n_records", 64),
                  n_demos=pick("n_demos", 8), protocol=pick("protocol", "prefix"), seq_len=pick("seq_len", None))
    kwargs.update(options)
    if kwargs["vocab_size"] > cfg.vocab_size:
        raise ValueError(f"card vocab_size={kwargs['vocab_size']} exceeds the model's {cfg.vocab_size}")
    task = RecordLookup.variant(variant, **kwargs)
    seq_len = task.geometry(modulus).seq_len
    if seq_len > cfg.n_ctx:
        raise ValueError(f"prompts of {seq_len} tokens exceed the model's n_ctx={cfg.n_ctx}; "
                         "lower --n-records, --n-demos or --modulus")
    return task, {**kwargs, "variant": variant, "from_card": bool(card)}


def write_json(path: Path, obj: Any) -> Path:
    from phaseinterp.measure.outputs import write_atomic
    from phaseinterp.measure.provenance import dumps

    return write_atomic(path, dumps(obj))


def write_csv(df, path: Path) -> Path:
    """`df.to_csv(path, index=False)`, whole or not at all."""
    from phaseinterp.measure.outputs import atomic_path

    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return path


# ---- the command ---------------------------------------------------------------------------------
