"""The journal of long work: finished units (minibatches of a sweep, chunks of a knockout map) kept
in a folder as they finish, so that a killed run continues where it stopped (`resume=`).

One small `.npz` file per finished unit, written atomically (temporary name, rename): a run
killed at any point leaves whole unit files and at most a dot-named temporary one, which the next
run removes. `journal.json` holds a fingerprint of the inputs (model weights, the batch, the
settings, each as a SHA-256); a journal made from other inputs is refused with an error naming
what differs, so a resumed result is always the uninterrupted run's result, bit for bit: each unit
is computed exactly as the uninterrupted run computes it (same rows, same chunking)."""

from __future__ import annotations

import hashlib
import io
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from phaseinterp.families.resolve import module_of
from phaseinterp.measure.outputs import write_atomic

FORMAT = 1
SECONDS = "_seconds"  # a unit's compute time, kept in its file beside its arrays


def digest(*parts: Any) -> str:
    """SHA-256 (hex) of tensors, arrays, dicts, lists and JSON values, by value."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, torch.Tensor):
            t = p.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(p, np.ndarray):
            h.update(f"{p.dtype}{p.shape}".encode())
            h.update(np.ascontiguousarray(p).tobytes())
        elif isinstance(p, dict):  # tensors inside are hashed whole (str() of a tensor elides values)
            h.update(b"{")
            for k in sorted(p, key=str):
                h.update(digest(str(k), p[k]).encode())
            h.update(b"}")
        elif isinstance(p, (list, tuple)):
            h.update(b"[")
            for v in p:
                h.update(digest(v).encode())
            h.update(b"]")
        else:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()


def model_fingerprint(model: Any) -> str:
    """SHA-256 of a model's class and every tensor of its state (weights and buffers), in name order.

    Raises:
        ValueError: the model has no torch module to read weights from (a plain callable).
    """
    module = module_of(model)
    if module is None:
        raise ValueError(f"resume= needs a model with weights to fingerprint (a torch module or a backend); got "
                         f"{type(model).__name__}: allowed resume=None for a plain callable")
    state = module.state_dict()
    return digest(type(module).__name__, *[x for k in sorted(state) for x in (k, state[k])])


def batch_fingerprint(batch: Any) -> str:
    """SHA-256 of a PhaseBatch's rows (tokens, query positions, answers, residues, example ids, modulus)."""
    multi = getattr(batch, "answer_pos", None)  # multi-token answers: their positions count too
    return digest(batch.tokens, batch.query_pos, batch.answers, batch.residue, batch.example_id, int(batch.modulus),
                  *(() if multi is None else (multi,)))


class Journal:
    """Finished units of one computation, kept in `folder`.

    Args:
        folder: where the unit files live (created).
        kind: what computes the units ("sweep", "knockout"); a journal of another kind is refused.
        inputs: {name: fingerprint} of everything the units depend on (see `model_fingerprint`,
            `batch_fingerprint`; settings as any JSON value).

    Raises:
        ValueError: the folder holds a journal of another kind or of other inputs (naming them).

    Example:
        >>> inputs = {"model": model_fingerprint(model), "batch": batch_fingerprint(batch)}
        >>> Journal("work", "sweep", inputs).put("mb000000", correct=np.array([True, False]))
        >>> again = Journal("work", "sweep", inputs)  # a later run: takes what is there
        >>> again.get("mb000000")["correct"].tolist(), again.get("mb000001"), again.taken
        ([True, False], None, 1)

    A unit recorded with `put(key, seconds=...)` keeps its compute time: `seconds_taken` sums it over
    the units read back (`untimed` counts those recorded without it), so a resumed result can say how
    long the whole computation took, not only its last run (`resumed`).
    """

    def __init__(self, folder: str | Path, kind: str, inputs: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.kind = kind
        self.inputs = {k: v if isinstance(v, str) else digest(v) for k, v in inputs.items()}
        self.taken = 0  # units read back from the journal by this run
        self.seconds_taken = 0.0  # their compute time, as the runs that computed them recorded it
        self.untimed = 0  # units read back without a recorded time (journals written before it was kept)
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in self.folder.glob(".*.tmp-*"):  # a write a killed run did not finish
            tmp.unlink(missing_ok=True)
        manifest = self.folder / "journal.json"
        if manifest.exists():
            try:
                held = json.loads(manifest.read_text())
            except ValueError as err:
                raise ValueError(f"journal {str(manifest)!r} cannot be read ({err}): allowed a journal this library "
                                 "wrote; remove the folder to start over") from None
            if held.get("kind") != kind or held.get("format") != FORMAT:
                raise ValueError(f"journal {str(self.folder)!r} belongs to a {held.get('kind')!r} run (format "
                                 f"{held.get('format')}): allowed a {kind!r} journal of format {FORMAT}; give another "
                                 "folder or remove it")
            differ = sorted(k for k in {*held.get("inputs", {}), *self.inputs}
                            if held.get("inputs", {}).get(k) != self.inputs.get(k))
            if differ:
                raise ValueError(f"journal {str(self.folder)!r} was made from other inputs (different: "
                                 f"{', '.join(differ)}): allowed resuming with the same model, batch and settings; "
                                 "give another folder, or start over (--overwrite)")
        else:
            write_atomic(manifest, json.dumps({"kind": kind, "format": FORMAT, "inputs": self.inputs}, indent=1))

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.npz"

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.npz") if not p.name.startswith("."))

    def get(self, key: str) -> dict[str, np.ndarray] | None:
        """The arrays of finished unit `key`, or None when it is not in the journal (counted in `taken`)."""
        path = self._path(key)
        if not path.exists():
            return None
        try:
            with np.load(path) as z:
                out = {k: z[k] for k in z.files}
        except (OSError, ValueError) as err:
            raise ValueError(f"journal file {str(path)!r} cannot be read ({err}): allowed files this library wrote; "
                             "remove it and resume (that unit is computed again)") from None
        self.taken += 1
        seconds = out.pop(SECONDS, None)
        if seconds is None:
            self.untimed += 1
        else:
            self.seconds_taken += float(seconds)
        return out

    def put(self, key: str, *, seconds: float | None = None, **arrays: np.ndarray) -> None:
        """Record finished unit `key` (whole or not at all), with the `seconds` it took to compute."""
        if seconds is not None:
            arrays[SECONDS] = np.float64(seconds)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        write_atomic(self._path(key), buf.getvalue())

    def resumed(self, what: str, of: int) -> dict[str, Any]:
        """A result's `resumed` entry: {what: units read back, "of": all units, "seconds": their recorded
        compute time} (+ "untimed": how many of them had none)."""
        return {what: self.taken, "of": of, "seconds": round(self.seconds_taken, 1),
                **({"untimed": self.untimed} if self.untimed else {})}


def open_journal(resume: str | Path | Journal | None, kind: str, inputs: dict[str, Any]) -> Journal | None:
    """`resume=` of the long computations: None (no journal), a folder, or a `Journal`."""
    if resume is None or isinstance(resume, Journal):
        return resume
    if not isinstance(resume, (str, Path)):
        raise ValueError(f"resume={resume!r} is invalid: allowed None or a journal folder (str or Path)")
    return Journal(resume, kind, inputs)


def journaled_chunks(n_units: int, per: int, journal: Journal | None, compute: Callable[[list[int]], dict[str, np.ndarray]],
                     *, rows: int, progress: bool, desc: str) -> Iterator[tuple[list[int], dict[str, np.ndarray]]]:
    """(unit indices, arrays) of each chunk of `per` of `n_units` units: taken from `journal` when a killed
    run recorded it, else `compute(indices)` and recorded. Every array's first two axes are
    [chunk units, `rows`]; a recorded chunk of another shape is refused. A progress bar counts units."""
    from phaseinterp.progress import progress_bar

    with progress_bar(n_units, desc, progress) as bar:
        for c, start in enumerate(range(0, n_units, per)):
            idx = list(range(start, min(start + per, n_units)))
            done = None if journal is None else journal.get(f"chunk{c:05d}")
            if done is not None:
                shapes = {k: v.shape[:2] for k, v in done.items() if v.ndim >= 2}
                if any(s != (len(idx), rows) for s in shapes.values()):
                    raise ValueError(f"journal {str(journal.folder)!r}: chunk {c} holds {shapes}, allowed "
                                     f"{(len(idx), rows)}; remove the journal to start over")
            else:
                start = time.perf_counter()
                done = compute(idx)
                if journal is not None:
                    journal.put(f"chunk{c:05d}", seconds=time.perf_counter() - start, **done)
            yield idx, done
            bar.update(len(idx))
