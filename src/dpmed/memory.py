"""How much memory this process can still take, so that work too large for the machine stops at once with a message
that says what to change, rather than minutes later in the kernel's out-of-memory kill (SIGKILL: no message, no
clean-up, and in a container the whole study gone with it).

Read on Linux only: MemAvailable and SwapFree of /proc/meminfo, and the memory limit of this process's cgroup and its
ancestors (cgroup v2, or v1's memory controller), which SLURM jobs and containers set below the machine's memory.
A cgroup's usage counts the file cache its processes read (the dataset's files, a cache entry), which the kernel
reclaims before it kills anything: that cache counts as free, as MemAvailable counts the machine's, or a job that
had just read its images would be refused them.
On ZFS the file cache (the ARC) is not in MemAvailable though the kernel shrinks it on demand: what it holds above its
floor (c_min) counts as free, or a server with a large ARC would refuse data it can hold.
Without /proc/meminfo (macOS, the BSDs) what is free cannot be read, but the machine's total memory can (sysconf):
work larger than the whole machine is refused all the same. Where neither is known (Windows), :func:`headroom` is
None and nothing is checked.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from dpmed.errors import DataError
from dpmed.numbers import bytes_text

__all__ = ["Headroom", "headroom", "check_images", "check_bytes", "SMALLER_IMAGES"]

_log = logging.getLogger(__name__)

# What a study can change where its images do not fit.
SMALLER_IMAGES = ("set a smaller data.image_size (the memory grows with its square), use fewer images, or run on a "
                  "machine with more memory")


@dataclass(frozen=True)
class Headroom:
    """ram: bytes this process can still take without swapping (the machine's, or less under a cgroup limit);
    swap: free swap besides, in bytes. total_only: ram is the machine's whole memory, where what is free cannot be
    read (swap is then 0: unknown)."""

    ram: int
    swap: int
    total_only: bool = False

    def describe(self, where: str = "here") -> str:
        """The room as a refusal states it: "only 2 GB (and 1 GB of swap) is free ``where``"."""
        if self.total_only:
            return f"this machine has only {bytes_text(self.ram)} of memory in all (what is free cannot be read here)"
        return f"only {bytes_text(self.ram)}" + (f" (and {bytes_text(self.swap)} of swap)" if self.swap else "") + \
            f" is free {where}"


def headroom(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> Headroom | None:
    """This process's :class:`Headroom`; where /proc/meminfo cannot be read (not Linux), the machine's total memory
    (:func:`_total_memory`), or None where that is unknown too."""
    try:
        fields = dict(line.split(":", 1) for line in (proc / "meminfo").read_text().splitlines() if ":" in line)
        ram = _kilobytes(fields["MemAvailable"]) + _zfs_cache_above_floor(proc)
        swap = _kilobytes(fields.get("SwapFree", "0 kB"))
    except (OSError, KeyError, ValueError):
        return _total_memory()
    limited = _cgroup_room(proc, cgroups)
    return Headroom(ram=ram if limited is None else max(0, min(ram, limited)), swap=swap)


def _total_memory() -> Headroom | None:
    """The machine's physical memory as a :class:`Headroom` (``total_only``), from sysconf (POSIX: macOS, the BSDs);
    None where the system has no sysconf (Windows) or does not say."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):     # no sysconf; a name this system lacks; a failed call
        return None
    return Headroom(ram=pages * size, swap=0, total_only=True) if pages > 0 and size > 0 else None   # -1: unknown


def check_images(shape: tuple[int, int, int, int], *, fix: str) -> None:
    """Refuse float32 images of ``shape`` [N, C, H, W] that cannot fit in the free memory even with swap, before
    they are made: a DataError saying their size and ``fix``. Warn where they fit only with swap."""
    need = 4 * math.prod(shape)
    n, c, h, w = shape
    check_bytes(need, f"the {n} images at {h} x {w} px, {c} channel{'s' if c > 1 else ''}, take {bytes_text(need)} of "
                      "memory as float32", fix=fix)


def check_bytes(need: int, what: str, *, fix: str) -> None:
    """Refuse ``need`` bytes that cannot fit in the free memory even with swap, before they are taken: a DataError
    saying ``what`` takes them and ``fix``. Warn where they fit only with swap."""
    room = headroom()
    if room is None or need <= room.ram:
        return
    if need > room.ram + room.swap:
        raise DataError(f"{what}, and {room.describe('for dpmed here')}: {fix}")
    _log.warning("%s, more than the %s free: the machine will swap, which is slow", what, bytes_text(room.ram))


def _kilobytes(field: str) -> int:
    value, unit = field.split()
    if unit != "kB":
        raise ValueError(f"unexpected unit in /proc/meminfo: {field!r}")
    return int(value) * 1024


def _zfs_cache_above_floor(proc: Path) -> int:
    """Bytes ZFS's ARC holds above its minimum (0 without ZFS): lines "name type value" of arcstats."""
    try:
        rows = [line.split() for line in (proc / "spl" / "kstat" / "zfs" / "arcstats").read_text().splitlines()]
        stats = {row[0]: int(row[2]) for row in rows if len(row) == 3 and row[2].isdigit()}
        return max(0, stats["size"] - stats["c_min"])
    except (OSError, KeyError, ValueError):
        return 0


def _cgroup_room(proc: Path, cgroups: Path) -> int | None:
    """The least room (limit - usage + file cache, in bytes) among this process's cgroup and its ancestors; None
    without limits."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":                                     # v2: one hierarchy
            folder, limit, usage = cgroups / path.lstrip("/"), "memory.max", "memory.current"
            cache = ("active_file", "inactive_file")
        elif "memory" in controllers.split(","):                  # v1: the memory controller's hierarchy
            folder, limit, usage = cgroups / "memory" / path.lstrip("/"), "memory.limit_in_bytes", \
                "memory.usage_in_bytes"
            cache = ("total_active_file", "total_inactive_file")  # with its descendants', as its usage
        else:
            continue
        while True:
            try:
                cap = (folder / limit).read_text().strip()
                if cap != "max" and int(cap) < 1 << 60:          # v1 writes "no limit" as about 2^63
                    used = int((folder / usage).read_text().strip())
                    rooms.append(int(cap) - used + min(used, _file_cache(folder, cache)))
            except (OSError, ValueError):
                pass
            if folder in (cgroups, cgroups / "memory") or cgroups not in folder.parents:
                break
            folder = folder.parent
    return min(rooms) if rooms else None


def _file_cache(folder: Path, keys: tuple[str, str]) -> int:
    """Bytes of file cache (active and inactive file pages, which the kernel reclaims under the limit) in a cgroup's
    memory.stat; 0 where it cannot be read. Tmpfs and shared memory are not among them: they are anonymous pages."""
    try:
        rows = [line.split() for line in (folder / "memory.stat").read_text().splitlines()]
        stats = {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit()}
        return sum(stats.get(key, 0) for key in keys)
    except OSError:
        return 0
