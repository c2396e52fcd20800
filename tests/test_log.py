"""How the command shows what the library logs (`dpmed.log`): dpmed's lines as they are, other libraries' warnings
with their origin, dp_accounting's two known harmless messages dropped and nothing else, a private log file that
exists only once something is logged, and the caller's own logging left as it was afterwards."""

from __future__ import annotations

import io
import logging
import subprocess
import sys

import pytest

from dpmed.log import KNOWN_HARMLESS, detach, log_to_console, log_to_file, quiet_known_noise


@pytest.fixture
def absl_logger():
    """The absl logger with no filters, restored afterwards (main() in this process may have added the command's)."""
    absl = logging.getLogger("absl")
    saved = absl.filters[:]
    absl.filters = []
    yield absl
    absl.filters = saved


def test_exactly_the_two_known_harmless_absl_messages_are_dropped(absl_logger):
    stream = io.StringIO()
    handler = log_to_console(stream=stream)
    try:
        absl_logger.warning("_compute_log_a_frac failed to converge after 1000 iterations with q=0.16, sigma=0.5, "
                            "alpha=1.1. Excluding this order from the epsilon computation.")
        absl_logger.warning("Negative Renyi divergence of -1.59e-16, probably caused by numerical instability")
        absl_logger.warning("an unrelated absl warning")
        logging.getLogger("dpmed.test").info("a dpmed line")
        logging.getLogger("somelib").warning("a library warning")
    finally:
        detach(handler)
    assert stream.getvalue().splitlines() == ["warning (absl): an unrelated absl warning", "a dpmed line",
                                              "warning (somelib): a library warning"]
    assert KNOWN_HARMLESS == ("failed to converge", "Negative Renyi divergence")


def test_quiet_known_noise_installs_its_filter_once(absl_logger):
    quiet_known_noise()
    quiet_known_noise()
    assert len(absl_logger.filters) == 1


def test_the_log_file_appears_with_the_first_line_and_its_folder(tmp_path):
    path = tmp_path / "study" / "private" / "dpmed.log"
    handler = log_to_file(path)
    try:
        assert not path.parent.exists()                    # a command refused before logging leaves no file
        logging.getLogger("dpmed.study").info("study: %d of %d runs done", 1, 2)
        logging.getLogger("dpmed.study").debug("not at INFO")
    finally:
        detach(handler)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and lines[0].endswith(" dpmed.study INFO: study: 1 of 2 runs done")
    logging.getLogger("dpmed.study").info("after detach")
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1


def test_the_console_sets_aside_a_terminal_handler_of_the_root_logger_and_gives_it_back(capsys):
    """Opacus calls logging.basicConfig when imported: its stderr handler would print every line a second time."""
    root = logging.getLogger()
    theirs = logging.StreamHandler()                       # what basicConfig adds: stderr
    root.addHandler(theirs)
    try:
        handler = log_to_console()
        assert theirs not in root.handlers and handler in root.handlers
        logging.getLogger("dpmed.study").info("once")
        detach(handler)
        assert theirs in root.handlers and handler not in root.handlers
    finally:
        root.removeHandler(theirs)
    assert capsys.readouterr().err.count("once") == 1


def test_a_log_file_that_cannot_be_written_says_so_once_and_the_terminal_goes_on(tmp_path, capsys):
    """A full disk: before, every line after printed Python's "--- Logging error ---" with a traceback."""
    import errno

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    handler = log_to_file(tmp_path / "private" / "dpmed.log")
    console = log_to_console(bars=False)
    try:
        handler.stream = Full()
        log = logging.getLogger("dpmed.test")
        for i in range(3):
            log.info("line %d", i)
    finally:
        handler.stream = None
        detach(handler, console)
    err = capsys.readouterr().err
    assert err.count("dpmed: cannot write the log file") == 1 and "No space left on device" in err
    assert "Logging error" not in err and "Traceback" not in err and "line 2" in err


def test_the_accounting_leaves_an_unconfigured_root_logger_unconfigured():
    """absl's logging.warning, which dp_accounting calls when an RDP order does not converge, ran logging.basicConfig()
    on a root logger without handlers: the library configured its caller's logging and printed every warning. In a
    fresh interpreter, as a notebook starts."""
    code = ("import logging\nfrom dpmed import accounting\n"
            "eps = accounting.dp_sgd_epsilon(noise_multiplier=0.72, sample_rate=0.280702, steps=20, delta=1e-5, "
            "accountant='rdp')\nprint(eps > 0, logging.root.handlers)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True []" and "failed to converge" not in done.stderr
    code = ("import logging\nlogging.basicConfig(format='%(name)s %(message)s')\nfrom dpmed import accounting\n"
            "accounting.dp_sgd_epsilon(noise_multiplier=0.72, sample_rate=0.280702, steps=20, delta=1e-5, "
            "accountant='rdp')\nprint(len(logging.root.handlers))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "1" and "absl _compute_log_a_frac failed to converge" in done.stderr   # the caller's


def test_dpmed_s_own_warnings_read_as_they_are_and_other_libraries_errors_name_their_origin():
    stream = io.StringIO()
    handler = log_to_console(stream=stream)
    try:
        logging.getLogger("dpmed.study").warning("run x failed")
        logging.getLogger("somelib").error("broken")
        logging.getLogger("somelib").info("not shown: another library's INFO")
    finally:
        detach(handler)
    assert stream.getvalue().splitlines() == ["run x failed", "error (somelib): broken"]


def test_with_progress_bars_a_line_is_written_above_the_bar_not_after_it():
    from tqdm import tqdm

    stream = io.StringIO()
    handler = log_to_console(stream=stream, bars=True)
    bar = tqdm(total=10, file=stream, desc="run", mininterval=0, ascii=True)
    try:
        bar.update(3)
        logging.getLogger("dpmed.study").info("a line")
    finally:
        bar.close()
        detach(handler)
    before = stream.getvalue().split("a line")[0]
    assert before.endswith("\r") and "3/10" not in before.rsplit("\r", 2)[-2]   # the bar was cleared, then the line


def test_a_root_handler_that_does_not_write_to_the_terminal_is_kept(capsys):
    """Only a handler on the terminal would print each line twice: a caller's own log (a stream or a file) stays."""
    root = logging.getLogger()
    theirs = logging.StreamHandler(io.StringIO())
    root.addHandler(theirs)
    try:
        handler = log_to_console()
        try:
            assert theirs in root.handlers
            logging.getLogger("dpmed.study").info("both")
        finally:
            detach(handler)
    finally:
        root.removeHandler(theirs)
    assert "both" in theirs.stream.getvalue() and capsys.readouterr().err.count("both") == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_the_log_file_is_owner_only_and_a_second_command_appends_to_it(tmp_path):
    """It holds audit results (which depend on the secret canary bits): readable by its owner only; a resumed study
    keeps the log of the session before."""
    path = tmp_path / "study" / "private" / "dpmed.log"
    for text in ("first session", "second session"):
        handler = log_to_file(path)
        try:
            logging.getLogger("dpmed.study").info(text)
        finally:
            detach(handler)
    assert [line.split(": ", 1)[1] for line in path.read_text(encoding="utf-8").splitlines()] == [
        "first session", "second session"]
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700


def test_the_reconstruction_bounds_beyond_pld_s_steps_leave_the_root_logger_unconfigured():
    """Past PLD's step ceiling the reconstruction bounds take RDP's delta(eps); that RdpAccountant, built outside
    the eps accountant's guard, let absl's warning for an order that does not converge run logging.basicConfig()
    on a root logger without handlers, as `dpmed.accounting.epsilon` keeps it from doing. In a fresh interpreter."""
    code = ("import logging\nfrom dpmed import accounting\nfrom dpmed.accounting import _pld\n"
            "r = accounting.reconstruction_bound(noise_multiplier=3.0, sample_rate=0.25, steps=_pld.MAX_STEPS + 1, "
            "kappa=1e-3)\nprint(0 < r <= 1, logging.root.handlers)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True []" and "failed to converge" not in done.stderr


@pytest.mark.parametrize("callers", [logging.NOTSET, logging.WARNING])
def test_a_command_gives_back_the_level_of_dpmed_s_logger_it_found(tmp_path, callers):
    """The command lets dpmed's INFO lines through while it runs; the level it set stayed after it, so a notebook
    that called main() once, or a test that ran after one that did, saw dpmed's INFO lines reach its own handlers."""
    dpmed = logging.getLogger("dpmed")
    before = dpmed.level
    dpmed.setLevel(callers)
    try:
        console, file = log_to_console(stream=io.StringIO()), log_to_file(tmp_path / "log.txt")
        assert dpmed.getEffectiveLevel() == logging.INFO
        detach(console, file)
        assert dpmed.level == callers
    finally:
        dpmed.setLevel(before)
