"""The watchdog takes nothing from a claim's ledger, the one file a claim's containers can write
(review 2026-12-04 #2 and #3).

- #2: the ledger is read into private memory with a deadline (`hookcore.read_ledger`), never
  mapped: a tenant truncating and restoring it in a loop cannot fault the node daemon (SIGBUS on
  0cee347, where the watchdog mapped it).
- #3: quotas are the daemon's own (its record of the claim), so a tenant rewriting its ledger's
  limits changes no verdict, also across a daemon restart (W4); a ledger slot is the tenant's
  word: a forged live slot hides no static binary where maps are readable, and gives no
  authority where they are not (W5).
"""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from truncate_loop import truncate_until_exit

import hookcore
from dra._runtime import procinfo
from tests.watchdog.watchdog_rig import FakeProc, GiB, Rig, fake_rig, pod_cgroup, rig, static_sleeper, stub_nvml

__all__ = ["fake_rig", "rig", "static_sleeper", "stub_nvml"]  # the rig's fixtures, used here

ROOT = Path(__file__).resolve().parents[2]
# The ledger's layout (hookcore/core/internal.h): device 0 at 4096 (uuid[64], mem_limit u64,
# sm_limit u32), slots from 12288, 256 bytes each (owner word u64, pid i32, pad, start_time u64);
# the header's slot high-water mark at 64. An OFD lock on a slot's first byte means "its owner lives".
DEV0_MEM_LIMIT, DEV0_SM_LIMIT, SLOTS, SLOT_HWM = 4096 + 64, 4096 + 72, 12288, 64
SLOT_LIVE = (1 << 2) | 2


def forge_slot(ledger: Path, slot: int, pid: int, start: int) -> int:
    """What a tenant can do in a few lines: write a live slot for (`pid`, `start`) and hold its OFD
    lock (as a live hook does). The open descriptor: the lock lasts until it is closed."""
    fd = os.open(ledger, os.O_RDWR)
    off = SLOTS + 256 * slot
    os.pwrite(fd, struct.pack("<QiIQ", SLOT_LIVE, pid, 0, start), off)
    hwm = struct.unpack("<I", os.pread(fd, 4, SLOT_HWM))[0]
    os.pwrite(fd, struct.pack("<I", max(hwm, slot + 1)), SLOT_HWM)
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, off, 1, 0) + b"\0" * 4)
    return fd


def gauge(rig: Rig, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(generate_latest(rig.registry).decode()):
        for sample in fam.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels}")


def live_slots(ledger: Path) -> set[tuple[int, int]]:
    return {(p.pid, p.start_time) for p in hookcore.read_ledger(ledger).processes}


def verdicts(rig: Rig, polls: int = 4, **settings: object) -> list[tuple[str, int | None]]:
    """A freshly started watchdog (a daemon restart: nothing cached) polled `polls` times, a second apart."""
    rig.registry = CollectorRegistry()
    wd = rig.watchdog(share_window=2, **settings)
    got = []
    for _ in range(polls):
        got += [(v.kind, v.pid) for v in wd.poll()]
        rig.now += 1
    return sorted(got, key=str)


def test_w4_a_tenants_quota_in_its_ledger_changes_no_verdict_across_a_restart(rig: Rig) -> None:
    """review 2026-12-04 #3 (W4): the tenant writes mem_limit = UINT64_MAX (unlimited) and
    sm_limit = 100 into its ledger; a restarted watchdog still judges 40 GiB at 100% against the
    claim's 4 GiB / 30%."""
    c = rig.claim(memory=4 * GiB, cores=30)
    pid = rig.start(c, ["sleep", "300"])
    rig.on_gpu(pid, c.device, 40 * GiB, 100)
    before = verdicts(rig)
    assert before == [("over-quota", pid), ("over-share", pid)]
    ledger = rig.state / "hooks" / c.uid / "ledger"
    with ledger.open("r+b") as f:  # through the claim's read-write mount: the same file
        f.seek(DEV0_MEM_LIMIT)
        f.write(struct.pack("<QI", (1 << 64) - 1, 100))
    forged = hookcore.read_ledger(ledger).devices[0]
    assert (forged.uuid, forged.memory_limit, forged.sm_limit) == (c.gpu_uuid, None, 100)  # what 0cee347 believed
    assert verdicts(rig) == before
    rig.registry = CollectorRegistry()
    wd = rig.watchdog()
    wd.poll()
    assert wd.records.claims[c.uid].memory == {c.device: 4 * GiB} and wd.records.claims[c.uid].cores == {c.device: 30}


def test_w5_a_forged_live_slot_hides_no_static_binary(rig: Rig, static_sleeper: Path) -> None:
    """review 2026-12-04 #3 (W5): a static binary, and a live slot with its PID and start time
    forged into the claim's ledger (lock held): with maps readable (the chart's default) it is
    unheld and killed all the same; on 0cee347 the slot made it held."""
    c = rig.claim(action="kill")
    static = rig.start(c, [str(static_sleeper)])
    ledger = rig.state / "hooks" / c.uid / "ledger"
    key = (procinfo.ns_tgid(Path("/proc"), static), procinfo.start_time(Path("/proc"), static))
    fd = forge_slot(ledger, 0, *key)  # type: ignore[arg-type]
    try:
        assert key in live_slots(ledger)  # the forgery reads as a live registration
        rig.on_gpu(static, c.device, GiB)
        got = rig.watchdog().poll()
        assert [(v.kind, v.pid, v.outcome) for v in got] == [("unheld", static, f"process {static} killed (SIGKILL)")]
        assert rig.wait_gone(static) == -9
    finally:
        os.close(fd)


def test_w5_without_maps_a_slot_is_unverified_and_shields_nothing(rig: Rig, static_sleeper: Path) -> None:
    """review 2026-12-04 #3 (W5), where the daemon cannot read maps (no CAP_SYS_PTRACE): a forged
    slot makes the static binary only "registered (unverified)" (counted as such); its device
    memory is judged against the daemon's quota and the kill takes it; without a slot it would be
    unheld after two polls."""
    c = rig.claim(memory=4 * GiB, action="kill")
    static = rig.start(c, [str(static_sleeper)])
    bare = rig.start(c, [str(static_sleeper)])
    ledger = rig.state / "hooks" / c.uid / "ledger"
    fd = forge_slot(ledger, 3, procinfo.ns_tgid(Path("/proc"), static) or 0,
                    procinfo.start_time(Path("/proc"), static) or 0)
    try:
        rig.on_gpu(static, c.device, 3 * GiB)
        rig.on_gpu(bare, c.device, GiB)
        wd = rig.watchdog(maps=False)
        assert not wd.maps
        assert wd.poll() == []  # not decided yet: a hook registers a process at its first CUDA call
        rig.now += 1
        assert [(v.kind, v.pid) for v in wd.poll()] == [("unheld", bare)]  # no slot: unheld
        assert gauge(rig, "dra_device_processes_unverified", device=c.device) == 1
        rig.on_gpu(static, c.device, 40 * GiB)  # the slot's holder holds what NVML says
        got = wd.poll()
        assert [(v.kind, v.pid, v.outcome) for v in got] == [
            ("over-quota", static, f"process {static} killed (SIGKILL)")]
        assert rig.wait_gone(static) == -9
    finally:
        os.close(fd)


def test_a_ledger_truncated_in_a_loop_never_kills_the_daemon(fake_rig: Rig, tmp_path: Path) -> None:
    """review 2026-12-04 #2: the tenant truncates and restores its ledger in a loop while the
    watchdog (in a child, so that a SIGBUS cannot take the test runner along) reads it at every
    poll (no maps: the ledger is consulted). The child polls until it has seen both whole and
    truncated ledgers many times (counted reads, not time), and exits normally (SIGBUS on 0cee347)."""
    c = fake_rig.claim()
    hooks = fake_rig.state / "hooks"
    ledger = hooks / c.uid / "ledger"
    good = ledger.read_bytes()
    proc = FakeProc(tmp_path / "proc")
    proc.process(4242, mountinfo=FakeProc.claim_mount(hooks, c.uid), cgroup=pod_cgroup(c.pod_uid))
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import hookcore
        from prometheus_client import CollectorRegistry
        from dra._runtime.checkpoint import Checkpoint
        from dra._runtime.watchdog.loop import Watchdog
        from dra._runtime.watchdog.model import WatchdogSettings
        from dra.driver import DeviceProcess

        counts = {{"ok": 0, "refused": 0}}
        real = hookcore.read_ledger

        def counted(path, timeout=1.0):
            try:
                snap = real(path, timeout)
            except OSError:
                counts["refused"] += 1
                raise
            counts["ok"] += 1
            return snap

        hookcore.read_ledger = counted

        class Driver:
            name = {fake_rig.driver.name!r}

            def processes(self):
                return [DeviceProcess({c.device!r}, {c.gpu_uuid!r}, 4242, 1 << 30)]

        wd = Watchdog(Driver(), Checkpoint(Path({str(fake_rig.state)!r})).records, Path({str(hooks)!r}),
                      type("E", (), {{"emit": lambda self, v: None}})(), CollectorRegistry(),
                      WatchdogSettings(proc=Path({str(proc.root)!r}), maps=False))
        while (counts["ok"] < 50 or counts["refused"] < 50) and wd.polls < 50000:
            wd.poll()
        print("DONE", wd.polls, counts["ok"], counts["refused"], flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    flips = truncate_until_exit(ledger, good, child)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, (child.returncode, err[-3000:])  # -7 (SIGBUS) on 0cee347
    word, polls, ok, refused = out.split()
    assert word == "DONE" and int(ok) >= 50 and int(refused) >= 50, (out, flips)
    assert int(polls) >= int(ok)  # one read per poll: the daemon kept polling throughout
