"""What a tenant's process makes of its own /proc entries, against the node daemon's watchdog
(review 2026-12-04 #4 and #7).

- #4: a process whose thread-group leader exited (a thread runs on) has no mounts or memory map
  at /proc/<pid>; on 0cee347 it got no verdict, no share of its claim's memory and could not be
  killed. Now it is read through a live thread, judged and killed; a process that cannot be read
  at all is judged unheld and counted in its pod's claim, never skipped.
- #7: a tenant decides how long its maps (65000 mappings of a 4 KiB path: 250 MiB) and mountinfo
  are; on 0cee347 the daemon read them whole (RSS +505 MiB under a 512 MiB limit). Now every
  /proc file is streamed under a cap; past it the process is unheld, and the reader's memory
  stays small (measured with tracemalloc, the reader's own allocations).
"""

from __future__ import annotations

import errno
import os
import tracemalloc
from pathlib import Path

import pytest

from dra._runtime import procinfo
from tests.watchdog.watchdog_rig import (
    FakeProc,
    GiB,
    Rig,
    fake_rig,
    mapper_program,
    pod_cgroup,
    rig,
    stub_nvml,
    zombie_program,
)

__all__ = ["fake_rig", "rig", "stub_nvml"]  # the rig's fixtures, used here
MiB = 1 << 20


@pytest.fixture(scope="module")
def zombie(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zombie_program(tmp_path_factory.mktemp("zombie"))


@pytest.fixture(scope="module")
def mapper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mapper_program(tmp_path_factory.mktemp("mapper"))


def state(stat_path: str) -> str:
    return Path(stat_path).read_text().rsplit(")", 1)[1].split()[0]


def leader_gone_thread_waiting(pid: int) -> bool:
    tids = [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]
    return state(f"/proc/{pid}/stat") == "Z" and len(tids) == 1 and state(f"/proc/{pid}/task/{tids[0]}/stat") == "S"


def hook_maps_line(rig: Rig) -> bytes:
    """The maps line of the claim's hook library mapped executable (by its device and inode)."""
    st = os.stat(rig.hset.path / "libvgpu.so")
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    return f"7f0000000000-7f0000001000 r-xp 00000000 {dev} {st.st_ino}   /usr/lib/hookcore/libvgpu.so\n".encode()


def test_a_process_whose_leader_exited_is_judged_counted_and_killed(rig: Rig, zombie: Path) -> None:
    """review 2026-12-04 #4 (W2): a static program whose main thread exits (SYS_exit) while a
    second thread runs on, listed with 40 GiB on a 4 GiB claim whose action is kill: unheld and
    over-quota at the first poll, killed through a pidfd on its thread-group ID."""
    c = rig.claim(memory=4 * GiB, action="kill")
    z = rig.start(c, [str(zombie)], ready=leader_gone_thread_waiting)
    with pytest.raises(OSError) as unreadable:  # what hid it on 0cee347
        Path(f"/proc/{z}/mountinfo").read_text()
    assert unreadable.value.errno == errno.EINVAL
    rig.on_gpu(z, c.device, 40 * GiB)
    got = rig.watchdog().poll()
    assert sorted((v.kind, v.pid) for v in got) == [("over-quota", z), ("unheld", z)]
    assert all(v.claim is not None and v.claim.uid == c.uid for v in got)
    assert f"process {z} killed (SIGKILL)" in [v.outcome for v in got]
    assert rig.wait_gone(z) == -9


def test_a_process_the_watchdog_cannot_read_is_judged_never_skipped(fake_rig: Rig, tmp_path: Path) -> None:
    """review 2026-12-04 #4, the fallback: processes whose mountinfo and maps cannot be read at all
    are unheld; one in the pod of a claim's process on that device counts in that claim's memory
    (and is the one the over-quota names), one in no pod is in no claim."""
    c = fake_rig.claim(memory=4 * GiB)
    hooks = fake_rig.state / "hooks"
    proc = FakeProc(tmp_path / "proc", caps=1 << procinfo.CAP_SYS_PTRACE)
    proc.process(1001, cgroup=pod_cgroup(c.pod_uid), mountinfo=FakeProc.claim_mount(hooks, c.uid),
                 maps=hook_maps_line(fake_rig))
    proc.process(1002, cgroup=pod_cgroup(c.pod_uid), mountinfo=None, maps=None)
    proc.process(1003, mountinfo=None, maps=None)
    fake_rig.on_gpu(1001, c.device, GiB)
    fake_rig.on_gpu(1002, c.device, 4 * GiB + 128 * MiB)  # in two processes: 1 GiB over 4 GiB + 2 x 64 MiB
    fake_rig.on_gpu(1003, c.device, GiB)
    wd = fake_rig.watchdog(proc=proc.root)
    assert wd.maps
    got = {(v.kind, v.pid): v for v in wd.poll()}
    assert set(got) == {("unheld", 1002), ("unheld", 1003), ("over-quota", 1002)}
    assert got[("unheld", 1002)].claim is not None and got[("unheld", 1002)].claim.uid == c.uid
    assert "could not be read in full" in got[("unheld", 1002)].message
    assert got[("unheld", 1003)].claim is None
    assert got[("over-quota", 1002)].amount == GiB
    assert wd.poll() == []  # judged once, and still counted: nothing new


def test_a_huge_maps_is_read_to_its_bound_and_the_process_judged(rig: Rig, mapper: Path) -> None:
    """review 2026-12-04 #7 (maps): a dynamic program (the hook preloaded) mapping a file with a
    3.9 KiB path 64000 times (maps of ~250 MiB): unheld ("past the watchdog's bound"), and the poll
    allocates under 1 MiB (0cee347 read the whole file: +505 MiB). The same program with 10
    mappings is held."""
    d = rig.root
    while len(str(d)) < 3700:
        d = d / ("m" * 200)
    d.mkdir(parents=True)
    target = d / "f"
    target.write_bytes(b"\0" * 4096)
    assert len(str(target)) > 3700
    c = rig.claim()
    few = rig.start(c, [str(mapper), str(target), "10"])
    many = rig.start(c, [str(mapper), str(target), "64000"])
    with open(f"/proc/{many}/maps", "rb") as f:  # the file is past the bound (read 8 MiB of it to see)
        assert len(f.read(8 * MiB)) == 8 * MiB
    rig.on_gpu(few, c.device, GiB)
    rig.on_gpu(many, c.device, GiB)
    wd = rig.watchdog()
    tracemalloc.start()
    try:
        got = wd.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(v.kind, v.pid) for v in got] == [("unheld", many)]
    assert "past the watchdog's bound" in got[0].message
    assert peak < MiB, peak


def test_a_huge_mountinfo_is_read_to_its_bound(fake_rig: Rig, tmp_path: Path) -> None:
    """review 2026-12-04 #7 (mountinfo): 8 MiB of mounts after the claim's own (as stacked bind
    mounts in a user namespace make them) and one 1 MiB line: the claim found before the bound
    stands, the process is unheld in it, and reading it allocates under 512 KiB."""
    c = fake_rig.claim()
    hooks = fake_rig.state / "hooks"
    filler = "1 1 8:1 /x /y rw - ext4 /dev/x rw\n"
    text = FakeProc.claim_mount(hooks, c.uid) + "2 1 8:1 /" + "z" * MiB + " /z rw - ext4 /dev/x rw\n" + \
        filler * (8 * MiB // len(filler))
    proc = FakeProc(tmp_path / "proc", caps=1 << procinfo.CAP_SYS_PTRACE)
    proc.process(2001, cgroup=pod_cgroup(c.pod_uid), mountinfo=text, maps=hook_maps_line(fake_rig))
    fake_rig.on_gpu(2001, c.device, GiB)
    wd = fake_rig.watchdog(proc=proc.root)
    tracemalloc.start()
    try:
        w = procinfo.workload(proc.root, 2001, wd.hooks_fs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert w is not None and w.claims == {c.uid} and not w.complete
    assert peak < 512 * 1024, peak
    got = wd.poll()
    assert [(v.kind, v.pid, v.claim.uid if v.claim else None) for v in got] == [("unheld", 2001, c.uid)]


def test_every_proc_reader_is_bounded(tmp_path: Path) -> None:
    """review 2026-12-04 #7: the line reader stops past its cap (Overflow), skips an overlong line,
    and each small file is read to `SMALL_MAX` at most."""
    big = tmp_path / "big"
    big.write_bytes(b"x" * (procinfo.LINE_MAX * 3) + b"\nshort\n")
    assert list(procinfo.lines(str(big), 1 << 20)) == [b"short\n"]
    with pytest.raises(procinfo.Overflow):
        list(procinfo.lines(str(big), procinfo.LINE_MAX))
    proc = FakeProc(tmp_path / "proc")
    d = proc.process(7, cgroup="0::/" + "a" * (4 * procinfo.SMALL_MAX) + "\n")
    (d / "status").write_text("Name:\tx\n" + "Pad:\t" + "0" * (2 * procinfo.SMALL_MAX) + "\nNStgid:\t7\t1\n")
    assert procinfo.ns_tgid(proc.root, 7) is None  # past its bound: not told
    w = procinfo.workload(proc.root, 7, procinfo.HooksFs("1:1", "/h"))
    assert w is not None and w.pod_uid is None
