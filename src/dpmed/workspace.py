"""A study folder as a place of work: who holds it, writing into it, and how far the work in it has come.

* `claim_folder` keeps a second `dpmed run` out of a study folder for as long as one works in it (`dpmed.lock`: the
  lock file names the process, and a lock whose process is gone is taken over); `dpmed.states.folder_holder` tells
  a reader (`dpmed plan`, `status`, `report`) that a run is under way.
* `writing_into` turns a failure to write into the folder (read-only, a file where a folder should be, a full
  disk) into one `FolderError` that names the folder and says what to do, instead of an OSError traceback.
* `withdraw_leftovers` and `withdraw_public_timing` take out of the shareable part what no eps covers: an unfinished
  run's files, a finished run's left secrets, an older dpmed's DP-SGD timing in run.json.

How far the work has come, the line `dpmed run` logs after each run, is `dpmed.progress`: apart, so that rebuilding
a report (`dpmed.outputs`, which writes into the folder from here) imports neither the runs' executors nor torch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
from pathlib import Path
from typing import Iterator, Sequence

from dpmed.errors import FolderError
from dpmed.folders import StudyFolder, file_in_the_way, link_to_nothing, refuse_link
from dpmed.lock import FolderLock, Holder, process_running
from dpmed.records import RunRecord, read_timing

__all__ = ["claim_folder", "writing_into", "stale_temporaries", "withdraw_leftovers",
           "withdraw_public_timing", "UNWRITABLE_ADVICE", "FULL_DISK_ADVICE"]

_log = logging.getLogger(__name__)
_WINDOWS = os.name == "nt"

UNWRITABLE_ADVICE = ("choose a writable output folder (--out), which trains the study again, or make this one "
                     "writable: finished runs are kept, and the same command continues from them")
FULL_DISK_ADVICE = ("free space on its disk, or choose an output folder (--out) on another disk, which trains the "
                    "study again: finished runs are kept, and the same command continues from them")

# What a file system refuses whichever file is written: no space or quota left, mounted read-only, access denied.
_FULL = {errno.ENOSPC} | ({errno.EDQUOT} if hasattr(errno, "EDQUOT") else set())
# EPERM too: setting the times of a file another user owns (`StudyFolder.settle_times`), or touching an immutable
# one, is refused with it, and it reached the user as an internal error
_REFUSED = _FULL | {errno.EROFS, errno.EACCES, errno.EPERM}


def stale_temporaries(root: Path) -> list[Path]:
    """The temporary files of `dpmed.folders.temporary_beside` under ``root`` whose writer no longer runs here:
    half-written files left by a process that was killed, which no later write replaces (one whose writer cannot
    be known to be gone is kept). Only this host's: another host's processes, which may have the same ids, are not
    seen from here. An older dpmed named them by process id alone (``.NAME.PID.tmp``), on this host as it assumed."""
    stale, host = [], socket.gethostname()
    for path in root.rglob(".*.tmp"):
        writer = path.name[:-len(".tmp")]
        if "@" in writer:
            if not writer.endswith(f"@{host}"):
                continue
            writer = writer[:-len(host) - 1]
        pid = writer.rpartition(".")[2]
        if pid.isdigit() and process_running(int(pid)) is False:
            stale.append(path)
    return stale


@contextlib.contextmanager
def writing_into(root: Path, advice: str = UNWRITABLE_ADVICE, full_advice: str = FULL_DISK_ADVICE) -> Iterator[None]:
    """Turn a failure to write into the folder ``root`` (or to create it) into one FolderError naming the folder
    and ``advice`` (``full_advice`` for a full disk or an exhausted quota); any other OSError passes.

    A full disk, an exhausted quota, a read-only file system or a denied permission is the folder's problem even
    where the error names no file: a write (or the close that flushes it) that runs out of space raises ENOSPC with
    no file name, and left alone it reached the user as an internal error. A full disk met writing a file outside
    the folder (a cache) is told too, naming that file."""
    try:
        yield
    except OSError as exc:
        folder = root.absolute()
        culprit = None if exc.filename is None else Path(exc.filename).absolute()
        inside = culprit is None or culprit == folder or folder in culprit.parents or culprit in folder.parents
        reason = exc.strerror or type(exc).__name__
        if exc.errno in _FULL and not inside:
            raise FolderError(f"cannot write {exc.filename}: {reason}; free space on its disk, then run the same "
                              "command again") from None
        if not inside or (culprit is None and exc.errno not in _REFUSED):
            raise
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):     # said only "Not a directory" or "File exists"
            file = file_in_the_way(folder)
            other = ", or choose another output folder (--out)" if advice == UNWRITABLE_ADVICE else ""
            if file is not None:
                raise FolderError(f"cannot write to the output folder {root}: {file} is a file, not a folder; move "
                                  f"or rename that file{other}") from None
            link = link_to_nothing(folder)
            if link is not None:
                raise FolderError(f"cannot write to the output folder {root}: {link}{other}") from None
        named = exc.filename2 if exc.filename2 is not None else exc.filename   # os.replace: the file replaced
        where = "" if named is None else f" ({named})"
        tail = full_advice if exc.errno in _FULL else advice
        if _WINDOWS and exc.errno == errno.EACCES and named is not None and Path(named).is_file():
            # Windows refuses to replace a file another program holds open (winerror 32) with EACCES too
            tail = f"if another program has it open (a spreadsheet, a viewer), close it and run again; else {tail}"
        raise FolderError(f"cannot write to the output folder {root}: {reason}{where}; {tail}") from None


@contextlib.contextmanager
def claim_folder(root: Path | str) -> Iterator[Holder]:
    """Hold the study folder ``root`` for this process (`dpmed.lock`): FolderError naming the holder if another
    live `dpmed run` works in it, or naming the folder if it cannot be created or written. Re-entrant. Makes the
    folder's ``private/`` readable by its owner only (`StudyFolder.make_private`), and on leaving sets the times of
    what it wrote to a constant (`StudyFolder.settle_times`) and removes the folders it made that nothing was
    written into: a study refused before it wrote anything (memory, a setting planning refuses) leaves the output
    folder as it found it, not an empty private/ (the lock lives there, so the folder is made before the study is
    planned)."""
    folder = StudyFolder(Path(root))
    made = [p for p in (folder.private, *folder.private.parents) if not p.exists()]     # innermost first
    with writing_into(folder.root):
        try:
            folder.make_private()
            with FolderLock(folder.lock, what=str(folder.root)) as holder:
                try:
                    yield holder
                finally:            # also after a failure or Ctrl-C: what was written keeps no wall time
                    folder.settle_times()
        finally:
            for path in made:
                # rmdir removes an empty folder only: one that anything was written into stays, with its parents
                with contextlib.suppress(OSError):
                    path.rmdir()


def withdraw_leftovers(folder: StudyFolder) -> None:
    """Delete the releasable files of unfinished runs (`RunFolder.leftovers`: a model without its run.json, left by
    a dpmed that wrote them in place, or by a stop just before run.json): the study's eps counts finished runs only,
    so it would not cover them. A run still planned writes its own again; one no longer planned has no record. And
    the half-written temporary files of killed writers (`stale_temporaries`), which no later write replaces; and the
    privacy key and checkpoint of a run stopped between writing its run.json and deleting them, which nothing
    would delete later (`RunFolder.discard_secrets`)."""
    refuse_link(folder.runs)
    for path in folder.runs.iterdir():
        refuse_link(path)
    for path in stale_temporaries(folder.root):
        path.unlink(missing_ok=True)
    for run_dir in sorted(p for p in folder.runs.iterdir() if p.is_dir()):
        run = folder.run(run_dir.name)
        if run.is_finished:
            run.discard_secrets()
        left = run.leftovers()
        for path in left:
            path.unlink()
        if left:
            _log.warning("%s: unfinished; deleted its %s from the shareable folder, where no eps of this study "
                         "covers them (copies shared before are releases that no study folder accounts for)",
                         run_dir.name, ", ".join(p.name for p in left))


def withdraw_public_timing(folder: StudyFolder, records: Sequence[RunRecord]) -> None:
    """A DP-SGD run.json that an older dpmed wrote still holds the run's seconds, or the step it resumed from, or the
    seconds its explanations took, which are private (`RunRecord.shareable`): keep the timing in the run's private
    timing.json where it has none, rewrite run.json with the shareable part, and say that copies of the folder
    shared before still hold them."""
    rewritten, seconds, steps = [], [], []
    changed = [(r, shared) for r in records if (shared := r.shareable()) != r]
    if changed:
        refuse_link(folder.runs)            # the rewrite would write the file a link points to, outside the folder
    for r, shared in changed:
        if r.timing.train_seconds is not None or r.timing.total_seconds is not None:
            seconds.append(r.run_id)
        elif shared.timing != r.timing:
            steps.append(r.run_id)
        run = folder.run(r.run_id)
        refuse_link(run.public)
        if shared.timing != r.timing and read_timing(run.timing) is None:
            run.make()
            r.timing.write(run.timing)
        shared.write(run.record)
        rewritten.append(r.run_id)
    if seconds:
        _log.warning("%d DP-SGD run.json file(s) written by an older dpmed held the run's wall time (%s): moved to "
                     "the private folder; copies of the folder shared before still hold it", len(seconds),
                     ", ".join(seconds))
    elif steps:
        _log.info("%d DP-SGD run.json file(s) written by an older dpmed said whether the run resumed (%s): that "
                  "step is private now, and was moved to the private folder", len(steps), ", ".join(steps))
    elif rewritten:
        _log.info("%d DP-SGD run.json file(s) written by an older dpmed held the seconds their explanations took "
                  "(%s): private now, and taken out of run.json", len(rewritten), ", ".join(rewritten))
