"""Writing into a study folder: what the file system refuses reaches the user as one FolderError naming the folder
and what to do, also where the error names no file (a write that runs out of space)."""

from __future__ import annotations

import errno
import os

import pytest

from dpmed.errors import FolderError
from dpmed.workspace import writing_into

# EPERM: setting the times of another user's (or an immutable) file, which settle_times does on leaving the folder
REFUSALS = [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM] + ([errno.EDQUOT] if hasattr(errno, "EDQUOT") else [])


@pytest.mark.parametrize("code", REFUSALS, ids=[errno.errorcode[c] for c in REFUSALS])
def test_a_refusal_that_names_no_file_is_told_as_the_folder_s(tmp_path, code):
    """A write (or the close that flushes it) on a full disk raises ENOSPC with no file name: before, it passed as
    it was, and `dpmed run` ended in "internal error ... please report this"."""
    out = tmp_path / "out"
    with pytest.raises(FolderError) as caught:
        with writing_into(out):
            raise OSError(code, os.strerror(code))
    message = str(caught.value)
    assert message.startswith(f"cannot write to the output folder {out}: {os.strerror(code)}; ")
    full = code in (errno.ENOSPC, getattr(errno, "EDQUOT", None))
    assert ("free space on its disk" in message) is full and "--out" in message
    assert "finished runs are kept" in message        # a folder made read-only too: another --out is no need
    if not full:       # another folder trains every run again: new releases of the same patients
        assert "trains the study again" in message


def test_a_full_disk_met_writing_a_file_outside_the_folder_names_that_file(tmp_path):
    cache = tmp_path / "cache" / "weights.pt"
    with pytest.raises(FolderError, match=f"^cannot write {cache}: No space left on device; free space on its disk"):
        with writing_into(tmp_path / "out"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache))


@pytest.mark.parametrize("error", [OSError(errno.EIO, "Input/output error"),
                                   OSError(errno.EACCES, "Permission denied", "/somewhere/else/data.csv")],
                         ids=["no file, not a refusal", "another file's permission"])
def test_other_os_errors_pass(tmp_path, error):
    with pytest.raises(OSError) as caught:
        with writing_into(tmp_path / "out"):
            raise error
    assert caught.value is error


@pytest.mark.parametrize("windows", [True, False])
def test_a_file_that_cannot_be_replaced_is_named_and_on_windows_told_it_may_be_open_elsewhere(tmp_path, monkeypatch,
                                                                                            windows):
    """Windows refuses to replace a file another program holds open (results.csv in a spreadsheet) with EACCES: the
    advice was only to make the folder writable, which it already is, and the message named the atomic write's
    temporary file (os.replace's first name), which is gone by then, not the file it replaces."""
    import dpmed.workspace
    from dpmed.folders import write_text_atomic

    monkeypatch.setattr(dpmed.workspace, "_WINDOWS", windows)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("run_id\n")

    def open_elsewhere(src, dst):
        raise PermissionError(errno.EACCES, "Access is denied", str(src), None, str(dst))
    monkeypatch.setattr(os, "replace", open_elsewhere)
    with pytest.raises(FolderError) as caught:
        with writing_into(out):
            write_text_atomic(out / "results.csv", "run_id\nnew\n")
    message = str(caught.value)
    assert f"Access is denied ({out / 'results.csv'}); " in message and ".tmp" not in message
    hint = "if another program has it open (a spreadsheet, a viewer), close it and run again; else choose a writable"
    assert (hint in message) is windows
    with pytest.raises(FolderError) as caught:                 # a folder it cannot write into: no such advice
        with writing_into(out):
            raise PermissionError(errno.EACCES, "Permission denied", str(out / "runs"))
    assert "another program" not in str(caught.value)


def test_a_failure_to_make_a_parent_of_the_folder_is_the_folder_s(tmp_path):
    with pytest.raises(FolderError, match="cannot write to the output folder .*Permission denied"):
        with writing_into(tmp_path / "a" / "b"):
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "a"))


def test_a_temporary_whose_writer_cannot_be_known_gone_is_kept(tmp_path, monkeypatch):
    from dpmed import workspace

    (tmp_path / ".run.json.4242.tmp").write_text("half")
    monkeypatch.setattr(workspace, "process_running", lambda pid: None)
    assert workspace.stale_temporaries(tmp_path) == []
    monkeypatch.setattr(workspace, "process_running", lambda pid: False)
    assert workspace.stale_temporaries(tmp_path) == [tmp_path / ".run.json.4242.tmp"]


def test_only_this_host_s_temporaries_whose_writer_is_gone_are_found(tmp_path, monkeypatch):
    """On an output folder shared between hosts, another host's temporary file belongs to a process this host cannot
    see: it is kept, whatever runs here under its process id. This host's, and an older dpmed's (named by the process
    id alone, written here as it assumed), are found once their writer is gone."""
    import socket

    from dpmed import workspace
    from dpmed.folders import temporary_beside

    target = tmp_path / "run.json"
    monkeypatch.setattr(socket, "gethostname", lambda: "node2.cluster")
    theirs = temporary_beside(target)
    monkeypatch.setattr(socket, "gethostname", lambda: "node1.cluster")
    mine = temporary_beside(target)
    older = tmp_path / f".run.json.{os.getpid()}.tmp"
    for path in (theirs, mine, older):
        path.write_text("half")
    assert len({theirs, mine, older}) == 3
    monkeypatch.setattr(workspace, "process_running", lambda pid: False if pid == os.getpid() else None)
    assert sorted(workspace.stale_temporaries(tmp_path)) == sorted([mine, older])


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX's")
def test_claiming_a_folder_makes_it_and_its_private_part_owner_only(tmp_path):
    """Also for a study without DP-SGD arms (which writes no DP count), and an older private/ is narrowed. Folders
    the claim made and nothing was written into are gone after it (a study refused before writing anything), and
    those that were there before stay."""
    from dpmed.workspace import claim_folder

    with claim_folder(tmp_path / "out" / "s"):
        assert (tmp_path / "out" / "s").stat().st_mode & 0o777 == 0o700
        assert (tmp_path / "out" / "s" / "private").stat().st_mode & 0o777 == 0o700
    assert not (tmp_path / "out").exists()
    (tmp_path / "s" / "private").mkdir(mode=0o755, parents=True)
    (tmp_path / "s" / "private").chmod(0o755)
    with claim_folder(tmp_path / "s"):
        assert (tmp_path / "s" / "private").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "s" / "private").is_dir()


def test_a_finished_run_s_secrets_are_withdrawn_and_an_unfinished_run_keeps_them_to_resume(tmp_path):
    from dpmed.folders import StudyFolder
    from dpmed.workspace import withdraw_leftovers

    folder = StudyFolder(tmp_path)
    finished, unfinished = folder.run("arm_seed0"), folder.run("base_seed0")
    for run in (finished, unfinished):
        run.make()
        run.privacy_key.write_text("{}")
        run.checkpoint.write_bytes(b"state")
    finished.record.write_text("{}")
    withdraw_leftovers(folder)
    assert not finished.privacy_key.exists() and not finished.checkpoint.exists()
    assert unfinished.privacy_key.exists() and unfinished.checkpoint.exists()


def test_an_unfinished_run_s_shareable_files_and_a_killed_writer_s_temporaries_are_deleted(tmp_path, monkeypatch,
                                                                                          caplog):
    """No eps of the study covers a model without its run.json, and no later write replaces a half-written file of
    a killed writer: both go, and the user is told which run's files were withdrawn; a finished run's model and a
    temporary whose writer runs stay."""
    from dpmed import workspace
    from dpmed.folders import StudyFolder

    folder = StudyFolder(tmp_path)
    finished, unfinished = folder.run("arm_seed0"), folder.run("base_seed0")
    for run in (finished, unfinished):
        run.make()
        run.model.write_bytes(b"weights")
    finished.record.write_text("{}")
    killed, running = unfinished.public / ".model.pt.4242.tmp", unfinished.public / ".model.pt.4343.tmp"
    killed.write_text("half")
    running.write_text("half")
    monkeypatch.setattr(workspace, "process_running", lambda pid: pid != 4242)
    workspace.withdraw_leftovers(folder)
    assert not unfinished.model.exists() and not killed.exists()
    assert finished.model.exists() and running.exists()
    assert ("base_seed0: unfinished; deleted its model.pt from the shareable folder, where no eps of this study "
            "covers them") in caplog.text and "arm_seed0" not in caplog.text


@pytest.mark.parametrize("seconds", [{"train_seconds": 12.5, "total_seconds": 20.0}, {"total_seconds": 20.0}])
def test_an_older_dp_sgd_run_json_s_wall_time_moves_to_the_private_folder(tmp_path, make_record, caplog, seconds):
    """An older dpmed wrote a DP-SGD run's seconds into run.json: they leave it (they grow with what sampling drew),
    are kept in the run's private timing.json (made where the run has no private folder), and the user is warned
    that copies shared before still hold them. A non-private run's timing stays as it is."""
    import logging

    from dpmed.folders import StudyFolder
    from dpmed.records import read_record, read_timing
    from dpmed.workspace import withdraw_public_timing

    folder = StudyFolder(tmp_path)
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    dp = dp.model_copy(update={"timing": dp.timing.model_copy(update={"train_seconds": None, **seconds})})
    plain = make_record("base_seed0", "base")
    for record in (dp, plain):
        folder.run(record.run_id).public.mkdir(parents=True)
        record.write(folder.run(record.run_id).record)
    with caplog.at_level(logging.INFO, logger="dpmed.workspace"):
        withdraw_public_timing(folder, [dp, plain])
    shared = read_record(folder.run(dp.run_id).record).timing
    assert shared.train_seconds is None and shared.total_seconds is None
    kept = read_timing(folder.run(dp.run_id).timing)
    assert (kept.train_seconds, kept.total_seconds) == (seconds.get("train_seconds"), 20.0)
    assert read_record(folder.run(plain.run_id).record).timing == plain.timing
    assert "held the run's wall time (dp_eps1_C1_seed0)" in caplog.text
    kept.model_copy(update={"total_seconds": 99.0}).write(folder.run(dp.run_id).timing)
    withdraw_public_timing(folder, [dp])                    # a private timing already there is not overwritten
    assert read_timing(folder.run(dp.run_id).timing).total_seconds == 99.0


def test_older_run_jsons_rewritten_together_check_runs_for_a_link_once(tmp_path, make_record, monkeypatch):
    """runs/ is one folder for every run.json rewritten: it was checked for a symlink once per run; each run's own
    folder is still checked."""
    import dpmed.workspace as workspace
    from dpmed.folders import StudyFolder, refuse_link

    folder = StudyFolder(tmp_path)
    older = []
    for eps in (1.0, 8.0):
        dp = make_record(f"dp_eps{eps:g}_C1_seed0", "dp", "dp_sgd", eps=eps)
        older.append(dp.model_copy(update={"timing": dp.timing.model_copy(update={"total_seconds": 20.0})}))
        folder.run(dp.run_id).public.mkdir(parents=True)
        older[-1].write(folder.run(dp.run_id).record)
    checked = []
    monkeypatch.setattr(workspace, "refuse_link", lambda path: (checked.append(path), refuse_link(path)))
    workspace.withdraw_public_timing(folder, older)
    assert checked.count(folder.runs) == 1
    assert sorted(checked[1:]) == sorted(folder.run(r.run_id).public for r in older)


def test_an_older_dp_sgd_run_json_s_resumed_step_alone_moves_to_the_private_folder_and_is_said(tmp_path, make_record,
                                                                                               caplog):
    """A run.json without seconds that still says from which step the run resumed: that step (a timing statistic
    too) moves to the private folder, and the user is told so, not that a wall time moved."""
    import logging

    from dpmed.folders import StudyFolder
    from dpmed.records import read_record, read_timing
    from dpmed.workspace import withdraw_public_timing

    folder = StudyFolder(tmp_path)
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0)
    dp = dp.model_copy(update={"timing": dp.timing.model_copy(update={"train_seconds": None, "total_seconds": None,
                                                                      "resumed_from": 28})})
    folder.run(dp.run_id).public.mkdir(parents=True)
    dp.write(folder.run(dp.run_id).record)
    with caplog.at_level(logging.INFO, logger="dpmed.workspace"):
        withdraw_public_timing(folder, [dp])
    assert read_record(folder.run(dp.run_id).record).timing.resumed_from is None
    assert read_timing(folder.run(dp.run_id).timing).resumed_from == 28
    assert "said whether the run resumed (dp_eps1_C1_seed0)" in caplog.text and "wall time" not in caplog.text


@pytest.mark.parametrize("under", [("study",), ("study", "inner"), ()])
def test_an_output_folder_that_is_or_lies_under_a_file_names_that_file(tmp_path, under):
    """Before: "cannot write to the output folder out/study: Not a directory (out/study)" (or "File exists"), with
    the advice to make a folder writable that is a file."""
    blocker = tmp_path / "out"
    blocker.write_text("a file where a folder should be")
    root = blocker.joinpath(*under)
    with pytest.raises(FolderError) as caught:
        with writing_into(root):
            root.mkdir(parents=True, exist_ok=True)
    assert str(caught.value) == (f"cannot write to the output folder {root}: {blocker} is a file, not a folder; move "
                                 "or rename that file, or choose another output folder (--out)")


@pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges on Windows")
@pytest.mark.parametrize("under", [("study",), ()])
def test_an_output_folder_that_is_or_lies_under_a_link_to_nothing_names_the_link(tmp_path, under):
    """A results folder linked to a disk that is not mounted (or a folder moved since): mkdir said "File exists"
    and the advice was to make the folder writable. Now the link and what it points to are named."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "data-disk" / "results")
    root = link.joinpath(*under)
    with pytest.raises(FolderError) as caught:
        with writing_into(root):
            root.mkdir(parents=True, exist_ok=True)
    assert str(caught.value) == (f"cannot write to the output folder {root}: {link} is a link to "
                                 f"{tmp_path / 'data-disk' / 'results'}, which does not exist (a disk not mounted, a "
                                 "folder moved); mount or make it, or choose another output folder (--out)")


def test_a_study_folder_deleted_while_it_is_held_is_left_gone_without_an_error(tmp_path):
    """Deleted by hand (or by a clean-up) while `dpmed run` held it: leaving the folder has no times to settle and
    must not fail on the folder that is gone, which would hide the run's own outcome behind a FolderError."""
    import shutil

    from dpmed.workspace import claim_folder

    root = tmp_path / "results" / "s"
    with claim_folder(root):
        (root / "runs").mkdir()
        shutil.rmtree(root)
    assert not root.exists()


def test_the_explanations_seconds_of_a_dp_sgd_run_json_move_out_of_it(tmp_path, make_record, make_explanations,
                                                                      caplog):
    """A DP-SGD run.json written before held the seconds its explanations took (`RunRecord.shareable`): run.json is
    rewritten without them and the user is told that, not that a wall time or a step moved."""
    import logging

    from dpmed.folders import StudyFolder
    from dpmed.records import read_record
    from dpmed.workspace import withdraw_public_timing

    folder = StudyFolder(tmp_path)
    cams = make_explanations({"mask_energy": {"value": 0.4, "low": 0.3, "high": 0.5}}, seconds=3.25)
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, explanations=cams)
    dp = dp.model_copy(update={"timing": dp.timing.shareable(dp.plan)})
    plain = make_record("base_seed0", "base", explanations=cams)
    for record in (dp, plain):
        folder.run(record.run_id).public.mkdir(parents=True)
        record.write(folder.run(record.run_id).record)
    with caplog.at_level(logging.INFO, logger="dpmed.workspace"):
        withdraw_public_timing(folder, [dp, plain])
    assert read_record(folder.run(dp.run_id).record).explanations.seconds is None
    assert read_record(folder.run(plain.run_id).record) == plain
    assert "the seconds their explanations took (dp_eps1_C1_seed0)" in caplog.text and "wall time" not in caplog.text


@pytest.mark.parametrize("linked", ["runs", "runs/base_seed0"])
def test_a_run_folder_or_runs_folder_that_is_a_link_is_refused_before_anything_is_deleted_or_written(tmp_path,
                                                                                                     linked):
    """A run folder planted as a link to another folder was followed: the unfinished run's "leftover" model.pt
    there, outside the output folder, was deleted, and the run's model, predictions and record written in its
    place."""
    from dpmed import workspace
    from dpmed.folders import StudyFolder

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "base_seed0").mkdir(parents=True)
    for model in (elsewhere / "model.pt", elsewhere / "base_seed0" / "model.pt"):
        model.write_text("someone's model")
    folder = StudyFolder(tmp_path / "study")
    folder.root.mkdir()
    if linked == "runs/base_seed0":
        folder.runs.mkdir()
    (folder.root / linked).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(FolderError, match=f"{folder.root / linked} is a symbolic link"):
        workspace.withdraw_leftovers(folder)
    with pytest.raises(FolderError, match="is a symbolic link"):
        folder.run("base_seed0").make()
    assert [p.read_text() for p in sorted(elsewhere.rglob("model.pt"))] == ["someone's model"] * 2


def test_a_run_json_is_not_rewritten_through_a_run_folder_that_is_a_link(tmp_path, make_record, make_explanations):
    """`dpmed report` rewrites an older dpmed's DP-SGD run.json without its private timing. Through a run folder that
    is a link (a finished run linked in from another study) it wrote the file the link points to, outside the output
    folder; it is refused as `dpmed run` refuses it, and the file there is left as it was."""
    from dpmed.folders import StudyFolder
    from dpmed.workspace import withdraw_public_timing

    cams = make_explanations({"mask_energy": {"value": 0.4, "low": 0.3, "high": 0.5}}, seconds=3.25)
    dp = make_record("dp_eps1_C1_seed0", "dp", "dp_sgd", eps=1.0, explanations=cams)
    dp = dp.model_copy(update={"timing": dp.timing.shareable(dp.plan)})
    elsewhere = tmp_path / "other" / "runs" / dp.run_id
    elsewhere.mkdir(parents=True)
    dp.write(elsewhere / "run.json")
    before = (elsewhere / "run.json").read_bytes()
    folder = StudyFolder(tmp_path / "study")
    folder.runs.mkdir(parents=True)
    folder.run(dp.run_id).public.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(FolderError, match=f"{folder.run(dp.run_id).public} is a symbolic link"):
        withdraw_public_timing(folder, [dp])
    assert (elsewhere / "run.json").read_bytes() == before
