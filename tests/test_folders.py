"""One module knows the output folder: releasable files apart from private ones, and atomic writes."""

from __future__ import annotations

import json

from dpmed.folders import StudyFolder, write_json_atomic


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


def test_the_private_folder_is_its_owners_alone(tmp_path):
    folder = StudyFolder(tmp_path / "s")
    folder.make_private()
    assert folder.private.stat().st_mode & 0o777 == 0o700
    folder.private.chmod(0o755)                      # a folder made by an older dpmed, or by hand
    folder.make_private()
    assert folder.private.stat().st_mode & 0o777 == 0o700



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


def test_a_failed_atomic_write_leaves_no_half_written_file_and_a_killed_writers_is_found(tmp_path, monkeypatch):
    """With one temporary name per process, no later write replaces a temporary file left behind: a writer deletes
    its own when the write fails, and those of killed writers are found for deletion (`dpmed run` deletes them)."""
    import errno
    import os
    from pathlib import Path

    import pytest

    from dpmed.folders import write_text_atomic
    from dpmed.workspace import stale_temporaries

    def full(self, text, encoding=None):
        with open(self, "w", encoding=encoding) as f:
            f.write(text[:5])
        raise OSError(errno.ENOSPC, "No space left on device")
    with monkeypatch.context() as patch:
        patch.setattr(Path, "write_text", full)
        with pytest.raises(OSError):
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
