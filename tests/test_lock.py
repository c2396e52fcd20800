"""The lock of a study folder (`dpmed.lock`): a live holder keeps others out and is named; a holder that is gone
(killed, a recycled PID, a file it never finished) is taken over, by exactly one of several takers; a holder on
another host is never taken over; the lock is re-entrant and released only by its own holding."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from dpmed.errors import FolderError
from dpmed.lock import FolderLock, FolderLocked, Holder, holder_alive, lock_holder

HOLD = """
import sys, time
from dpmed.lock import FolderLock
with FolderLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder_process(tmp_path):
    """A separate process holding the lock at tmp_path/private/lock; killed at the end."""
    path = tmp_path / "private" / "lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield proc, path
    proc.kill()
    proc.wait()


def _write(path: Path, holder: Holder) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(holder)))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_live_holder_in_another_process_keeps_others_out_and_is_named(holder_process):
    proc, path = holder_process
    assert lock_holder(path).pid == proc.pid
    with pytest.raises(FolderLocked) as info:
        with FolderLock(path, what="results/tiny"):
            pass
    assert isinstance(info.value, FolderError) and info.value.holder.pid == proc.pid
    message = str(info.value)
    assert message.startswith(f"results/tiny is in use by another dpmed run (PID {proc.pid} on host "
                              f"{socket.gethostname()}, since ")
    assert "--out, would train the study again: new releases of the same patients" in message   # not a way out
    assert json.loads(path.read_text())["pid"] == proc.pid          # the refusal leaves the holder's file alone


def test_the_lock_of_a_killed_holder_is_taken_over(holder_process):
    proc, path = holder_process
    proc.kill()
    proc.wait()
    assert path.exists() and lock_holder(path) is None             # the file is left behind, and known stale
    with FolderLock(path) as me:
        assert me.pid == os.getpid() and json.loads(path.read_text())["token"] == me.token
    assert not path.exists()


@pytest.mark.parametrize("stale", ["dead pid", "recycled pid", "zombie", "unreadable", "fields missing",
                                   "not an object", "pid beyond any", "pid not a number", "pid of no process",
                                   "pid -1"])
def test_stale_locks_are_taken_over(tmp_path, stale):
    path = tmp_path / "lock"
    me = Holder.current()
    if stale == "dead pid":
        _write(path, replace(me, pid=_dead_pid()))
    elif stale == "recycled pid":      # this very PID, but a process that started at another time
        _write(path, replace(me, process_start=(me.process_start or 0) + 12345))
    elif stale == "zombie":
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        while Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] != "Z":
            time.sleep(0.02)           # exited, not yet reaped
        _write(path, replace(me, pid=proc.pid, process_start=None))
    elif stale == "fields missing":
        path.write_text('{"pid": 12}')  # JSON, but not a holder's
    elif stale == "not an object":
        path.write_text("[]")
    elif stale.startswith("pid "):
        # a lock file of the holder's fields, but with values no process has: os.kill raised OverflowError or
        # TypeError (an internal error of `dpmed run` and `dpmed status`), and 0 or -1 signal whole process groups,
        # so such a file looked held for ever
        pid = {"pid beyond any": 2 ** 40, "pid not a number": "123", "pid of no process": 0, "pid -1": -1}[stale]
        path.write_text(json.dumps({**asdict(me), "pid": pid}))
        assert lock_holder(path) is None               # `dpmed status`: no run under way
    else:
        path.write_text('{"pid": 12')  # a holder that died while writing its file
    if stale in ("dead pid", "recycled pid", "zombie"):
        assert holder_alive(json_holder(path)) is False
    with FolderLock(path) as holder:
        assert json.loads(path.read_text())["token"] == holder.token
    if stale == "zombie":
        proc.wait()


def json_holder(path: Path) -> Holder:
    return Holder(**json.loads(path.read_text()))


def test_a_holder_on_another_host_is_never_taken_over(tmp_path):
    path = tmp_path / "lock"
    _write(path, replace(Holder.current(), pid=_dead_pid(), host="elsewhere.example"))
    assert holder_alive(json_holder(path)) is None
    assert lock_holder(path).host == "elsewhere.example"        # `dpmed status` says a run may be working there
    with pytest.raises(FolderLocked, match=f"another host, .*delete {path}"):
        with FolderLock(path):
            pass
    assert json_holder(path).host == "elsewhere.example"


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="Linux's /proc")
def test_the_start_time_of_a_process_whose_name_holds_a_parenthesis_is_read_after_the_name(tmp_path):
    """/proc/PID/stat puts the command name in parentheses, and the name may hold ") " itself: read from the first
    ")", the fields shift and another number (the thread count) stood for the start time, which changes while the
    process lives, so a live holder could be judged a recycled PID and its lock taken over."""
    from dpmed import lock

    odd = tmp_path / "dpmed) 1 2"
    odd.symlink_to(sys.executable)
    proc = subprocess.Popen([str(odd), "-c", "import time; print('up', flush=True); time.sleep(120)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        assert ") 1 2)" in Path(f"/proc/{proc.pid}/stat").read_text()
        start = lock._process_start(proc.pid)
        now = float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")
        assert lock._process_start(os.getpid()) <= start <= now + 1      # started after this test's process, by now
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.name == "nt", reason="Windows asks the kernel whether a PID runs; it never signals one")
def test_another_users_live_process_is_running_not_gone(monkeypatch):
    """Signalling another user's process raises PermissionError: it exists, and its lock must not be taken over."""
    import dpmed.lock as lock

    def not_yours(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(lock.os, "kill", not_yours)
    assert lock.process_running(os.getpid()) is True


def test_a_live_holder_whose_start_time_is_unknown_is_refused_with_the_file_to_delete(holder_process, monkeypatch):
    """macOS and Windows record no process start time, so a PID reused after a restart looks alive for ever: the
    refusal said only "wait for it to finish". Where dpmed cannot tell at all, it said "another host"."""
    from dpmed import lock

    proc, path = holder_process
    _write(path, replace(json_holder(path), process_start=None))
    with pytest.raises(FolderLocked, match=f"if PID {proc.pid} is not a dpmed run .*, delete {path}"):
        with FolderLock(path):
            pass
    # recorded, but no start time can be read now (a /proc mounted with hidepid): no telling a recycled PID either
    holding = json_holder(path)
    _write(path, replace(holding, process_start=12345))
    monkeypatch.setattr(lock, "_process_start", lambda pid: None)
    with pytest.raises(FolderLocked, match=f"if PID {proc.pid} is not a dpmed run .*, delete {path}"):
        with FolderLock(path):
            pass
    monkeypatch.undo()
    _write(path, holding)
    monkeypatch.setattr(lock, "process_running", lambda pid: None)
    with pytest.raises(FolderLocked) as refused:
        with FolderLock(path):
            pass
    assert f"dpmed cannot tell whether it still runs: if it has ended, delete {path}" in str(refused.value)
    assert "another host" not in str(refused.value)


@pytest.mark.parametrize("handle, error, exit_code, running", [
    (None, 87, None, False),       # ERROR_INVALID_PARAMETER: no such process
    (None, 5, None, True),         # ERROR_ACCESS_DENIED: another user's process
    (None, 6, None, None),
    (1234, 0, 259, True),          # STILL_ACTIVE
    (1234, 0, 0, False),           # exited, its handle still held by someone
])
def test_on_windows_a_pid_is_asked_of_the_kernel_and_never_signalled(monkeypatch, handle, error, exit_code, running):
    """os.kill(pid, 0) on Windows sends CTRL_C_EVENT to the process group pid (it could stop a run, dpmed's own
    included), and a PID that is gone raised a plain OSError, read as "cannot tell": a crashed run's lock was never
    taken over."""
    import ctypes

    from dpmed import lock

    closed = []

    class Function:
        def __init__(self, body):
            self.body, self.restype, self.argtypes = body, None, None

        def __call__(self, *args):
            return self.body(*args)

    def exit_code_of(h, code):
        code._obj.value = exit_code
        return 1

    kernel32 = type("Kernel32", (), {})()
    kernel32.OpenProcess = Function(lambda access, inherit, pid: handle)
    kernel32.GetExitCodeProcess = Function(exit_code_of)
    kernel32.CloseHandle = Function(closed.append)
    monkeypatch.setattr(lock, "_WINDOWS", True)
    monkeypatch.setattr(ctypes, "WinDLL", lambda name, use_last_error: kernel32, raising=False)
    monkeypatch.setattr(ctypes, "get_last_error", lambda: error, raising=False)
    monkeypatch.setattr(lock.os, "kill", lambda *a: pytest.fail("os.kill is no probe on Windows"))
    assert lock.process_running(4321) is running
    assert closed == ([] if handle is None else [handle])


def test_the_lock_is_reentrant_and_released_only_by_its_own_holding(tmp_path):
    path = tmp_path / "private" / "lock"
    with FolderLock(path) as outer:
        with FolderLock(path) as inner:
            assert inner == outer
        assert path.exists()                           # the inner exit keeps the outer holding
    assert not path.exists()
    with FolderLock(path):
        _write(path, replace(Holder.current(), token="someone-else"))   # e.g. deleted by hand and retaken
    assert json_holder(path).token == "someone-else"   # not ours to remove


def test_another_thread_of_the_holding_process_is_refused(tmp_path):
    """Two run_study calls of one process (a notebook's, a web service's threads) both went through, as if each were
    the other's re-entry, and both trained the folder's unfinished runs."""
    import threading

    path, answers = tmp_path / "private" / "lock", []

    def take() -> None:
        try:
            with FolderLock(path, what="the study folder"):
                answers.append("took")
        except FolderLocked as exc:
            answers.append(str(exc))

    with FolderLock(path):
        other = threading.Thread(target=take, name="second-call")
        other.start()
        other.join(30)
        assert path.exists()
    assert answers == ["the study folder is in use by another call in this process (thread MainThread): wait for it "
                       "to return, or use another output folder"]
    other = threading.Thread(target=take)            # once released, another thread takes it
    other.start()
    other.join(30)
    assert answers[-1] == "took" and not path.exists()


def _take(path: str, start: float, results, everyone_answered) -> None:
    while time.time() < start:
        time.sleep(0.001)
    try:
        with FolderLock(Path(path)):
            results.put("took")
            # held until every process has answered: a fixed sleep let a process delayed by load past it take the
            # lock after its release, and the test then saw two takers
            everyone_answered.wait(60)
    except FolderLocked:
        results.put("refused")


def test_of_several_processes_finding_one_stale_lock_exactly_one_takes_it(tmp_path):
    path = tmp_path / "lock"
    _write(path, replace(Holder.current(), pid=_dead_pid()))
    fork = multiprocessing.get_context("fork")
    results, everyone_answered = fork.Queue(), fork.Event()
    start = time.time() + 0.5
    procs = [fork.Process(target=_take, args=(str(path), start, results, everyone_answered)) for _ in range(4)]
    for p in procs:
        p.start()
    answers = sorted(results.get(timeout=60) for _ in procs)
    everyone_answered.set()
    for p in procs:
        p.join(30)
    assert answers == ["refused"] * 3 + ["took"]


def test_guard_is_best_effort_where_the_filesystem_refuses_flock(tmp_path, monkeypatch):
    """Some network filesystems refuse flock (ENOLCK): the guard then only serialises nothing, and `dpmed plan` and
    `dpmed run` must go on rather than stop with an OSError. The folder's descriptor is closed either way."""
    import errno

    from dpmed import lock

    if lock.fcntl is None:
        pytest.skip("no fcntl on this platform: the guard is a no-op there")
    opened = []
    real_open = os.open

    def track(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        opened.append(fd)
        return fd

    def refused(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock.os, "open", track)
    monkeypatch.setattr(lock.fcntl, "flock", refused)
    ran = []
    with lock.guard(tmp_path):
        ran.append(True)
    assert ran == [True] and len(opened) == 1
    with pytest.raises(OSError) as closed:
        os.fstat(opened[0])
    assert closed.value.errno == errno.EBADF    # closed, not some other failure of fstat


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="Linux's /proc")
def test_a_process_that_is_gone_has_no_start_time_rather_than_an_error():
    """A holder judged between its exit and the kernel's removal of /proc/PID reads no start time; so does every
    process where /proc is absent (macOS): unknown, not an OSError out of the lock's check."""
    from dpmed import lock

    assert lock._process_start(_dead_pid()) is None
    assert lock._process_start(os.getpid()) > 0


def test_a_lock_file_recreated_by_others_at_every_try_is_refused_in_one_line(tmp_path, monkeypatch, caplog):
    """Where the guard holds nothing (a filesystem without flock), other processes may create and abandon the lock
    file between each of ours: after three takeovers dpmed stops with one line, rather than loop for ever."""
    from dpmed import lock

    path = tmp_path / "private" / "lock"
    dead = replace(Holder.current(), pid=_dead_pid())
    tries = []

    def another_was_first(at, holder):
        tries.append(at)
        _write(at, dead)          # a process that took the lock and died before we looked
        return False

    monkeypatch.setattr(lock, "_create", another_was_first)
    with pytest.raises(FolderLocked) as refused:
        with FolderLock(path, what="results/tiny"):
            pytest.fail("took a lock it never created")
    assert str(refused.value) == "results/tiny is being locked and unlocked by other processes; try again"
    assert refused.value.holder is None and len(tries) == 3
    assert caplog.text.count("took over the lock of a dpmed run that is gone") == 3


@pytest.mark.skipif(os.name == "nt", reason="Windows locks a file beside the folder")
def test_guard_goes_on_where_the_folder_cannot_be_opened(tmp_path, monkeypatch, caplog):
    """A folder the user may write but not list (mode 0o300) cannot be opened for flock: the guard warns and the
    command goes on, as where flock is refused, rather than stop with a PermissionError."""
    import errno

    from dpmed import lock

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(lock.os, "open", refused)
    ran = []
    with lock.guard(tmp_path):
        ran.append(True)
    assert ran == [True]
    assert f"{tmp_path}: no advisory lock could be taken (Permission denied); going on without one" in caplog.text


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="the time zone is set through TZ on POSIX only")
def test_a_holder_s_start_says_its_time_zone_for_a_reader_on_a_host_in_another(monkeypatch):
    """A lock on a shared folder is read from other hosts, whose clocks may show another zone: "since 19:51" in the
    holder's local time, with no offset, named a time that could be hours off for the reader."""
    import datetime

    monkeypatch.setenv("TZ", "Asia/Kathmandu")      # +05:45: no whole-hour slip passes
    time.tzset()
    try:
        started = datetime.datetime.fromisoformat(Holder.current().started)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert started.utcoffset() == datetime.timedelta(hours=5, minutes=45)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()) < 60
