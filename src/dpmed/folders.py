"""The output folder of a study: every file name dpmed writes, in one place, and the one atomic write.

Two kinds of file, kept apart (METHODS.md s.2b; the README's "What you get"):

* **Releasable**, under ``<out>/<study>/`` outside ``private/``: the trained models' weights, run.json, study.yaml,
  results.csv, predictions on validation and test images, the report. Nothing in them depends on the training
  images except through the noised model and the accountant, so a user may share them and every eps still holds.
* **Private**, under ``<out>/<study>/private/``: checkpoints (optimiser state and the privacy randomness's key and
  position, while a run is unfinished), statistics of the training images computed without noise (training loss),
  the audit's canary inclusion bits and scores, and the log. Never share this folder.

``<study>/runs/<id>/run.json`` exists exactly when a run is finished; it is written last, atomically. A run's other
releasable files (model, predictions, CAMs, local-DP examples) are written into its private folder first and moved
beside run.json only when the run finishes (`RunFolder.release`): a run that fails or is stopped after training
leaves no model in the releasable folder, where the study's eps, which counts finished runs, would not cover it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import socket
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Mapping

import numpy as np

from dpmed.errors import FolderError, error_name

__all__ = ["StudyFolder", "RunFolder", "open_owner_only", "write_atomic", "write_arrays_atomic",
           "read_arrays", "write_json_atomic", "write_text_atomic", "write_torch_atomic", "temporary_beside",
           "file_in_the_way", "link_to_nothing", "refuse_link", "file_sha256", "RELEASE_TIME", "RETRAIN_NOTE",
           "CAM_KEYS", "EXAMPLE_KEYS"]

# Told wherever dpmed advises deleting runs or using another --out: the new folder draws its own DP count of the
# training set and its runs are new releases of the same patients, which no folder composes with the old ones.
RETRAIN_NOTE = ("(retrained DP-SGD runs, here or in another folder, are new releases of the same patients: if earlier "
                "runs' files were shared, their eps add up with the new ones', and no study folder accounts for both)")

# The arrays a run's cams.npz and ldp_examples.npz hold for the report's figures: a file without them cannot be drawn,
# and the next `dpmed run` writes it again (`dpmed.resumption.unreadable_outputs`).
CAM_KEYS = ("positions", "images", "cams")
EXAMPLE_KEYS = ("original", "perturbed")

# The modification time of every releasable file and folder (1980-01-01 UTC, the earliest a zip archive records;
# reproducible builds fix their files' times for the same reason). A file's real time would tell how long the DP-SGD
# runs written before it trained, which grows with what Poisson sampling drew (`dpmed.records.Timing`); tar and zip
# keep it.
RELEASE_TIME = 315532800

_log = logging.getLogger(__name__)


def open_owner_only(path: Path, mode: str = "w"):
    """``path`` opened for writing, created readable by its owner only (0600) from the first byte: a secret written
    first and chmod-ed after would be readable by others in between, whatever the umask."""
    return _create(path, mode, 0o600)


def _open_new(path: Path, mode: str = "w"):
    """``path`` opened for writing as a new file of the mode the umask gives (0644 under umask 022)."""
    return _create(path, mode, 0o666)


def _create(path: Path, mode: str, permissions: int) -> IO[Any]:
    """``path`` opened for writing as a new file of ``permissions`` (less the umask). Whatever stood there is
    removed first: O_CREAT keeps the mode of a file that already exists, and a link planted there (a temporary
    file's name is predictable) would be followed, writing the file it points to outside the output folder. O_EXCL
    follows no link, and fails where one is planted again in between. O_BINARY (Windows): a file os.open makes
    without it is in text mode, which writes each 0x0a byte of a checkpoint as 0x0d 0x0a."""
    path.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, permissions)
    return os.fdopen(fd, mode) if "b" in mode else os.fdopen(fd, mode, encoding="utf-8")


def file_in_the_way(folder: Path) -> Path | None:
    """The file that stands where ``folder`` or one of the folders above it should be, nearest the root first, or
    None: what a mkdir's bare "Not a directory" or "File exists" is about, for a message that names it."""
    return next((p for p in (*reversed(folder.parents), folder) if p.exists() and not p.is_dir()), None)


def link_to_nothing(folder: Path) -> str | None:
    """Where a symbolic link that points to nothing (a disk not mounted, a folder moved) stands in place of
    ``folder`` or one of the folders above it, nearest the root first: "LINK is a link to TARGET, which does not
    exist (...); mount or make it", for a message that names it (mkdir through it says only "File exists"); else
    None."""
    link = next((p for p in (*reversed(folder.parents), folder) if p.is_symlink() and not p.exists()), None)
    if link is None:
        return None
    return (f"{link} is a link to {link.parent / os.readlink(link)}, which does not exist (a disk not mounted, a "
            "folder moved); mount or make it")


def temporary_beside(path: Path) -> Path:
    """The temporary file an atomic write of ``path`` fills before renaming it: in the same folder, and one per
    process and host (``.NAME.PID@HOST.tmp``), so that a `dpmed report` while `dpmed run` writes the same report
    neither takes the other's half-written file nor loses its own; nor do two hosts writing one output folder on a
    network share, whose processes may have the same id (the decoded-image cache names its files by host too). A
    writer deletes it when the write fails; one killed meanwhile leaves it (`dpmed.workspace.stale_temporaries`,
    which reads the host after the "@", a character no host name holds)."""
    return path.with_name(f".{path.name}.{os.getpid()}@{socket.gethostname()}.tmp")


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes: the record names the starting weights by it, and `dpmed status` hashes
    model.weights with it to tell whether a run started from the file's contents now (here, not beside the loading of
    weights, so that status imports no torch)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomic(path: Path, write: Callable[[IO[bytes]], object], *, owner_only: bool = False) -> None:
    """``write`` fills a temporary file in the same folder (opened binary), which then replaces ``path``: readers
    see the old file or the whole new one. ``owner_only``: the file is created 0600 (`open_owner_only`), for a run's
    secrets and checkpoints. A failed write deletes the temporary file: half a checkpoint under a name of its own
    would hold its disk space for good.

    A failed write names no file (the buffered write or the close that flushes it: "No space left on device"): that
    OSError is raised again naming ``path``, so that the user reads what and where."""
    tmp = temporary_beside(path)
    try:
        with open_owner_only(tmp, "wb") if owner_only else _open_new(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_torch_atomic(path: Path, obj: object, *, owner_only: bool = False) -> None:
    """`write_atomic` of ``obj`` as torch.save writes it (a state dict, a checkpoint), serialised in memory first.

    torch.save straight into the open file fails two ways. An interrupt (Ctrl-C, SIGTERM: a KeyboardInterrupt or a
    worker's SystemExit, raised wherever it lands) that lands as torch.save finishes leaves its C++ zip writer
    unfinished, and that writer finishes the archive when it is freed: into the file the write has closed by then,
    which throws inside a C++ destructor and aborts the process (status -6, after dpmed had cleaned up). Into a
    buffer nobody closes it finishes harmlessly. And a full disk came out as "RuntimeError: [enforce fail at
    inline_container.cc] unexpected pos N vs M"; here it is the file write's own OSError. The cost is one copy of
    the file in memory while it is written."""
    import torch     # here: `dpmed privacy` reads folders and needs no torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    write_atomic(path, lambda f: f.write(buffer.getbuffer()), owner_only=owner_only)


def write_text_atomic(path: Path, text: str | bytes, *, owner_only: bool = False) -> None:
    """`write_atomic` of ``text`` (UTF-8; bytes as they are, e.g. a figure), with ``\\n`` line ends everywhere."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    write_atomic(path, lambda f: f.write(data), owner_only=owner_only)


def write_arrays_atomic(path: Path, arrays: Mapping[str, np.ndarray], *, owner_only: bool = False) -> None:
    """`write_atomic` of named arrays as one compressed .npz (``path`` as given: numpy adds no suffix to a file)."""
    # numpy >= 2.1 takes an array named allow_pickle for its flag (dpmed names none so); 2.0 has no such flag to give
    write_atomic(path, lambda f: np.savez_compressed(f, **arrays), owner_only=owner_only)  # type: ignore[arg-type]


def read_arrays(path: Path, required: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Every array of the .npz at ``path`` (`write_arrays_atomic`'s), read whole, objects never unpickled.
    FileNotFoundError where it is absent. ValueError naming the file where it is damaged or foreign, or lacks one of
    ``required``: numpy reads an archive's arrays lazily, and a truncated or altered one fails there with any of
    BadZipFile, zlib.error, EOFError, OSError, ValueError or RuntimeError (zipfile's NotImplementedError for an
    unknown compression method among them), which the report turns into a note on the one run, rather than failing
    for all of them."""
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, RuntimeError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"{path} cannot be read ({error_name(exc)}: {exc})") from exc
    missing = [k for k in required if k not in arrays]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)}: not a file of this dpmed")
    return arrays


def write_json_atomic(path: Path, payload: Mapping[str, Any], *, owner_only: bool = False) -> None:
    """JSON (strict: no NaN or inf) written atomically."""
    write_text_atomic(path, json.dumps(payload, indent=2, allow_nan=False, default=str), owner_only=owner_only)


def refuse_link(folder: Path) -> None:
    """FolderError where ``folder`` is a symbolic link. dpmed writes a run's model, predictions and record into
    ``runs/<run id>/`` and deletes what an unfinished attempt left there (`RunFolder.discard_attempt`,
    `dpmed.workspace.withdraw_leftovers`) and rewrites an older run.json (`dpmed.workspace.withdraw_public_timing`,
    also in `dpmed report`): through a link, a model.pt or run.json of the place it points to, outside
    the output folder, was deleted or overwritten."""
    if folder.is_symlink():
        raise FolderError(f"{folder} is a symbolic link ({os.readlink(folder)}): dpmed writes and deletes a run's "
                          "files there and follows no link for them, which would reach outside the output folder; "
                          "remove the link (a finished run's folder may be copied in its place), or use another "
                          "output folder (--out)")


def _refuse_planted(private: Path) -> None:
    """FolderError where ``private`` exists as a symbolic link or as another user's folder (see `make_private`)."""
    try:
        st = os.lstat(private)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise FolderError(f"{private} is a symbolic link ({os.readlink(private)}): dpmed keeps the privacy keys, "
                          "checkpoints and what no eps covers there and follows no link for them; remove the link, "
                          "or use another output folder (--out)")
    owner = getattr(os, "getuid", None)      # no owners to compare on Windows
    if owner is not None and st.st_uid != owner():
        raise FolderError(f"{private} belongs to another user (uid {st.st_uid}), who could read what dpmed keeps "
                          "there (the privacy keys, checkpoints and what no eps covers); remove it if you trust "
                          "nothing in it, or use another output folder (--out)")


@functools.lru_cache(maxsize=None)   # once per folder and process: every command makes the folder private again
def _tell_unrestricted(private: Path, mode: int) -> None:
    """Warn that the file system keeps ``private`` open to others: chmod is a no-op on Windows (its folders inherit
    their parent's access list), on exFAT and FAT drives and on some network shares."""
    if os.name == "nt":   # chmod sets only the read-only flag there, whatever the disk
        _log.warning("dpmed cannot make %s readable by you alone on Windows (it keeps the access list it inherits): "
                     "it holds the runs' privacy keys and checkpoints, the audit's results and the log. Restrict it "
                     "yourself, e.g. icacls \"%s\" /inheritance:r /grant:r \"%%USERNAME%%\":(OI)(CI)F", private,
                     private)
        return
    _log.warning("%s stays readable by other users of this machine (mode %o after chmod 700: a drive or share "
                 "without Unix permissions): the runs' privacy keys and checkpoints, the audit's results and the log "
                 "in it are readable by whoever can read the output folder. Use an output folder (--out) on a "
                 "disk that keeps permissions, or restrict the folder's access yourself", private, mode)


@dataclass(frozen=True)
class RunFolder:
    """One run's files: ``public`` (releasable) and ``private``."""

    run_id: str
    public: Path
    private: Path

    # releasable
    @property
    def record(self) -> Path:
        return self.public / "run.json"

    @property
    def model(self) -> Path:
        """The trained model's weights (a state dict): what a user may publish."""
        return self.public / "model.pt"

    @property
    def predictions(self) -> Path:
        return self.public / "predictions.npz"

    @property
    def examples(self) -> Path:
        return self.public / "ldp_examples.npz"

    @property
    def cams(self) -> Path:
        return self.public / "cams.npz"

    # private
    @property
    def error(self) -> Path:
        """A failed run's exception and traceback: private, since a message may carry a statistic of the training
        set (an out-of-memory error names the bytes a sampled batch needed, which grow with its realised size)."""
        return self.private / "error.json"

    @property
    def checkpoint(self) -> Path:
        return self.private / "checkpoint.pt"

    @property
    def privacy_key(self) -> Path:
        return self.private / "privacy_key"

    @property
    def statistics(self) -> Path:
        """Training-set statistics computed without noise (not covered by any eps)."""
        return self.private / "training_statistics.json"

    @property
    def timing(self) -> Path:
        """The run's wall times: a DP-SGD run's grow with what Poisson sampling drew (not covered by any eps)."""
        return self.private / "timing.json"

    @property
    def audit(self) -> Path:
        return self.private / "audit.json"

    @property
    def audit_scores(self) -> Path:
        return self.private / "audit_scores.npz"

    @property
    def attack_images(self) -> Path:
        """The reconstruction attack's best reconstructions beside the images they matched (patient images)."""
        return self.private / "attack_reconstructions.npz"

    @property
    def is_finished(self) -> bool:
        return self.record.is_file()

    def model_problem(self) -> str | None:
        """Why the run's model.pt cannot be evaluated again ("its model.pt is missing", "... cannot be read (...)"),
        or None where its archive reads whole. torch.save writes a zip archive whose entries carry CRC-32s, so a file
        cut short or with bytes overwritten is told here without torch (`dpmed status` and `dpmed report` import
        none); `dpmed run` loads it into the run's model before it counts on it (`dpmed.run.released_model`)."""
        try:
            with zipfile.ZipFile(self.model) as archive:
                bad = archive.testzip()
        except FileNotFoundError:
            return f"its {self.model.name} is missing"
        except (OSError, ValueError, EOFError, RuntimeError, NotImplementedError, zipfile.BadZipFile,
                zlib.error) as exc:
            return f"its {self.model.name} cannot be read ({error_name(exc)}: {exc})"
        return None if bad is None else f"its {self.model.name} cannot be read (entry {bad} is damaged)"

    def recovery(self, problem: str) -> str:
        """What to do about ``problem`` with one of the run's evaluation files (its predictions, CAMs or examples):
        the next `dpmed run` evaluates the run again from its model, spending no privacy, where that model reads;
        where it does not either, a copy of the released model.pt (shared, backed up) recovers it the same way, and
        only without one is retraining, a second release of its patients, left."""
        model = self.model_problem()
        if model is None:
            return (f"{problem}: the next `dpmed run` of the study evaluates it again from its model (not retrained: "
                    "no privacy spent)")
        return (f"{problem}, and {model}, so it cannot be evaluated again: restore {self.model} from a copy of it (the "
                "next `dpmed run` then evaluates the run again, spending no privacy), or delete "
                f"{self.public} and run the study again to retrain it {RETRAIN_NOTE}")

    def unreleased(self, path: Path) -> Path:
        """Where the run writes the releasable file ``path`` (its model, predictions, CAMs, examples) until it
        finishes: its private folder (module docstring)."""
        return self.private / "unreleased" / path.name

    @property
    def released_files(self) -> tuple[Path, ...]:
        return (self.model, self.predictions, self.examples, self.cams)

    def release(self) -> None:
        """Move the run's written releasable files beside run.json; called just before run.json is written. Staged
        owner-only (what no eps covers yet), each takes the mode a file made in the shareable folder has (the umask's,
        as the folder's own: 0644 under umask 022)."""
        shared = self.public.stat().st_mode & 0o666
        for path in self.released_files:
            staged = self.unreleased(path)
            if staged.is_file():
                os.replace(staged, path)
                path.chmod(shared)
        with contextlib.suppress(OSError):      # empty now, and left behind it puzzled users; kept if not empty
            (self.private / "unreleased").rmdir()

    def take_back(self) -> None:
        """Undo :meth:`release` where run.json could not be written after it (a full disk at that last write): the
        files go back to the private folder, so that no model lies in the shareable one beside no record; the run's
        next attempt continues from its checkpoint and releases them then. A renaming, which needs no space."""
        if self.is_finished:
            return
        staged = self.private / "unreleased"
        staged.mkdir(mode=0o700, exist_ok=True)
        for path in self.released_files:
            if path.is_file():
                os.replace(path, self.unreleased(path))
                self.unreleased(path).chmod(0o600)

    def leftovers(self) -> list[Path]:
        """Releasable files of an unfinished run (no run.json): left by a dpmed that wrote them in place, or by a
        stop between `release` and run.json. No eps covers them."""
        return [] if self.is_finished else [p for p in self.released_files if p.is_file()]

    def make(self) -> None:
        """The run's folders; its private ones owner-only (:meth:`make_private`). A link in place of ``runs/`` or
        of the run's folder is refused (`refuse_link`)."""
        refuse_link(self.public.parent)
        refuse_link(self.public)
        self.public.mkdir(parents=True, exist_ok=True)
        self.make_private()

    def make_private(self) -> None:
        """The run's private folders, owner-only, as everything in ``private/`` (its 0700 is the one thing between
        them and other users otherwise, and a `chmod -R g+rX` of the results is common on shared servers). Alone
        where a run only records why it failed: the shareable ``runs/`` may be what could not be written."""
        study_private = self.private.parent.parent       # made here where a run comes first: 0700, not the umask's
        study_private.mkdir(mode=0o700, parents=True, exist_ok=True)
        for folder in (self.private.parent, self.private, self.private / "unreleased"):
            folder.mkdir(mode=0o700, exist_ok=True)

    def discard_attempt(self) -> None:
        """Delete what an unfinished earlier attempt of this run left: its checkpoint and key (made for other
        settings or data, they cannot continue this training) and its public files, so that no model of that
        attempt lies beside this one's without a record, and nothing of it is mistaken for this run's."""
        self.discard_secrets()
        self.discard_unreleased()
        for path in self.released_files:
            path.unlink(missing_ok=True)

    def discard_unreleased(self) -> None:
        """Delete what earlier attempts wrote for release and did not release (an attempt writes its own again, or
        writes none where its settings ask for none: a CAM file of an attempt with explanations on must not be
        released beside the record of one with them off)."""
        for path in self.released_files:
            self.unreleased(path).unlink(missing_ok=True)

    def discard_secrets(self) -> None:
        """Delete the checkpoint and the privacy key once the run is finished: a finished run is never resumed, and
        with them gone no file left on disk can regenerate its noise."""
        self.checkpoint.unlink(missing_ok=True)
        self.privacy_key.unlink(missing_ok=True)


@dataclass(frozen=True)
class StudyFolder:
    """``<out>/<study name>/`` and every study-level file in it."""

    root: Path

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def private(self) -> Path:
        return self.root / "private"

    @property
    def resolved_study(self) -> Path:
        return self.root / "study.yaml"

    @property
    def results(self) -> Path:
        return self.root / "results.csv"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def comparisons(self) -> Path:
        return self.root / "comparisons.json"

    @property
    def private_report(self) -> Path:
        return self.private / "report.html"

    @property
    def released_sizes(self) -> Path:
        """The DP counts of the training set drawn for this study (`dpmed.released_size`), kept so that reruns
        plan from the same draw; with the data's fingerprint beside each, so private."""
        return self.private / "released_sizes.json"

    @property
    def data_fingerprint(self) -> Path:
        """sha256 of the data the finished runs trained on: a statistic of the training images, so private."""
        return self.private / "data_fingerprint"

    @property
    def attributes_fingerprint(self) -> Path:
        """sha256 of what else the finished runs were made with (sex, age, lesion masks, normalisation): private."""
        return self.private / "attributes_fingerprint"

    @property
    def log(self) -> Path:
        """The command line's log of the study: private, as it holds what no eps covers (the exact training-set size,
        the DP-SGD runs' wall times, audit results that depend on the secret canary bits)."""
        return self.private / "dpmed.log"

    @property
    def lock(self) -> Path:
        """Exists while a `dpmed run` works in the folder; names its process (`dpmed.lock`)."""
        return self.private / "lock"

    def make_private(self) -> None:
        """Create ``private/`` readable by its owner only (0700; an older folder's is narrowed): it holds the runs'
        privacy keys, checkpoints and the statistics no eps covers, which other users of the machine must not read.
        What dpmed writes in it is owner-only too (0600 files, 0700 folders), so that a `chmod -R g+rX` of the
        results does not open it until the next command narrows the folder again.

        A new study folder is made 0700 too: its shareable files still hold the test patients' ids, sex and age and
        some test images, which no eps covers; sharing them is the owner's choice (chmod), not every local user's
        default. An existing ``private/`` that is a link, or another user's, is refused: whoever could write the
        study folder could have planted it there to receive what dpmed keeps private."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)   # its parents as the umask makes them
        _refuse_planted(self.private)
        self.private.mkdir(mode=0o700, exist_ok=True)
        self.private.chmod(0o700)
        mode = self.private.stat().st_mode & 0o777
        if mode & 0o077:
            _tell_unrestricted(self.private.absolute(), mode)

    def settle_times(self) -> None:
        """Set every releasable file's and folder's access and modification times to `RELEASE_TIME` (``private/``
        keeps its own: its log and timing files hold the wall times anyway). Called whenever a command leaves the
        folder (`dpmed.workspace.claim_folder`, ``dpmed report``), and by a study after each finished run (which a
        kill -9 of the command would otherwise leave with its wall times). A file that another process removes
        meanwhile is skipped."""
        if not self.root.is_dir():
            return
        # a link's own times where the platform can set them (not Windows): never those of what it points to
        own_times = os.utime in os.supports_follow_symlinks
        for top, folders, files in os.walk(self.root):
            if Path(top) == self.root:
                folders[:] = [f for f in folders if f != self.private.name]
            for name in [*folders, *files]:
                path = Path(top) / name
                with contextlib.suppress(FileNotFoundError):
                    if own_times:
                        os.utime(path, (RELEASE_TIME, RELEASE_TIME), follow_symlinks=False)
                    elif not path.is_symlink():
                        os.utime(path, (RELEASE_TIME, RELEASE_TIME))
        os.utime(self.root, (RELEASE_TIME, RELEASE_TIME))

    def run(self, run_id: str) -> RunFolder:
        return RunFolder(run_id, self.runs / run_id, self.private / "runs" / run_id)

    def interrupted_releases(self) -> dict[str, list[Path]]:
        """Each run whose release a stop cut short (Ray's force-cancel, kill -9, a power loss between `release` and
        run.json), with its releasable files in runs/<id>/ that no record accounts for (`RunFolder.leftovers`),
        listed by the study file or not. The next `dpmed run` deletes them (`dpmed.workspace.withdraw_leftovers`);
        until then `dpmed status` and `dpmed report` tell them to whoever is about to share runs/."""
        if not self.runs.is_dir():
            return {}
        runs = (self.run(p.name) for p in sorted(self.runs.iterdir()) if p.is_dir())
        return {run.public.name: left for run in runs if (left := run.leftovers())}

    def finished_run_ids(self) -> list[str]:
        """Every run with a run.json in this folder, whether or not the current study file still lists it."""
        if not self.runs.is_dir():
            return []
        return sorted(p.parent.name for p in self.runs.glob("*/run.json"))
