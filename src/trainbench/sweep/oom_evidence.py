"""Whether the kernel's out-of-memory killer, and not someone else, sent the SIGKILL that ended a cell.

A SIGKILL carries no sender. The machine-wide count of OOM kills (/proc/vmstat's oom_kill) rises as well when the
killer takes some other process while the cell runs, so on its own it proves nothing about the cell. Evidence
tied to the cell, any of:

- the kernel's log names the cell's process as the one it killed (`Killed process <pid>`, `oom-kill:...,pid=<pid>`);
- the cell's own memory cgroup (one the sweep's process is not in) counts an OOM kill while the cell ran;
- an OOM kill was counted (machine-wide or in the cgroup the cell shares) while the cell held at least half of the
  memory it could have (its cgroup's limit, else the machine's): the killer takes the largest process, and a
  process that large is it.

Without any, the reason says the sender is unknown.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

NEAR_LIMIT = 0.5  # the share of the memory it could have that makes a cell the killer's likely choice
_KMSG_RECORDS = 50_000  # the most log records read: the kernel's ring buffer holds fewer


class OomEvidence:
    """Watches one cell's process from its start to its death; `verdict()` says what ties a SIGKILL to memory."""

    def __init__(
        self,
        pid: int,
        *,
        vmstat: Path = Path("/proc/vmstat"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        kmsg: Path = Path("/dev/kmsg"),
        proc: Path = Path("/proc"),
    ) -> None:
        self.pid, self.vmstat, self.kmsg, self.proc = pid, vmstat, kmsg, proc
        self.cgroup = _memory_cgroup(proc / str(pid) / "cgroup", cgroup_root)
        own = _memory_cgroup(proc / "self" / "cgroup", cgroup_root)
        self.cgroup_is_its_own = self.cgroup is not None and self.cgroup != own
        self.machine_kills = _count(vmstat, "oom_kill")
        self.cgroup_kills = _cgroup_kills(self.cgroup)
        self.peak_bytes = 0
        self.sample()

    def sample(self) -> None:
        """Note the memory the cell's process and its children hold now (the peak is kept)."""
        import psutil

        try:
            process = psutil.Process(self.pid)
            tree = [process, *process.children(recursive=True)]
            held = sum(p.memory_info().rss for p in tree)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        self.peak_bytes = max(self.peak_bytes, held)

    def verdict(self) -> str | None:
        """What shows that the out-of-memory killer ended the cell, in a few words; None where nothing does."""
        if self._kernel_named_it():
            return "the kernel's log names its process"
        cgroup_rose = _rose(self.cgroup_kills, _cgroup_kills(self.cgroup))
        if cgroup_rose and self.cgroup_is_its_own:
            return "its memory cgroup counted an OOM kill"
        counted = cgroup_rose or _rose(self.machine_kills, _count(self.vmstat, "oom_kill"))
        limit = self._limit_bytes()
        if counted and limit and self.peak_bytes >= NEAR_LIMIT * limit:
            return (
                f"an OOM kill was counted while it held {self.peak_bytes / 2**30:.1f} of the "
                f"{limit / 2**30:.1f} GiB it could have"
            )
        return None

    def _kernel_named_it(self) -> bool:
        pattern = re.compile(rf"(Killed process {self.pid}\b|oom-kill:.*,pid={self.pid},)")
        try:
            descriptor = os.open(self.kmsg, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            for _ in range(_KMSG_RECORDS):
                try:
                    record = os.read(descriptor, 8192)
                except OSError as error:
                    if error.errno == errno.EPIPE:  # a record overwritten while reading: go on with the next
                        continue
                    return False  # EAGAIN: the end of the log
                if not record:
                    return False
                if pattern.search(record.decode("utf-8", "replace")):
                    return True
            return False
        finally:
            os.close(descriptor)

    def _limit_bytes(self) -> int | None:
        machine = _count(self.proc / "meminfo", "MemTotal:")
        limits = [machine * 1024] if machine else []
        if self.cgroup is not None:
            for name in ("memory.max", "memory.limit_in_bytes"):
                try:
                    text = (self.cgroup / name).read_text().strip()
                except OSError:
                    continue
                if text.isdigit():
                    limits.append(int(text))
        return min(limits) if limits else None


def _memory_cgroup(cgroup_file: Path, root: Path) -> Path | None:
    """The folder of a process's memory cgroup: v1's `memory` hierarchy, else v2's unified one."""
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return root / "memory" / path.lstrip("/")
        if controllers == "":
            unified = root / path.lstrip("/")
    return unified


def _cgroup_kills(cgroup: Path | None) -> int | None:
    if cgroup is None:
        return None
    for name in ("memory.events", "memory.oom_control"):  # v2, v1
        found = _count(cgroup / name, "oom_kill")
        if found is not None:
            return found
    return None


def _count(path: Path, key: str) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    found = re.search(rf"^{re.escape(key)}\s+(\d+)", text, flags=re.MULTILINE)
    return int(found.group(1)) if found else None


def _rose(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before
