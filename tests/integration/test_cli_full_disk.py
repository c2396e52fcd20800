"""A full disk under `dpmed run` and `dpmed report`: one line that names the folder and says what to do, never
"internal error ... please report this". A write that runs out of space raises ENOSPC naming no file, and the
failed run's error.json cannot be written either; simulated here by raising it, not by filling a real disk."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import dpmed.executors
import dpmed.outputs
import dpmed.study
from dpmed.cli import main


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))     # as a write's ENOSPC: no file name


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def _error_line(err: str) -> str:
    """The one error line of ``err`` (after the progress lines `dpmed run` logs first), with no traceback."""
    assert "Traceback" not in err and "internal error" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("dpmed: error: ")]
    assert len(errors) == 1 and err.strip().endswith(errors[0]), err
    return errors[0]


def test_a_run_failed_by_a_full_disk_is_reported_though_its_error_file_cannot_be_written(tiny_text, tmp_path,
                                                                                          monkeypatch, capsys):
    """Before: writing the failed run's error.json raised ENOSPC again, which nothing caught."""
    monkeypatch.setattr(dpmed.executors, "run_one", _full)
    monkeypatch.setattr(dpmed.executors, "write_json_atomic", _full)
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    for run_id in ("base_seed0", "dp_eps8_C1_seed0"):
        assert (f"FAILED {run_id}: OSError: [Errno 28] No space left on device (no traceback kept: its error file "
                "could not be written)") in err
        assert f"{run_id}: could not write its error file" in err
    assert "2 run(s) failed; fix the cause" in err


def test_a_run_whose_shareable_folder_cannot_be_made_keeps_its_failure_in_the_private_one(tiny_text, tmp_path,
                                                                                          monkeypatch, capsys):
    """runs/ not writable (another user's, or immutable) while private/ is: before, recording the failure made the
    shareable runs/<id> too, failed again, and the run was left without an error file (shown as pending, not
    failed)."""
    from dpmed.folders import RunFolder, StudyFolder

    def refused(folder, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder.public))

    monkeypatch.setattr(RunFolder, "make", refused)
    monkeypatch.setattr(dpmed.executors, "run_one", lambda plan, context, folder: refused(folder))
    out = tmp_path / "out"
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "internal error" not in err and "could not write its error file" not in err, err
    folder = StudyFolder(out / "tiny")
    for run_id in ("base_seed0", "dp_eps8_C1_seed0"):
        assert f"FAILED {run_id}: PermissionError: [Errno 13] Permission denied" in err
        assert "Permission denied" in folder.run(run_id).error.read_text()
    assert "2 run(s) failed; fix the cause" in err


def test_a_full_disk_while_run_writes_the_study_folder_ends_in_one_line(tiny_text, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(dpmed.study, "write_text_atomic", _full)     # study.yaml, written before any training
    out = tmp_path / "out"
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"dpmed: error: cannot write to the output folder {out / 'tiny'}: No space left on device; free space on its "
        "disk, or choose an output folder (--out) on another disk, which trains the study again: finished runs are "
        "kept, and the same command continues from them")
    assert not (out / "tiny" / "private" / "lock").exists()


def test_a_full_disk_while_report_writes_ends_in_one_line(tiny_study, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "tiny"
    shutil.copytree(tiny_study, folder)
    monkeypatch.setattr(dpmed.outputs, "write_outputs", _full)
    assert main(["report", str(folder)]) == 2
    assert _error_line(capsys.readouterr().err) == (
        f"dpmed: error: cannot write to the output folder {folder}: No space left on device; free space on its disk, "
        "then run `dpmed report` again (the finished runs are kept)")


def test_a_checkpoint_that_fills_the_disk_fails_its_run_naming_the_file_and_leaves_no_half_of_it(
        tiny_text, tmp_path, monkeypatch, capsys, disk_with_room):
    """Before: "FAILED base_seed0: RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 440832 vs
    440724" (torch.save's words for a full disk, seen on a 1 MiB tmpfs), and the half-written checkpoint stayed."""
    import dpmed.folders

    # the runs' key files (a few hundred bytes) fit; their first checkpoint (model and Adam's moments) does not
    monkeypatch.setattr(dpmed.folders, "open_owner_only", disk_with_room(dpmed.folders.open_owner_only, 100_000))
    out = tmp_path / "out"
    assert main(["run", str(_study(tmp_path, tiny_text)), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RuntimeError" not in err and "unexpected pos" not in err, err
    for run_id in ("base_seed0", "dp_eps8_C1_seed0"):
        checkpoint = out / "tiny" / "private" / "runs" / run_id / "checkpoint.pt"
        assert (f"FAILED {run_id}: OSError: [Errno 28] No space left on device: '{checkpoint}' (traceback in "
                f"{checkpoint.parent / 'error.json'})") in err, err
    assert not list(out.rglob("*.tmp")) and not list(out.rglob("checkpoint.pt"))


def test_an_array_archive_that_fills_the_disk_fails_its_run_naming_the_file(tiny_text, tmp_path, monkeypatch, capsys,
                                                                            disk_with_room):
    """Before: a run's CAMs (and local-DP examples, audit scores, attack images) went straight to their file with
    numpy; a full disk failed the run with "No space left on device" naming no file, half an archive left. One
    epoch: the CAMs are written once, after training, whatever its length."""
    import dpmed.folders

    def filling(opener):     # the CAMs are staged owner-only until their run finishes, so through open_owner_only
        def opens(path, *args, **kwargs):
            return (disk_with_room(opener, 1_000) if ".cams.npz." in str(path) else opener)(path, *args, **kwargs)
        return opens

    monkeypatch.setattr(dpmed.folders, "_open_new", filling(dpmed.folders._open_new))
    monkeypatch.setattr(dpmed.folders, "open_owner_only", filling(dpmed.folders.open_owner_only))
    out = tmp_path / "out"
    text = (tiny_text.replace("evaluation: {", "evaluation: {explanations: {n_images: 8}, ")
            .replace("epochs: 3", "epochs: 1"))
    assert main(["run", str(_study(tmp_path, text)), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    for run_id in ("base_seed0", "dp_eps8_C1_seed0"):
        cams = out / "tiny" / "private" / "runs" / run_id / "unreleased" / "cams.npz"
        assert f"FAILED {run_id}: OSError: [Errno 28] No space left on device: '{cams}'" in err, err
    assert not list(out.rglob("*.tmp")) and not list(out.rglob("cams.npz"))
