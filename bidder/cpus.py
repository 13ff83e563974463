"""How many CPUs this process may use: its affinity, capped by its cgroup's CPU quota.

`os.cpu_count()` is the host's count. In a container limited to 2 CPUs on a 64-core host it
says 64, and 64 workers would share 2 CPUs' worth of time: throttled at every quota period,
with a pool of connections each. `bidder serve` without `--workers` starts this many instead.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(affinity: int, cgroup_root: Path, self_cgroup: str) -> int:
    """The CPUs a process may use: `affinity` (how many CPUs it may be scheduled on) capped by
    the tightest CPU quota of its cgroup and the cgroup's ancestors, rounded down (a quota of
    1.5 CPUs gives 1: a second worker would be throttled in every period), and at least 1.

    `self_cgroup` is the text of /proc/self/cgroup; `cgroup_root` where the hierarchy is
    mounted. Both cgroup v2 (`cpu.max`: "QUOTA PERIOD" or "max PERIOD") and v1
    (`cpu.cfs_quota_us`, -1 for none, and `cpu.cfs_period_us` under the `cpu` controller)."""
    limit = float(max(1, affinity))
    for folder in _cgroup_folders(cgroup_root, self_cgroup):
        quota = _quota(folder)
        if quota is not None:
            limit = min(limit, quota)
    return max(1, math.floor(limit))


def _cgroup_folders(root: Path, self_cgroup: str) -> list[Path]:
    """The process's cgroup folder and each ancestor up to the mount point, for v2 and for
    the v1 `cpu` controller. In a container (its own cgroup namespace) the path is `/`, and
    the mount point itself carries the container's limit."""
    folders: list[Path] = []
    for line in self_cgroup.splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":
            base = root
        elif "cpu" in controllers.split(","):
            names = (controllers, "cpu", "cpu,cpuacct")
            base = next((root / n for n in names if (root / n).is_dir()), root / "cpu")
        else:
            continue
        parts = [p for p in path.strip().split("/") if p and p != ".."]
        folders.extend(base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1))
    return folders or [root]


def _quota(folder: Path) -> float | None:
    """The CPU quota set on this cgroup folder in CPUs, None when unlimited or unreadable."""
    try:
        fields = (folder / "cpu.max").read_text().split()
        if len(fields) == 2 and fields[0] != "max":
            return int(fields[0]) / int(fields[1])
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def process_cpus() -> int:
    """`usable_cpus` for this process, from the running system."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        affinity = os.cpu_count() or 1
    try:
        self_cgroup = SELF_CGROUP.read_text()
    except OSError:
        self_cgroup = ""
    return usable_cpus(affinity, CGROUP_ROOT, self_cgroup)
