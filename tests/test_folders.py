"""One module knows the output folder: releasable files apart from private ones, and atomic writes."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import pytest

from dpmed.errors import FolderError
from dpmed.folders import RELEASE_TIME, StudyFolder, write_json_atomic


def test_private_files_live_under_private_and_releasable_ones_do_not(tmp_path):
    run = StudyFolder(tmp_path / "s").run("dp_eps1_seed0")
    private = (run.checkpoint, run.privacy_key, run.statistics, run.audit, run.audit_scores, run.error, run.timing)
    releasable = (run.record, run.model, run.predictions, run.examples, run.cams)
    assert all("private" in p.relative_to(tmp_path / "s").parts for p in private)
    assert not any("private" in p.relative_to(tmp_path / "s").parts for p in releasable)


def test_a_finished_run_forgets_its_secrets(tmp_path):
    folder = StudyFolder(tmp_path / "s")
    run = folder.run("a_seed0")
    run.make()
    run.checkpoint.write_bytes(b"state")
    run.privacy_key.write_text("00" * 32)
    write_json_atomic(run.record, {"run_id": "a_seed0"})
    run.discard_secrets()
    assert run.is_finished and not run.checkpoint.exists() and not run.privacy_key.exists()
    assert folder.finished_run_ids() == ["a_seed0"]
    assert json.loads(run.record.read_text()) == {"run_id": "a_seed0"}
    assert not list(run.public.glob(".*.tmp"))          # the atomic write left no temporary file


def test_discarding_an_attempt_leaves_nothing_of_it_shared_staged_or_secret(tmp_path):
    """An attempt made for other settings or data: its key cannot serve, and its files must not lie beside the
    next attempt's record."""
    run = StudyFolder(tmp_path / "s").run("a_seed0")
    run.make()
    for path in run.released_files:
        path.write_bytes(b"shared")
        run.unreleased(path).write_bytes(b"staged")
    run.checkpoint.write_bytes(b"state")
    run.privacy_key.write_text("00" * 32)
    run.discard_attempt()
    left = [p for p in (*run.released_files, *map(run.unreleased, run.released_files), run.checkpoint,
                        run.privacy_key) if p.exists()]
    assert left == []


def test_the_private_folder_is_its_owners_alone(tmp_path):
    folder = StudyFolder(tmp_path / "s")
    folder.make_private()
    assert folder.private.stat().st_mode & 0o777 == 0o700
    folder.private.chmod(0o755)                      # a folder made by an older dpmed, or by hand
    folder.make_private()
    assert folder.private.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_a_new_study_folder_is_its_owners_alone_and_an_existing_one_keeps_its_mode(tmp_path):
    """Its shareable files hold the test patients' ids, sex and age and some test images (no eps covers them): under
    the usual umask 022 every local user of a hospital's server could read them."""
    folder = StudyFolder(tmp_path / "results" / "s")
    folder.make_private()
    assert folder.root.stat().st_mode & 0o777 == 0o700
    folder.root.chmod(0o750)                          # shared on purpose with a group
    folder.make_private()
    assert folder.root.stat().st_mode & 0o777 == 0o750


@pytest.mark.skipif(os.name == "nt", reason="links need privileges on Windows")
def test_a_private_folder_planted_as_a_link_or_by_another_user_is_refused(tmp_path, monkeypatch):
    """Someone who can write the output root could make private/ a link to a folder of theirs, and receive the log,
    the training statistics and the private report (as root, dpmed followed it and wrote there)."""
    loot = tmp_path / "loot"
    loot.mkdir()
    loot.chmod(0o755)                                # whatever the umask
    folder = StudyFolder(tmp_path / "s")
    folder.root.mkdir()
    folder.private.symlink_to(loot)
    with pytest.raises(FolderError, match=r"private is a symbolic link \(.*loot\): dpmed keeps the privacy keys"):
        folder.make_private()
    assert loot.stat().st_mode & 0o777 == 0o755 and not list(loot.iterdir())     # neither narrowed nor written
    folder.private.unlink()
    folder.make_private()
    monkeypatch.setattr(os, "getuid", lambda: folder.private.stat().st_uid + 1)   # as another user sees it
    with pytest.raises(FolderError, match=r"belongs to another user \(uid \d+\), who could read"):
        folder.make_private()


def test_a_file_system_that_ignores_chmod_is_told_once_not_trusted_silently(tmp_path, monkeypatch, caplog):
    """Windows (folders inherit their parent's access list), FAT and exFAT drives, some shares: chmod 700 changes
    nothing there, and the privacy keys in private/ stayed readable by others without a word."""
    folder = StudyFolder(tmp_path / "s")
    folder.make_private()
    assert not caplog.records                          # a file system that keeps permissions: nothing to say
    folder.private.chmod(0o755)
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        folder.make_private()
        folder.make_private()
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "stays readable by other users of this machine (mode 755 after chmod 700" in caplog.text
    assert str(folder.private) in caplog.text and "privacy keys" in caplog.text


def test_release_times_never_touch_what_a_link_points_to_even_where_links_have_no_times_of_their_own(
        tmp_path, monkeypatch):
    """Windows sets no link's own times (os.utime(follow_symlinks=False) raises NotImplementedError), which ended every
    dpmed run and dpmed report there with an internal error; where links have times, theirs are set."""
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not dpmed's")
    folder = StudyFolder(tmp_path / "s")
    folder.make_private()
    (folder.root / "results.csv").write_text("a\n")
    (folder.root / "link").symlink_to(outside)
    before = outside.stat().st_mtime
    real = os.utime

    def windows_utime(path, times=None, *, follow_symlinks=True):
        if not follow_symlinks:
            raise NotImplementedError("utime: follow_symlinks unavailable on this platform")
        real(path, times)
    monkeypatch.setattr(os, "utime", windows_utime)
    monkeypatch.setattr(os, "supports_follow_symlinks", set())
    folder.settle_times()
    assert (folder.root / "results.csv").stat().st_mtime == RELEASE_TIME == folder.root.stat().st_mtime
    assert outside.stat().st_mtime == before
    monkeypatch.undo()
    folder.settle_times()
    assert os.lstat(folder.root / "link").st_mtime == RELEASE_TIME and outside.stat().st_mtime == before


def test_two_processes_writing_one_file_atomically_do_not_take_each_others_temporary_file(tmp_path, monkeypatch):
    """`dpmed report` may write the report while `dpmed run` writes it too. Here another process writes the same
    file from start to finish while this one is between filling its temporary file and renaming it: before, both
    used ".report.html.tmp", the other renamed this one's half-written file away, and this rename failed."""
    import os
    import subprocess
    import sys

    import dpmed.folders

    path = tmp_path / "report.html"
    real = os.replace

    def other_writer_first(src, dst):
        subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from dpmed.folders import "
                        "write_text_atomic; write_text_atomic(Path(sys.argv[1]), 'other')", str(path)], check=True)
        real(src, dst)
    monkeypatch.setattr(dpmed.folders.os, "replace", other_writer_first)
    dpmed.folders.write_text_atomic(path, "mine")
    assert path.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_two_hosts_with_one_process_id_writing_one_shared_folder_do_not_take_each_others_temporary_file(
        tmp_path, monkeypatch):
    """Two hosts writing one output folder on a network share can run their writers under the same process id.
    Here the other host writes the same file from start to finish while this one is between filling its temporary
    file and renaming it: before, both used ".report.html.<pid>.tmp", the other's write deleted this one's
    half-written file and renamed its own away, and this rename failed."""
    import os
    import socket

    import dpmed.folders

    path = tmp_path / "report.html"
    real = os.replace
    monkeypatch.setattr(socket, "gethostname", lambda: "node1")

    def other_host_first(src, dst):
        with monkeypatch.context() as other:
            other.setattr(socket, "gethostname", lambda: "node2")
            other.setattr(os, "replace", real)
            dpmed.folders.write_text_atomic(path, "other")
        real(src, dst)
    monkeypatch.setattr(os, "replace", other_host_first)
    dpmed.folders.write_text_atomic(path, "mine")
    assert path.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_a_failed_atomic_write_leaves_no_half_written_file_and_a_killed_writers_is_found(tmp_path, monkeypatch,
                                                                                         disk_with_room):
    """With one temporary name per process, no later write replaces a temporary file left behind: a writer deletes
    its own when the write fails, and those of killed writers are found for deletion (`dpmed run` deletes them)."""
    import os

    import pytest

    import dpmed.folders
    from dpmed.folders import write_text_atomic
    from dpmed.workspace import stale_temporaries

    with monkeypatch.context() as patch:
        patch.setattr(dpmed.folders, "_open_new", disk_with_room(dpmed.folders._open_new, 5))
        with pytest.raises(OSError, match="No space left on device"):
            write_text_atomic(tmp_path / "comparisons.json", "{}" * 100)
    assert list(tmp_path.iterdir()) == []
    killed = tmp_path / "runs" / "a_seed0" / f".run.json.{2 ** 22 + 12345}.tmp"     # no such process
    killed.parent.mkdir(parents=True)
    killed.write_text('{"run_id": "a_se')
    mine = tmp_path / f".report.html.{os.getpid()}.tmp"
    mine.write_text("<html>")
    assert stale_temporaries(tmp_path) == [killed]


def test_release_moves_every_staged_file_beside_the_record(tmp_path):
    """A run stages its model, predictions, CAMs and local-DP examples privately; release() must move each one (a
    file it forgot would vanish from the study: the report's CAM grid reads cams.npz beside run.json)."""
    run = StudyFolder(tmp_path / "s").run("a_seed0")
    run.make()
    for i, path in enumerate(run.released_files):
        run.unreleased(path).parent.mkdir(parents=True, exist_ok=True)
        run.unreleased(path).write_text(str(i))
    assert not any(p.exists() for p in run.released_files)
    run.release()
    assert [p.read_text() for p in run.released_files] == [str(i) for i in range(len(run.released_files))]
    assert {p.name for p in run.released_files} == {"model.pt", "predictions.npz", "cams.npz", "ldp_examples.npz"}
    assert not any(run.unreleased(p).exists() for p in run.released_files)
    assert not run.unreleased(run.model).parent.exists() and run.private.is_dir()   # no empty folder left behind


def test_a_torch_save_that_fills_the_disk_is_told_as_a_full_disk_naming_the_file_and_keeps_the_old_one(
        tmp_path, monkeypatch, disk_with_room):
    """Before: torch.save's zip writer turned the full disk into "RuntimeError: [enforce fail at
    inline_container.cc:672] . unexpected pos 440832 vs 440724", which a failed run printed as its reason (seen on a
    1 MiB tmpfs), and the half-written checkpoint stayed on the full disk."""
    import errno

    import pytest
    import torch

    import dpmed.folders
    from dpmed.folders import write_torch_atomic

    path = tmp_path / "checkpoint.pt"
    torch.save({"w": torch.ones(3)}, path)
    with monkeypatch.context() as patch:
        patch.setattr(dpmed.folders, "open_owner_only", disk_with_room(dpmed.folders.open_owner_only, 10_000))
        with pytest.raises(OSError) as failed:
            write_torch_atomic(path, {"w": torch.zeros(100_000)}, owner_only=True)
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(path)
    assert str(failed.value) == f"[Errno 28] No space left on device: '{path}'"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]
    assert torch.equal(torch.load(path)["w"], torch.ones(3))       # the old file, whole


def test_an_atomic_write_names_its_file_in_an_error_that_names_none_and_passes_other_errors_as_they_are(tmp_path):
    import errno

    import pytest

    from dpmed.folders import write_atomic

    def flush_fails(f):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")        # a write or the flush at close: no file name
    with pytest.raises(OSError, match=r"\[Errno \d+\] Disk quota exceeded: '.*report\.html'$"):
        write_atomic(tmp_path / "report.html", flush_fails)

    def bug(f):
        raise RuntimeError("not a write")
    with pytest.raises(RuntimeError, match="^not a write$"):
        write_atomic(tmp_path / "report.html", bug)
    assert list(tmp_path.iterdir()) == []


def test_arrays_are_written_whole_under_the_name_given_or_not_at_all(tmp_path, monkeypatch, disk_with_room):
    """Before, a run's CAMs, local-DP examples, audit scores and attack images went straight to their file: a full
    disk failed the run with "No space left on device" naming no file and left half an archive under the real name."""
    import errno

    import numpy as np
    import pytest

    import dpmed.folders
    from dpmed.folders import write_arrays_atomic

    arrays = {"cam": np.arange(12.0).reshape(3, 4), "ids": np.array(["p1", "p2"])}
    write_arrays_atomic(tmp_path / "cams.npz", arrays)
    write_arrays_atomic(tmp_path / "scores", arrays)                   # numpy would add .npz to a path
    for name in ("cams.npz", "scores"):
        with np.load(tmp_path / name, allow_pickle=False) as f:
            assert sorted(f.files) == ["cam", "ids"]
            assert np.array_equal(f["cam"], arrays["cam"]) and list(f["ids"]) == ["p1", "p2"]
    with monkeypatch.context() as patch:
        patch.setattr(dpmed.folders, "_open_new", disk_with_room(dpmed.folders._open_new, 100))
        with pytest.raises(OSError) as failed:
            write_arrays_atomic(tmp_path / "cams.npz", {"cam": np.random.default_rng(0).random(10_000)})
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(tmp_path / "cams.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cams.npz", "scores"]
    with np.load(tmp_path / "cams.npz", allow_pickle=False) as f:               # the old file, whole
        assert np.array_equal(f["cam"], arrays["cam"])


def test_a_damaged_array_archive_is_refused_naming_the_file_whatever_the_damage(tmp_path):
    """numpy reads an archive's arrays lazily, and a damaged one fails there with BadZipFile, zlib.error, EOFError,
    OSError or ValueError; before, `dpmed report` caught a few of them for predictions only, and a flipped byte in a
    run's cams.npz or predictions.npz (zlib.error) ended it in "internal error". Every truncation and every byte
    changed (inverted, or one added) either reads back the arrays as written or is one ValueError naming the file:
    all of them, since a few positions alone (the compression method's) raise NotImplementedError."""
    import numpy as np
    import pytest

    from dpmed.folders import read_arrays, write_arrays_atomic

    arrays = {"cams": np.random.default_rng(0).random((2, 4, 4)), "positions": np.arange(2)}
    good = tmp_path / "good.npz"
    write_arrays_atomic(good, arrays)
    data = good.read_bytes()
    damaged = tmp_path / "cams.npz"
    refused = 0
    for start in range(len(data)):
        for changed in (data[:start], data[:start] + bytes([data[start] ^ 0xFF]) + data[start + 1:],
                        data[:start] + bytes([(data[start] + 1) % 256]) + data[start + 1:]):
            damaged.write_bytes(changed)
            try:
                read = read_arrays(damaged, ("cams", "positions"))
            except ValueError as exc:
                assert str(exc).startswith(f"{damaged} "), exc
                refused += 1
            else:
                assert read.keys() == arrays.keys() and all(np.array_equal(read[k], arrays[k]) for k in arrays)
    assert refused > 2 * len(data)

    with pytest.raises(FileNotFoundError, match=r"absent\.npz"):
        read_arrays(tmp_path / "absent.npz")
    np.savez(damaged, cams=np.array([{"a": 1}], dtype=object))         # never unpickled
    with pytest.raises(ValueError, match=rf"^{damaged} cannot be read \(ValueError: Object arrays"):
        read_arrays(damaged)
    with pytest.raises(ValueError, match=rf"^{good} has no images, masks: not a file of this dpmed$"):
        read_arrays(good, ("cams", "images", "masks"))


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_owner_only_files_are_0600_even_where_a_readable_file_stood_and_others_keep_the_umask(tmp_path, umask_022):
    """A run's secrets and checkpoints: a file opened over an existing one kept that file's mode (O_CREAT), so a key
    rewritten over a 0644 file stayed readable by every local user."""
    from dpmed.folders import open_owner_only, write_text_atomic

    key = tmp_path / "privacy_key"
    key.write_text("old")
    key.chmod(0o644)
    with open_owner_only(key) as f:
        f.write("00" * 32)
    assert key.stat().st_mode & 0o777 == 0o600 and key.read_text() == "00" * 32
    checkpoint = tmp_path / "timing.json"
    checkpoint.write_text("{}")
    checkpoint.chmod(0o644)
    write_text_atomic(checkpoint, "[]", owner_only=True)
    assert checkpoint.stat().st_mode & 0o777 == 0o600 and checkpoint.read_text() == "[]"
    write_text_atomic(tmp_path / "results.csv", "a\n")                        # releasable: as the umask makes it
    assert (tmp_path / "results.csv").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["privacy_key", "results.csv", "timing.json"]


def test_an_atomic_write_stopped_by_ctrl_c_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path):
    """An interrupt is no Exception: a write stopped by it left its half-written temporary file on disk."""
    from dpmed.folders import write_atomic

    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"old, whole")

    def stopped(f):
        f.write(b"half")
        raise KeyboardInterrupt
    for owner_only in (False, True):
        with pytest.raises(KeyboardInterrupt):
            write_atomic(path, stopped, owner_only=owner_only)
        assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"] and path.read_bytes() == b"old, whole"


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_a_run_s_private_folders_are_made_owner_only(tmp_path, umask_022):
    """private/runs/<id>/ and its staging folder hold a run's key, checkpoint and unreleased model: made with the
    umask's mode they were readable by others until the study folder's private/ was narrowed."""
    run = StudyFolder(tmp_path / "s").run("a_seed0")
    run.make()
    assert run.public.stat().st_mode & 0o777 == 0o755
    for folder in (run.private.parent.parent, run.private.parent, run.private, run.unreleased(run.model).parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder        # the study's private/ too, made here first


def test_a_release_that_no_record_follows_is_taken_back_and_a_finished_run_s_is_not(tmp_path):
    """Where run.json could not be written after `release`, its files go back to the private folder; where run.json
    exists, they are the finished run's released files and stay. Releasable files beside no record are leftovers
    (no eps covers them), a finished run's never."""
    run = StudyFolder(tmp_path / "s").run("a_seed0")
    run.make()
    for path in (run.model, run.cams):
        run.unreleased(path).write_text(path.name)
    run.release()
    assert run.leftovers() == [run.model, run.cams]
    run.take_back()
    assert not any(p.exists() for p in run.released_files) and run.leftovers() == []
    assert [run.unreleased(p).read_text() for p in (run.model, run.cams)] == ["model.pt", "cams.npz"]
    run.release()
    write_json_atomic(run.record, {"run_id": "a_seed0"})
    run.take_back()
    assert run.model.read_text() == "model.pt" and run.cams.read_text() == "cams.npz" and run.leftovers() == []


@pytest.mark.skipif(os.name == "nt", reason="Windows keeps no Unix permissions")
def test_a_released_file_is_as_shareable_as_the_folder_makes_its_files_and_one_taken_back_is_owner_only(
        tmp_path, umask_022):
    """Staged owner-only, a run's model is released with the mode the umask gives a shareable file, and made its
    owner's alone again where its release is taken back into the private folder."""
    from dpmed.folders import write_text_atomic

    run = StudyFolder(tmp_path / "s").run("a_seed0")
    run.make()
    write_text_atomic(run.unreleased(run.model), "weights", owner_only=True)
    run.release()
    assert run.model.stat().st_mode & 0o777 == 0o644
    run.take_back()
    assert run.unreleased(run.model).stat().st_mode & 0o777 == 0o600 and not run.model.exists()


def test_finished_runs_are_those_with_a_run_json_in_name_order(tmp_path):
    folder = StudyFolder(tmp_path / "s")
    assert folder.finished_run_ids() == []
    for run_id in ("b_seed0", "a_seed1", "c_seed0"):
        folder.run(run_id).make()
    for run_id in ("c_seed0", "a_seed1"):
        write_json_atomic(folder.run(run_id).record, {"run_id": run_id})
    (folder.runs / "b_seed0" / "model.pt").write_bytes(b"left over")
    assert folder.finished_run_ids() == ["a_seed1", "c_seed0"]


def test_release_times_leave_the_private_folder_s_own(tmp_path):
    """Its log and timing files hold the wall times anyway, and its files' times tell the user when a run stopped."""
    folder = StudyFolder(tmp_path / "s")
    folder.make_private()
    log = folder.log
    log.write_text("started")
    (folder.root / "results.csv").write_text("a\n")
    before = log.stat().st_mtime
    folder.settle_times()
    assert (folder.root / "results.csv").stat().st_mtime == RELEASE_TIME == folder.root.stat().st_mtime
    assert log.stat().st_mtime == before != RELEASE_TIME and folder.private.stat().st_mtime != RELEASE_TIME


def test_json_is_written_strict_or_not_at_all(tmp_path):
    """NaN and Infinity are no JSON: a file holding them is refused by other tools' strict parsers, so a payload with
    one fails the write, and the file written before stays whole."""
    import math

    path = tmp_path / "comparisons.json"
    write_json_atomic(path, {"auroc": 0.5})
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            write_json_atomic(path, {"auroc": bad})
    assert json.loads(path.read_text()) == {"auroc": 0.5} and [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize("mode", [0o704, 0o750])
def test_a_private_folder_left_open_to_others_or_to_the_group_alone_is_told(tmp_path, monkeypatch, caplog, mode):
    folder = StudyFolder(tmp_path / "s")
    folder.make_private()
    folder.private.chmod(mode)
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    with caplog.at_level(logging.WARNING, logger="dpmed"):
        folder.make_private()
    assert f"stays readable by other users of this machine (mode {mode:o} after chmod 700" in caplog.text


def test_an_atomic_write_follows_no_link_planted_at_its_temporary_name(tmp_path):
    """The temporary file's name is predictable (the process id): a link planted there by whoever can write the
    folder was followed, and the write truncated and filled the file it pointed to, anywhere the user can write."""
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("kept")
    folder = tmp_path / "s"
    folder.mkdir()
    report = folder / "report.html"
    from dpmed.folders import temporary_beside, write_text_atomic
    temporary_beside(report).symlink_to(elsewhere)
    write_text_atomic(report, "the report")
    assert elsewhere.read_text() == "kept"
    assert report.read_text() == "the report" and not report.is_symlink()
    assert not temporary_beside(report).exists() and not temporary_beside(report).is_symlink()


class _TextModeFile(io.RawIOBase):
    """What a write through a Windows C runtime file opened in text mode does: every ``\\n`` byte becomes ``\\r\\n``."""

    def __init__(self, raw: io.RawIOBase) -> None:
        self.raw = raw

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.raw.write(bytes(data).replace(b"\n", b"\r\n"))
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


def test_owner_only_files_keep_their_bytes_where_os_open_defaults_to_text_mode(tmp_path, monkeypatch):
    """Windows: a file os.open makes without O_BINARY is in text mode, whose writes turn each 0x0a byte into 0x0d 0x0a,
    so a checkpoint, a privacy key or the decoded-image cache written owner-only came back damaged (torch.load then
    fails). Emulated here: os.open and os.fdopen behave as on Windows, with O_BINARY a flag of its own."""
    from dpmed.folders import open_owner_only, write_atomic, write_text_atomic

    binary, text_mode = 0x10000000, set()
    real_open, real_fdopen = os.open, os.fdopen

    def windows_open(path, flags, *args):
        fd = real_open(path, flags & ~binary, *args)
        if not flags & binary:
            text_mode.add(fd)
        return fd

    def windows_fdopen(fd, mode="r", *args, **kwargs):
        if fd not in text_mode:
            return real_fdopen(fd, mode, *args, **kwargs)
        raw = _TextModeFile(real_fdopen(fd, "wb", buffering=0))
        return raw if "b" in mode else io.TextIOWrapper(raw, newline="", **kwargs)

    monkeypatch.setattr(os, "O_BINARY", binary, raising=False)
    monkeypatch.setattr(os, "open", windows_open)
    monkeypatch.setattr(os, "fdopen", windows_fdopen)
    data = bytes(range(256)) * 4
    write_atomic(tmp_path / "checkpoint.pt", lambda f: f.write(data), owner_only=True)
    write_text_atomic(tmp_path / "timing.json", "[1,\n2]\n", owner_only=True)
    with open_owner_only(tmp_path / "cache.npy", "wb") as f:
        f.write(data)
    assert (tmp_path / "checkpoint.pt").read_bytes() == data and (tmp_path / "cache.npy").read_bytes() == data
    assert (tmp_path / "timing.json").read_bytes() == b"[1,\n2]\n"
