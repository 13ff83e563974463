"""`bidder serve`'s default worker count: affinity capped by the cgroup CPU quota (v1 and v2)."""

from __future__ import annotations

from pathlib import Path

from bidder.cpus import usable_cpus

V2_CONTAINER = "0::/\n"


def test_v2_quota_caps_the_affinity(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("200000 100000\n")  # 2 CPUs' worth per period
    assert usable_cpus(64, tmp_path, V2_CONTAINER) == 2


def test_v2_without_quota_is_the_affinity(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(6, tmp_path, V2_CONTAINER) == 6


def test_a_fractional_quota_rounds_down_but_never_below_one(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus(8, tmp_path, V2_CONTAINER) == 1
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert usable_cpus(8, tmp_path, V2_CONTAINER) == 1


def test_affinity_below_the_quota_wins(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("800000 100000\n")
    assert usable_cpus(3, tmp_path, V2_CONTAINER) == 3


def test_v2_an_ancestor_quota_applies_to_the_process_cgroup(tmp_path: Path) -> None:
    """On a host (no cgroup namespace) the process sits deep in the tree; a limit set on the
    slice above it binds it too, and the tightest one wins."""
    slice_dir = tmp_path / "system.slice"
    service = slice_dir / "bidder.service"
    service.mkdir(parents=True)
    (slice_dir / "cpu.max").write_text("300000 100000\n")
    (service / "cpu.max").write_text("max 100000\n")
    assert usable_cpus(16, tmp_path, "0::/system.slice/bidder.service\n") == 3


def test_v1_cfs_quota_and_period(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu,cpuacct"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("400000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    text = "12:memory:/\n4:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n"
    assert usable_cpus(32, tmp_path, text) == 4


def test_v1_quota_minus_one_means_unlimited(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus(5, tmp_path, "3:cpu:/\n") == 5


def test_no_cgroup_files_at_all_is_the_affinity(tmp_path: Path) -> None:
    assert usable_cpus(7, tmp_path / "absent", "") == 7
    assert usable_cpus(0, tmp_path / "absent", "") == 1


def test_unreadable_quota_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("garbage\n")
    assert usable_cpus(4, tmp_path, V2_CONTAINER) == 4
