"""Every verdict and action of the watchdog, on the CPU: the real driver's NVML path against the stub
process list, real processes in a claim's mounts and a pod's cgroup (see conftest.py)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from kube_helpers import wait_for
from prometheus_client import generate_latest
from watchdog_rig import GiB, Rig

from dra._runtime.watchdog import verdicts
from dra.driver import Taint

MiB = 1 << 20


def metric(rig: Rig, line_start: str) -> float:
    for line in generate_latest(rig.registry).decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no series {line_start}")


def test_a_process_holding_the_hook_within_its_quota_gets_no_verdict(rig: Rig) -> None:
    c = rig.claim(memory=4 * GiB, cores=30)
    pid = rig.start(c, ["sleep", "300"])  # dynamic: the claim's /etc/ld.so.preload loads the hook
    rig.on_gpu(pid, c.device, 2 * GiB, 25)
    wd = rig.watchdog(share_window=2)
    for _ in range(4):
        assert wd.poll() == []
        rig.now += 1
    assert metric(rig, 'dra_device_processes_unheld{device="hami-gpu-0"') == 0
    assert metric(rig, 'dra_device_processes{device="hami-gpu-0"') == 1


def test_a_static_binary_in_the_claims_container_is_unheld_on_its_pod_and_claim(rig: Rig, static_sleeper: Path) -> None:
    c = rig.claim()
    held = rig.start(c, ["sleep", "300"])
    static = rig.start(c, [str(static_sleeper)])
    rig.on_gpu(held, c.device, 1 * GiB)
    rig.on_gpu(static, c.device, 1 * GiB)
    wd = rig.watchdog()
    got = wd.poll()
    assert [(v.kind, v.pid, v.pod_uid, v.claim.uid if v.claim else None) for v in got] == [
        ("unheld", static, c.pod_uid, c.uid)]
    assert len(got[0].container_id or "") == 64
    assert "without the claim's hook loaded" in got[0].message and c.name in got[0].message
    assert rig.events.got == got  # one Event per verdict
    assert wd.poll() == []  # once, while it lasts
    assert metric(rig, 'dra_device_processes_unheld{device="hami-gpu-0"') == 1
    assert metric(rig, 'dra_watchdog_verdicts_total{driver="hami-core-gpu.project-hami.io",verdict="unheld"}') == 1
    assert rig.alive(static) and rig.alive(held)  # report only


def test_a_process_in_no_claim_is_unheld_and_never_killed(rig: Rig) -> None:
    host = rig.start(None, ["sleep", "300"])  # a host process (no pod, no claim)
    other_pod = "0b7a0e1c-1111-4222-8333-444455556666"
    pod = rig.start(None, ["sleep", "301"], pod_uid=other_pod)  # a pod given the GPU some other way
    rig.on_gpu(host, "hami-gpu-2", 3 * GiB)
    rig.on_gpu(pod, "hami-gpu-2", 1 * GiB)
    got = {v.pid: v for v in rig.watchdog(action="kill").poll()}
    assert set(got) == {host, pod}
    assert got[host].claim is None and got[host].pod_uid is None and "a host process" in got[host].message
    assert got[pod].pod_uid == other_pod and got[pod].pod_uids == (other_pod,)
    assert all("not killed" in v.outcome and "no claim" in v.outcome for v in got.values())
    assert rig.alive(host) and rig.alive(pod)
    assert metric(rig, 'dra_watchdog_actions_total{action="kill",driver="hami-core-gpu.project-hami.io",'
                       'result="refused"}') == 2


def test_kill_takes_the_unheld_process_and_leaves_its_neighbour(rig: Rig, static_sleeper: Path) -> None:
    c = rig.claim(action="kill")  # the claim's config: watchdogAction: kill, the daemon says report
    held = rig.start(c, ["sleep", "300"])
    static = rig.start(c, [str(static_sleeper)])
    rig.on_gpu(held, c.device, 1 * GiB)
    rig.on_gpu(static, c.device, 1 * GiB)
    got = rig.watchdog(action="report").poll()
    assert [(v.kind, v.pid, v.action) for v in got] == [("unheld", static, "kill")]
    assert got[0].outcome == f"process {static} killed (SIGKILL)"
    child = next(ch for ch in rig.children if ch.pid == static)
    assert child.wait(timeout=10) != 0
    assert rig.alive(held)


def test_over_quota_counts_the_claims_processes_beyond_quota_and_tolerance(rig: Rig) -> None:
    c = rig.claim(memory=4 * GiB, action="kill")
    small = rig.start(c, ["sleep", "300"])
    big = rig.start(c, ["sleep", "301"])
    neighbour_claim = rig.claim(memory=4 * GiB)
    neighbour = rig.start(neighbour_claim, ["sleep", "302"])
    rig.on_gpu(neighbour, neighbour_claim.device, 4 * GiB + 128 * MiB)  # 4 GiB + the tolerance: at the limit
    rig.on_gpu(small, c.device, 1 * GiB)
    rig.on_gpu(big, c.device, 3 * GiB + 256 * MiB)  # in 2 processes: 4 GiB + 2 x 128 MiB, not over
    wd = rig.watchdog(memory_tolerance=128 * MiB)
    assert wd.poll() == []
    rig.on_gpu(big, c.device, 3 * GiB + 768 * MiB)  # now 512 MiB over
    got = wd.poll()
    assert [(v.kind, v.claim.uid if v.claim else None, v.pid) for v in got] == [("over-quota", c.uid, big)]
    assert got[0].amount == 512 * MiB and "512 MiB" in got[0].message
    assert metric(rig, f'dra_claim_memory_over_quota_bytes{{claim="{c.name}"') == 512 * MiB
    assert rig.children[[ch.pid for ch in rig.children].index(big)].wait(timeout=10) != 0
    assert rig.alive(small) and rig.alive(neighbour)


def test_a_claims_excess_reads_zero_once_its_processes_left_the_device(rig: Rig) -> None:
    """The gauges an alert reads: a claim over quota (or share) whose processes all left the device
    is over by nothing, not by its last excess, until the claim ends and its series go."""
    c = rig.claim(memory=GiB, cores=30)
    pid = rig.start(c, ["sleep", "300"])
    rig.on_gpu(pid, c.device, 2 * GiB, 90)
    wd = rig.watchdog(memory_tolerance=0, share_window=1, share_tolerance=0)
    kinds = []
    for _ in range(3):
        kinds += [v.kind for v in wd.poll()]
        rig.now += 1
    assert kinds == ["over-quota", "over-share"]
    assert metric(rig, f'dra_claim_memory_over_quota_bytes{{claim="{c.name}"') == GiB
    assert metric(rig, f'dra_claim_compute_over_share_percent{{claim="{c.name}"') == 60
    rig.off_gpu(pid)
    assert wd.poll() == []
    assert metric(rig, f'dra_claim_memory_over_quota_bytes{{claim="{c.name}"') == 0
    assert metric(rig, f'dra_claim_compute_over_share_percent{{claim="{c.name}"') == 0
    rig.end(c)
    wd.poll()
    assert f'claim="{c.name}"' not in generate_latest(rig.registry).decode()


def test_over_share_needs_a_full_window_and_fires_again_after_it_cleared(rig: Rig) -> None:
    c = rig.claim(cores=30)
    pid = rig.start(c, ["sleep", "300"])
    rig.on_gpu(pid, c.device, GiB, 80)
    wd = rig.watchdog(share_window=3, share_tolerance=10)
    verdicts = []
    for _ in range(5):
        verdicts.append([v.kind for v in wd.poll()])
        rig.now += 1
    # Samples at t=0,1,2 do not span the 3 s window; t=3 does.
    assert verdicts == [[], [], [], ["over-share"], []]
    assert metric(rig, f'dra_claim_compute_over_share_percent{{claim="{c.name}"') == 40
    rig.on_gpu(pid, c.device, GiB, 20)
    for _ in range(4):
        assert wd.poll() == []
        rig.now += 1
    rig.on_gpu(pid, c.device, GiB, 95)
    kinds = []
    for _ in range(5):
        kinds += [v.kind for v in wd.poll()]
        rig.now += 1
    assert kinds == ["over-share"]


def test_no_share_verdict_without_a_compute_limit_or_without_utilization(rig: Rig) -> None:
    whole = rig.claim(cores=100)
    a = rig.start(whole, ["sleep", "300"])
    rig.on_gpu(a, whole.device, GiB, 100)
    limited = rig.claim(device="hami-gpu-1", cores=10)
    b = rig.start(limited, ["sleep", "301"])
    rig.on_gpu(b, limited.device, GiB)  # NVML gives no utilization for it
    wd = rig.watchdog(share_window=2)
    for _ in range(5):
        assert wd.poll() == []
        rig.now += 1


def test_the_hooks_settings_win_over_the_allocation(rig: Rig) -> None:
    """A claim whose config lifts its compute limit (computeLimit: false) is enforced at 100
    cores by the hook although 20 were allocated: no over-share verdict for it. The hook's
    settings come from the daemon's record of the claim (what it wrote into the read-only config),
    not from the ledger (review 2026-12-04 #3)."""
    c = rig.claim(cores=20, hook_cores=100)
    pid = rig.start(c, ["sleep", "300"])
    rig.on_gpu(pid, c.device, GiB, 90)
    wd = rig.watchdog(share_window=2)
    for _ in range(4):
        assert wd.poll() == []
        rig.now += 1
    view = wd.records.claims[c.uid]
    assert view.cores == {c.device: 100} and view.memory == {c.device: 4 * GiB}


def test_taint_marks_the_device_until_the_claim_ends(rig: Rig, static_sleeper: Path) -> None:
    c = rig.claim(device="hami-gpu-5")
    static = rig.start(c, [str(static_sleeper)])
    rig.on_gpu(static, c.device, GiB)
    wd = rig.watchdog(action="taint")
    got = wd.poll()
    assert [v.kind for v in got] == ["unheld"] and "until the claim ends" in got[0].outcome
    assert wd.taints("hami-gpu-5") == (Taint("hami-core-gpu.project-hami.io/watchdog", "unheld", "NoSchedule"),)
    assert wd.taints("hami-gpu-0") == ()
    assert rig.taint_calls == 1 and rig.alive(static)
    wd.poll()
    assert wd.taints("hami-gpu-5") and rig.taint_calls == 1  # still there, no republish
    assert f'claim_uid="{c.uid}"' in generate_latest(rig.registry).decode()
    rig.end(c)  # unprepared: the claim is over
    wd.poll()
    assert wd.taints("hami-gpu-5") == () and rig.taint_calls == 2
    assert f'claim_uid="{c.uid}"' not in generate_latest(rig.registry).decode()  # its series went with it


def test_kill_refuses_a_recycled_pid(rig: Rig, static_sleeper: Path) -> None:
    """The verdict names (PID, start time); a process that is gone is not signalled."""
    c = rig.claim(action="kill")
    static = rig.start(c, [str(static_sleeper)])
    rig.on_gpu(static, c.device, GiB)
    wd = rig.watchdog()
    seen = wd.identifier.identify(rig.driver.processes(), wd.records.refresh())
    os.kill(static, 9)
    next(ch for ch in rig.children if ch.pid == static).wait(timeout=10)
    v = verdicts.unheld(seen[0], rig.driver.name, "kill")
    outcome = wd.actions.kill(v, seen)
    assert outcome.startswith("not killed"), outcome


def test_the_stub_process_list_skips_hostile_lines(rig: Rig, capfd: pytest.CaptureFixture[str]) -> None:
    c = rig.claim()
    pid = rig.start(c, ["sleep", "300"])
    _, index = rig.gpu(c.device)
    rig.procs_file.write_text(f"# comment\n\n{index} {pid} {GiB} 12\n{index} x 5\n{index} 77 5 101\n{index} 0 5\n"
                              f"{index} 78 5 12 extra\n99 79 5\n")
    got = rig.driver.processes()
    assert [(p.device, p.pid, p.memory, p.utilization) for p in got] == [(c.device, pid, GiB, 12.0)]
    assert capfd.readouterr().err.count("STUB_NVML_PROCESSES") >= 4


def test_a_gone_pid_or_unreadable_proc_is_skipped_not_judged(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    rig.on_gpu(2**22 + 12345, "hami-gpu-0", GiB)  # no such process here (beyond pid_max): another PID namespace
    wd = rig.watchdog()
    with caplog.at_level(logging.WARNING, logger="dra._runtime.watchdog"):
        for _ in range(4):
            assert wd.poll() == []
    blind = [r for r in caplog.records if "cannot see in /proc" in r.getMessage()]
    assert len(blind) == 1  # after three polls, once


def test_detection_time_of_the_running_thread(rig: Rig, static_sleeper: Path) -> None:
    """The running thread judges an unheld process on its first or second poll after the process
    appears on the GPU (with the poll at 1 s: within 2 s). Counted in polls, not timed: a busy
    machine delays polls, never the count."""
    c = rig.claim()
    wd = rig.watchdog()
    wd._clock = time.monotonic
    at_verdict: list[int] = []
    emit = rig.events.emit
    rig.events.emit = lambda v: (at_verdict.append(wd.polls), emit(v))[1]  # type: ignore[method-assign]
    wd.start()
    try:
        static = rig.start(c, [str(static_sleeper)])
        before = wd.polls
        rig.on_gpu(static, c.device, GiB)
        wait_for(lambda: rig.events.got, 60, 0.02, what="a verdict on the unheld process")
    finally:
        wd.stop()
    assert [v.pid for v in rig.events.got] == [static]
    # polls completed when the verdict was reported (the judging poll counts itself after): at most
    # one poll that may have read the GPU before the process appeared there, then the judging one
    assert at_verdict and at_verdict[0] - before <= 1, (before, at_verdict)


def test_a_claim_prepared_after_the_records_were_read_is_found(rig: Rig, static_sleeper: Path) -> None:
    """Records are cached while their stamp holds; a process whose mounts name a claim with a hook
    dir but no cached record makes the watchdog read them again (it is not 'in no claim')."""
    wd = rig.watchdog()
    wd.records.stamp = lambda: "never changes"
    assert wd.poll() == []
    c = rig.claim()
    held = rig.start(c, ["sleep", "300"])
    static = rig.start(c, [str(static_sleeper)])
    rig.on_gpu(held, c.device, GiB)
    rig.on_gpu(static, c.device, GiB)
    got = wd.poll()
    assert [(v.kind, v.pid, v.claim.uid if v.claim else None) for v in got] == [("unheld", static, c.uid)]


def test_without_maps_a_ledger_slot_only_spares_the_unheld_verdict(rig: Rig, static_sleeper: Path) -> None:
    """A daemon without CAP_SYS_PTRACE: nothing proves a process held. One the hook registered in the
    claim's ledger (stub CUDA under the hook) is "registered (unverified)": no unheld verdict, held
    stays unknown (review 2026-12-04 #3: the slot is the tenant's word); one with no slot is unheld
    after two polls."""
    import hookcore

    c = rig.claim(memory=4 * GiB)
    assert rig.driver.fake is not None
    env = {"LD_LIBRARY_PATH": str(hookcore.stub_dir()), **rig.driver.fake.container_env([c.gpu_uuid])}
    workload = hookcore.stub_dir().parent / "workload" / "cuda_workload"
    held = rig.start(c, [str(workload), "--hold", "300"], env=env)
    ledger = rig.state / "hooks" / c.uid / "ledger"

    def registered() -> bool:
        assert rig.alive(held), "the workload exited before the hook registered it"
        with hookcore.Ledger(ledger) as led:
            return any(p.state == "live" for p in led.processes())

    wait_for(registered, 20, 0.05, what="the hook to register the workload in the claim's ledger")
    static = rig.start(c, [str(static_sleeper)])
    rig.on_gpu(held, c.device, 2 * GiB)
    rig.on_gpu(static, c.device, GiB)
    wd = rig.watchdog(maps=False)
    assert wd.poll() == []  # the static one is not decided yet: the hook may register it a moment later
    rig.now += 1
    got = wd.poll()
    assert [(v.kind, v.pid) for v in got] == [("unheld", static)]
    rig.now += 1
    assert wd.poll() == []
    registered = next(s for s in wd.identifier.procs.values() if s.proc.pid == held)
    assert registered.registered and registered.held is None


def test_over_share_kill_takes_the_busiest_and_over_quota_taint_marks_the_device(rig: Rig) -> None:
    busy_claim = rig.claim(device="hami-gpu-1", cores=20, action="kill")
    calm = rig.start(busy_claim, ["sleep", "300"])
    busy = rig.start(busy_claim, ["sleep", "301"])
    rig.on_gpu(calm, busy_claim.device, GiB, 5)
    rig.on_gpu(busy, busy_claim.device, GiB, 60)
    fat_claim = rig.claim(device="hami-gpu-4", memory=2 * GiB, action="taint")
    fat = rig.start(fat_claim, ["sleep", "302"])
    rig.on_gpu(fat, fat_claim.device, 4 * GiB)  # 2 GiB + 64 MiB tolerance < 4 GiB
    wd = rig.watchdog(share_window=2)
    got = []
    for _ in range(4):
        got += wd.poll()
        rig.now += 1
    by_kind = {v.kind: v for v in got}
    assert set(by_kind) == {"over-share", "over-quota"}
    assert by_kind["over-share"].pid == busy and by_kind["over-share"].outcome == f"process {busy} killed (SIGKILL)"
    assert next(c for c in rig.children if c.pid == busy).wait(timeout=10) != 0 and rig.alive(calm)
    assert wd.taints("hami-gpu-4") == (Taint("hami-core-gpu.project-hami.io/watchdog", "over-quota", "NoSchedule"),)
    assert rig.alive(fat)


def test_a_claims_action_is_the_strongest_of_its_devices_configs(tmp_path: Path) -> None:
    """review 2026-12-04 #10 (L3): report < taint < kill across the claim's devices, whichever
    request's config comes last (on 0cee347 the last one won)."""
    from dra._runtime.checkpoint import PREPARED, ClaimRecord, DeviceRecord
    from dra._runtime.watchdog.records import claim_view

    def action(*configured: str | None) -> str | None:
        devices = tuple(DeviceRecord("d.example.com", f"r{i}", "pool", f"gpu-{i}",
                                     config={"watchdogAction": a} if a else {}) for i, a in enumerate(configured))
        rec = ClaimRecord("5f0e8d0e-0000-4000-8000-00000000d001", "ns", "c", PREPARED, "boot", devices=devices)
        view = claim_view(rec, "d.example.com", tmp_path)
        assert view is not None
        return view.action

    assert action("kill", "report") == action("report", "kill") == "kill"
    assert action("report", "taint") == action("taint", "report") == "taint"
    assert action("taint", "kill", "report") == "kill"
    assert action(None, "report") == "report" and action(None, None) is None
    assert action("explode", "report") == "report"  # not an action: ignored
