"""One `dpmed run` per study folder at a time: a lock file that names the process holding it.

Two runs of one study into one folder would both train every unfinished run and overwrite each other's checkpoints
(and each other's privacy keys: two different noise draws of the same run would be two releases). `run_study` holds
this lock for as long as it works in the folder; a second one refuses, naming the holder (PID, host, start time).

* The lock file is created atomically (``O_CREAT | O_EXCL``): of two processes, exactly one creates it.
* A lock whose process is gone (killed, machine rebooted) is *stale* and is taken over: on the same host the PID is
  checked (and, on Linux, its start time, so that a recycled PID does not look alive; elsewhere the refusal
  says which file to delete if that PID is no dpmed run). The check and the takeover happen under an advisory lock
  (``flock``; on Windows ``msvcrt.locking`` of a file beside the lock), so that of two processes finding the same
  stale lock only one replaces it. A lock held from another host cannot be checked from here and is never taken
  over; the message says which file to delete once that run is known to be gone.
* Re-entrant within a thread (the command line may hold it around `run_study`, which takes it again); another thread
  of the same process is refused as another process is (two `run_study` calls of a notebook or a web service would
  otherwise both train the folder's unfinished runs).

Readers (`dpmed status`, `dpmed report`, `dpmed plan`) do not take the lock; they may call :func:`lock_holder` to
say that a run is under way.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import secrets
import socket
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from dpmed.errors import FolderError

try:  # advisory locks: flock on POSIX, msvcrt.locking on Windows
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt
except ImportError:  # every platform but Windows
    msvcrt = None  # type: ignore[assignment]

__all__ = ["Holder", "FolderLocked", "FolderLock", "lock_holder", "holder_alive", "holder_gone", "process_running",
           "guard", "write_holder"]

_log = logging.getLogger(__name__)
_WINDOWS = os.name == "nt"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: process id, host name, when it took the lock (local time with its UTC offset, ISO 8601: the
    lock may be read from a host in another time zone), the process's start
    time as the kernel counts it (Linux; tells a recycled PID apart) and a random token naming this holding."""

    pid: int
    host: str
    started: str
    token: str
    process_start: int | None = None

    @classmethod
    def current(cls) -> "Holder":
        started = datetime.datetime.now().astimezone().isoformat(sep=" ", timespec="seconds")
        return cls(pid=os.getpid(), host=socket.gethostname(), started=started, token=secrets.token_hex(8),
                   process_start=_process_start(os.getpid()))

    def describe(self) -> str:
        return f"PID {self.pid} on host {self.host}, since {self.started}"


class FolderLocked(FolderError):
    """Another live process holds the lock; ``holder`` says which."""

    def __init__(self, message: str, holder: Holder | None) -> None:
        super().__init__(message)
        self.holder = holder


def _process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (field 22 of /proc/PID/stat), or None where unknown;
    -1 for a zombie (exited, not yet reaped: as good as gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()   # the command name may hold spaces and parentheses
    try:
        return -1 if fields[0] == "Z" else int(fields[19])
    except (IndexError, ValueError):
        return None


def process_running(pid: int) -> bool | None:
    """True if process ``pid`` runs on this host, False if there is none or it has ended (a zombie), None if this
    cannot be known."""
    if _WINDOWS:
        return _windows_process_running(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # it exists, as another user's process
        pass
    except OSError:
        return None
    return _process_start(pid) != -1


def _windows_process_running(pid: int) -> bool | None:
    """Windows: whether ``pid`` exists and has not exited, asked of the kernel. ``os.kill(pid, 0)`` is no probe there:
    signal 0 is CTRL_C_EVENT, sent to the process group ``pid``, and a PID that is gone raises a plain OSError."""
    import ctypes
    from ctypes import wintypes

    # WinDLL and get_last_error exist (and are typed) only on Windows; the tests stand them in elsewhere
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)     # type: ignore[attr-defined,unused-ignore]
    kernel32.OpenProcess.restype = wintypes.HANDLE
    kernel32.OpenProcess.argtypes = (wintypes.DWORD, wintypes.BOOL, wintypes.DWORD)
    kernel32.GetExitCodeProcess.restype = wintypes.BOOL
    kernel32.GetExitCodeProcess.argtypes = (wintypes.HANDLE, wintypes.LPDWORD)
    kernel32.CloseHandle.restype = wintypes.BOOL
    kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
    handle = kernel32.OpenProcess(0x1000, False, pid)    # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        # ERROR_INVALID_PARAMETER: no such process; ERROR_ACCESS_DENIED: another user's, running
        return {87: False, 5: True}.get(ctypes.get_last_error())     # type: ignore[attr-defined,unused-ignore]
    try:
        code = wintypes.DWORD()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return None
        return code.value == 259                         # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def holder_alive(holder: Holder) -> bool | None:
    """True if the holder's process runs, False if it is gone, None if this cannot be known from here (another
    host)."""
    if holder.host != socket.gethostname():
        return None
    running = process_running(holder.pid)
    if not running:
        return running
    start = _process_start(holder.pid) if holder.process_start is not None else None
    if start is not None and start != holder.process_start:
        return False          # the PID was recycled by an unrelated process
    return True


def _read(path: Path) -> Holder | None:
    """The holder recorded in ``path``; None if there is no lock file or it cannot be parsed, or names no process
    (a PID that is not an integer in 1..2^31 - 1: os.kill refuses a string or a larger number, and signals a whole
    process group for 0 and -1)."""
    try:
        holder = Holder(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        return None
    return holder if type(holder.pid) is int and 0 < holder.pid < 2 ** 31 else None


def write_holder(path: Path) -> None:
    """Name this process in a new file ``path``, as a lock file does, for :func:`holder_gone` to check later: a
    folder of this process's that a kill -9 leaves behind can then be told apart from one still in use."""
    if not _create(Path(path), Holder.current()):
        raise FileExistsError(path)


def holder_gone(path: Path) -> bool:
    """Whether the file at ``path`` names a process that is gone (a recycled PID included); False where there is no
    such file, it names no process, its process runs, or it runs on another host (which cannot be checked here)."""
    holder = _read(Path(path))
    return holder is not None and holder_alive(holder) is False


def lock_holder(path: Path) -> Holder | None:
    """The live (or unverifiable, other-host) holder of the lock at ``path``, or None if it is free or stale."""
    holder = _read(Path(path))
    return holder if holder is not None and holder_alive(holder) is not False else None


@contextlib.contextmanager
def guard(folder: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``folder`` for a short read-check-write: serialises the takeover of a stale lock,
    and the draws of the released counts (`dpmed.released_size`). The system drops it if the process dies. POSIX:
    flock of the folder; Windows, which cannot open a folder: msvcrt.locking of its file ``guard``. Best effort where
    neither works (a filesystem that refuses them); on NFS it may hold for one host only."""
    fd = None
    try:
        if fcntl is not None:
            fd = os.open(folder, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        elif msvcrt is not None:  # pragma: no cover - Windows
            fd = os.open(Path(folder) / "guard", os.O_RDWR | os.O_CREAT, 0o600)
            for attempt in range(30):   # each LK_LOCK retries for 10 s, then raises
                try:
                    msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                    break
                except OSError:
                    if attempt == 29:
                        raise
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        fd = None
        _log.warning("%s: no advisory lock could be taken (%s); going on without one: do not start another dpmed "
                     "command on this folder meanwhile", folder, exc.strerror or exc)
    try:
        yield
    finally:
        if fd is not None:
            if fcntl is None and msvcrt is not None:  # pragma: no cover - Windows: unlock before closing
                with contextlib.suppress(OSError):
                    os.lseek(fd, 0, os.SEEK_SET)
                    msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
            os.close(fd)      # closing releases the flock


def _create(path: Path, holder: Holder) -> bool:
    """Create the lock file holding ``holder``; False if it exists already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(asdict(holder)))
    return True


_HELD: dict[Path, list] = {}   # lock paths this process holds: [holder, depth, the holding thread's ident]
_HELD_LOCK = threading.RLock()  # guards _HELD between threads


class FolderLock:
    """``with FolderLock(path):`` holds the lock file at ``path`` (its folder is created), or raises
    :class:`FolderLocked` naming the live holder. ``what`` names the folder in messages."""

    def __init__(self, path: Path, *, what: str | None = None) -> None:
        self.path = Path(path).absolute()
        self.what = what or str(self.path.parent)

    def __enter__(self) -> Holder:
        with _HELD_LOCK:
            held = _HELD.get(self.path)
            if held is not None:
                if held[2] != threading.get_ident():
                    raise FolderLocked(self._refusal(held[0]), held[0])
                held[1] += 1
                return held[0]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = Holder.current()
        with guard(self.path.parent):
            for _ in range(3):
                if _create(self.path, me):
                    with _HELD_LOCK:
                        _HELD[self.path] = [me, 1, threading.get_ident()]
                    return me
                holder = _read(self.path)
                if holder is not None and holder_alive(holder) is not False:
                    raise FolderLocked(self._refusal(holder), holder)
                # stale (its process is gone) or unreadable: under the guard, no other dpmed acts between our read
                # and this removal, so what we remove is what we judged
                self.path.unlink(missing_ok=True)
                _log.warning("%s: took over the lock of a dpmed run that is gone (%s)", self.what,
                             "unreadable lock file" if holder is None else holder.describe())
        raise FolderLocked(f"{self.what} is being locked and unlocked by other processes; try again", None)

    def _refusal(self, holder: Holder) -> str:
        if holder.pid == os.getpid() and holder.host == socket.gethostname():
            with _HELD_LOCK:
                held = _HELD.get(self.path)
            thread = f" (thread {_thread_name(held[2])})" if held is not None else ""
            return (f"{self.what} is in use by another call in this process{thread}: wait for it to return, or use "
                    "another output folder")
        if holder.host != socket.gethostname():
            where = (f"; it runs on another host, so dpmed cannot check it from here: if it has ended, delete "
                     f"{self.path}")
        elif holder_alive(holder) is None:
            where = f"; dpmed cannot tell whether it still runs: if it has ended, delete {self.path}"
        elif holder.process_start is None or _process_start(holder.pid) is None:
            # no start time to tell a recycled PID apart (macOS, Windows): after a restart another process may
            # have that PID
            where = (f"; if PID {holder.pid} is not a dpmed run (after a restart, another process may have its "
                     f"number), delete {self.path}")
        else:
            where = ""
        return (f"{self.what} is in use by another dpmed run ({holder.describe()}){where}. Wait for it to finish "
                "(another folder, --out, would train the study again: new releases of the same patients, whose eps "
                "add up with these runs' if both are shared); `dpmed status` and `dpmed report` may read the folder "
                "meanwhile")

    def __exit__(self, *exc: object) -> None:
        with _HELD_LOCK:
            held = _HELD.get(self.path)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del _HELD[self.path]
        current = _read(self.path)
        if current is not None and current.token == held[0].token:
            self.path.unlink(missing_ok=True)


def _thread_name(ident: int) -> str:
    return next((t.name for t in threading.enumerate() if t.ident == ident), str(ident))
