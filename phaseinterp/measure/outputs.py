"""Output files that appear whole or not at all, and the lock that keeps two runs out of one folder.

`atomic_path(path)` hands out a temporary name next to `path` (same folder, same suffix, so the
writers that pick a format from the suffix still do) and renames it onto `path` only when the
block finishes: a run killed mid-write leaves a dot-named temporary file, never a truncated result.

`OutputLock(folder)` holds `folder/.lock` (pid, host, start time, command) while a run writes
there. A second run is refused with an error naming the folder and the holder's pid. A lock whose
process is dead on this host (killed with SIGKILL, so nothing removed it) is stale: the next run
takes it over and says so. A lock from another host is never judged stale (its pid means nothing here)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_NAME = ".lock"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write instead of `path`; renamed onto `path` when the block ends
    without error, removed when it raises.

    Example:
        >>> with atomic_path("table.csv") as p:
        ...     _ = p.write_text("a,b\\n1,2\\n")  # table.csv appears only now, whole
        >>> p.name, Path("table.csv").read_text()
        ('.table.tmp-...csv', 'a,b\\n1,2\\n')
    """
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `path` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
    return path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (a zombie, killed but not yet reaped, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0] != "Z"
    except (OSError, IndexError):
        return True


def _read_lock(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: never judged stale (we cannot tell whose it is)


class OutputLock:
    """`folder/.lock` held by this process for the duration of a `with` block (or acquire/release).

    Raises:
        ValueError: the folder is held by a live process (named with its pid, host and start time),
            or the lock file cannot be read.

    Example:
        >>> with OutputLock("out/sweep") as lock:  # a second run on out/sweep is refused meanwhile
        ...     OutputLock("out/sweep").acquire()
        Traceback (most recent call last):
        ValueError: --out 'out/sweep' is in use by another run (pid ...
        >>> lock.path.exists()  # released
        False
    """

    def __init__(self, folder: str | Path, command: str = "") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.command = command or " ".join(sys.argv[:3])
        self.note: str | None = None  # set when a stale lock was taken over
        self.held = False

    def _mine(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "command": self.command}

    def acquire(self) -> OutputLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        for _ in range(20):
            tmp = self.folder / f".lock.tmp-{os.getpid()}"
            tmp.write_text(json.dumps(self._mine()))
            try:
                os.link(tmp, self.path)  # fails if a lock exists: creation with content, atomically
                self.held = True
                return self
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
            held = _read_lock(self.path)
            if held is None:
                continue  # released meanwhile: try again
            pid, host = held.get("pid"), held.get("host")
            if not isinstance(pid, int) or host != socket.gethostname() or pid_alive(pid):
                where = f"pid {pid} on {host}" if pid is not None else "a process whose lock file cannot be read"
                raise ValueError(f"--out {str(self.folder)!r} is in use by another run ({where}, started "
                                 f"{held.get('started', '?')}: {held.get('command', '?')}): allowed a folder no "
                                 f"running process holds; if that run is gone, remove {str(self.path)!r}")
            aside = self.folder / f".lock.stale-{os.getpid()}"
            try:
                os.rename(self.path, aside)
            except FileNotFoundError:
                continue  # another run took it over first
            if _read_lock(aside) != held:  # we moved a fresh lock, not the stale one: put it back
                try:
                    os.link(aside, self.path)
                finally:
                    aside.unlink(missing_ok=True)
                continue
            aside.unlink(missing_ok=True)
            self.note = (f"took over the stale lock of {str(self.folder)!r} (pid {pid} on {host}, started "
                         f"{held.get('started', '?')}, is no longer running)")
        raise ValueError(f"--out {str(self.folder)!r}: could not take its lock after 20 tries (other runs keep "
                         "taking it): allowed a folder no other run is starting in")

    def release(self) -> None:
        if self.held:
            held = _read_lock(self.path)
            if held and held.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
