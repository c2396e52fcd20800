"""What `dpmed.memory` reads as this process's room: /proc/meminfo, lowered by any cgroup limit (v2 along the path to
the root, or v1's memory controller), on fake trees where each answer is known."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpmed.errors import DataError
from dpmed.memory import Headroom, headroom

GB = 10 ** 9


def _tree(tmp_path: Path, *, available_kb: int = 8_000_000, swap_kb: int | None = 1_000_000,
          cgroup: str = "0::/\n", files: dict[str, str] | None = None) -> tuple[Path, Path]:
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    swap = "" if swap_kb is None else f"SwapFree:       {swap_kb} kB\n"
    (proc / "meminfo").write_text(f"MemTotal:       16000000 kB\nMemAvailable:   {available_kb} kB\n{swap}")
    (proc / "self" / "cgroup").write_text(cgroup)
    for name, text in (files or {}).items():
        (cgroups / name).parent.mkdir(parents=True, exist_ok=True)
        (cgroups / name).write_text(text)
    return proc, cgroups


def _total(monkeypatch, pages: int = 1000) -> Headroom:
    """What :func:`headroom` falls back to where sysconf says the machine has ``pages`` pages of 4096 bytes."""
    import os

    sizes = {"SC_PHYS_PAGES": pages, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: sizes[name], raising=False)
    return Headroom(ram=pages * 4096, swap=0, total_only=True)


def test_without_limits_the_room_is_memavailable_and_swapfree(tmp_path):
    assert headroom(*_tree(tmp_path)) == Headroom(ram=8_000_000 * 1024, swap=1_000_000 * 1024)
    assert headroom(*_tree(tmp_path / "noswap", swap_kb=None)) == Headroom(ram=8_000_000 * 1024, swap=0)


def test_zfs_file_cache_above_its_floor_counts_as_free(tmp_path):
    """MemAvailable leaves out ZFS's ARC, which the kernel shrinks on demand to its floor (c_min)."""
    proc, cgroups = _tree(tmp_path)
    (proc / "spl" / "kstat" / "zfs").mkdir(parents=True)
    (proc / "spl" / "kstat" / "zfs" / "arcstats").write_text(
        "13 1 0x01 123 33456 5678 9012\nname                            type data\n"
        "hits                            4    7\n"
        f"c_min                           4    {GB}\nsize                            4    {5 * GB}\n")
    assert headroom(proc, cgroups).ram == 8_000_000 * 1024 + 4 * GB


def test_a_cgroup_v2_limit_anywhere_above_the_process_lowers_the_room(tmp_path):
    files = {"memory.max": "max\n",                                        # the root: no limit
             "job/memory.max": f"{3 * GB}\n", "job/memory.current": f"{1 * GB}\n",       # the job: 2 GB left
             "job/step/memory.max": "max\n", "job/step/memory.current": f"{GB // 2}\n"}  # the process's own: none
    assert headroom(*_tree(tmp_path, cgroup="0::/job/step\n", files=files)).ram == 2 * GB
    files["job/step/memory.max"] = f"{GB}\n"                                             # tighter below: 0.5 GB left
    assert headroom(*_tree(tmp_path / "b", cgroup="0::/job/step\n", files=files)).ram == GB // 2


def test_a_cgroup_v1_memory_limit_counts_and_its_no_limit_value_does_not(tmp_path):
    cgroup = "12:cpu,cpuacct:/slurm/job1\n4:memory:/slurm/job1\n"
    files = {"memory/slurm/job1/memory.limit_in_bytes": f"{4 * GB}\n",
             "memory/slurm/job1/memory.usage_in_bytes": f"{1 * GB}\n",
             "memory/slurm/memory.limit_in_bytes": "9223372036854771712\n",
             "memory/slurm/memory.usage_in_bytes": f"{9 * GB}\n"}
    assert headroom(*_tree(tmp_path, cgroup=cgroup, files=files)).ram == 3 * GB


def test_a_cgroups_file_cache_counts_as_free_and_its_other_memory_does_not(tmp_path):
    """A job that has just read its dataset's files holds them in its cgroup's usage as file cache, which the kernel
    reclaims under the limit: counted as used, it refused images that fit."""
    stat = (f"anon {GB}\nfile {5 * GB}\nshmem {GB}\nactive_file {GB}\ninactive_file {3 * GB}\n"
            "a line that is not a statistic\n")
    files = {"job/memory.max": f"{8 * GB}\n", "job/memory.current": f"{7 * GB}\n", "job/memory.stat": stat}
    assert headroom(*_tree(tmp_path, cgroup="0::/job\n", files=files)).ram == 5 * GB   # 1 GB free, 4 GB of cache
    cgroup = "4:memory:/slurm/job1\n"
    files = {"memory/slurm/job1/memory.limit_in_bytes": f"{8 * GB}\n",
             "memory/slurm/job1/memory.usage_in_bytes": f"{7 * GB}\n",
             "memory/slurm/job1/memory.stat": f"active_file {5 * GB}\ntotal_active_file {GB}\n"
                                              f"total_inactive_file {2 * GB}\n"}
    assert headroom(*_tree(tmp_path / "v1", cgroup=cgroup, files=files)).ram == 4 * GB    # v1: the totals count
    files = {"memory.max": f"{8 * GB}\n", "memory.current": f"{GB}\n", "memory.stat": f"inactive_file {3 * GB}\n"}
    assert headroom(*_tree(tmp_path / "odd", files=files)).ram == 8 * GB    # never more than the limit


def test_a_limit_already_exceeded_leaves_no_room_and_unreadable_files_leave_the_total(tmp_path, monkeypatch):
    files = {"memory.max": f"{GB}\n", "memory.current": f"{2 * GB}\n"}
    assert headroom(*_tree(tmp_path, files=files)).ram == 0
    proc, cgroups = _tree(tmp_path / "garbled", cgroup="not a cgroup line\n0::/\n", files=files)
    assert headroom(proc, cgroups).ram == 0
    (proc / "meminfo").write_text("MemAvailable: lots\n")
    total = _total(monkeypatch)
    assert headroom(proc, cgroups) == total                  # the machine's total memory bounds the work


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo is read on Linux only")
def test_this_machine_has_some_room():
    room = headroom()
    assert room is not None and room.ram > 0 and room.swap >= 0


def test_what_cannot_be_read_as_documented_leaves_the_total_or_the_limit_unknown(tmp_path, monkeypatch):
    """No MemAvailable (kernels before 3.14), another unit: only the machine's total memory is known (sysconf), not
    a crash or a misread. A garbled cgroup file, or an unreadable /proc/self/cgroup: no limit known, the machine's
    room stands."""
    total = _total(monkeypatch)
    proc, cgroups = _tree(tmp_path / "old")
    (proc / "meminfo").write_text("MemTotal:       16000000 kB\n")
    assert headroom(proc, cgroups) == total
    proc, cgroups = _tree(tmp_path / "unit")
    (proc / "meminfo").write_text("MemTotal:       16 GB\nMemAvailable:   8 MB\n")
    assert headroom(proc, cgroups) == total
    garbled = _tree(tmp_path / "garbled", files={"memory.max": "garbage\n", "memory.current": "12\n"})
    assert headroom(*garbled) == Headroom(ram=8_000_000 * 1024, swap=1_000_000 * 1024)
    proc, cgroups = _tree(tmp_path / "nocgroup", files={"memory.max": "1000\n", "memory.current": "10\n"})
    (proc / "self" / "cgroup").unlink()
    assert headroom(proc, cgroups) == Headroom(ram=8_000_000 * 1024, swap=1_000_000 * 1024)


def test_a_zfs_cache_below_its_floor_takes_nothing_from_memavailable(tmp_path):
    proc, cgroups = _tree(tmp_path)
    (proc / "spl" / "kstat" / "zfs").mkdir(parents=True)
    (proc / "spl" / "kstat" / "zfs" / "arcstats").write_text(
        f"name type data\nc_min                           4    {5 * GB}\nsize                            4    {GB}\n")
    assert headroom(proc, cgroups).ram == 8_000_000 * 1024


def test_images_that_exactly_fill_ram_and_swap_are_decoded_with_a_warning(monkeypatch, caplog):
    import logging

    from dpmed import memory

    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=1000, swap=536))     # 4 * 384 = 1536 bytes
    with caplog.at_level(logging.WARNING, logger="dpmed.memory"):
        memory.check_images((384, 1, 1, 1), fix="smaller")
    assert "the machine will swap" in caplog.text
    with pytest.raises(DataError, match=r"the 385 images .* is free for dpmed here: smaller$"):
        memory.check_images((385, 1, 1, 1), fix="smaller")


def test_without_proc_meminfo_the_machine_s_total_memory_bounds_the_work_and_without_it_nothing_is_checked(
        tmp_path, monkeypatch):
    """macOS and the BSDs have no /proc/meminfo. Before, nothing was checked there: work larger than the whole
    machine started and ended in the kernel's kill. Now the total memory the system reports (sysconf) bounds it;
    where none is reported (Windows has no sysconf), the check is left out, and nothing fails."""
    import functools
    import os

    from dpmed import memory

    nowhere = tmp_path / "nowhere"
    monkeypatch.setattr(memory, "headroom", functools.partial(headroom, nowhere, nowhere))
    _total(monkeypatch)
    memory.check_bytes(4_096_000, "the work takes 4.1 MB", fix="do less")
    with pytest.raises(DataError, match=r"^the work takes more, and this machine has only 4.1 MB of memory in all "
                                        r"\(what is free cannot be read here\): do less$"):
        memory.check_bytes(4_096_001, "the work takes more", fix="do less")
    _total(monkeypatch, pages=-1)                     # sysconf's answer where it does not know
    memory.check_bytes(10**18, "the work takes an exabyte", fix="do less")
    monkeypatch.delattr(os, "sysconf", raising=False)
    memory.check_bytes(10**18, "the work takes an exabyte", fix="do less")


def test_images_that_exactly_fill_ram_pass_silently_and_a_refusal_states_size_channels_and_swap(monkeypatch, caplog):
    """1000 bytes free: 250 one-pixel images (4 bytes each as float32) fit without a word, 251 swap. A refusal says
    the images' shape, their size and the free RAM and swap, so that the user sees what to change."""
    import logging

    from dpmed import memory

    monkeypatch.setattr(memory, "headroom", lambda: Headroom(ram=1000, swap=2000))
    with caplog.at_level(logging.WARNING, logger="dpmed.memory"):
        memory.check_images((250, 1, 1, 1), fix="smaller")
    assert "the machine will swap" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="dpmed.memory"):
        memory.check_images((251, 1, 1, 1), fix="smaller")
    assert "the machine will swap" in caplog.text
    with pytest.raises(DataError) as refused:
        memory.check_images((250, 3, 2, 2), fix="smaller")             # 250 * 3 * 2 * 2 * 4 = 12,000 bytes
    assert str(refused.value) == ("the 250 images at 2 x 2 px, 3 channels, take 12 kB of memory as float32, and only "
                                  "1 kB (and 2 kB of swap) is free for dpmed here: smaller")


def test_a_cgroup_limit_above_what_the_machine_has_free_leaves_the_machine_s_room(tmp_path):
    files = {"job/memory.max": f"{64 * GB}\n", "job/memory.current": f"{GB}\n"}      # 63 GB left in the cgroup
    assert headroom(*_tree(tmp_path, cgroup="0::/job\n", files=files)).ram == 8_000_000 * 1024
