"""The driver's own processes on a device (an MPS server it started) are not a tenant's, and no
tenant can pass for one (review 2026-12-04 #11, the watchdog's half).

On 0cee347 the MPS server was a GPU process in no claim: unheld at each start, a tainted GPU
under ``--watchdog=taint``. Now the driver lists it with ``DeviceProcess.system`` and the watchdog
neither judges it nor counts it in a claim. That field comes from the driver alone (the PIDs it
started), never from /proc: a tenant process named, linked and placed like the server is judged as
any other.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from tests.watchdog.watchdog_rig import GiB, Rig, rig, static_sleeper, stub_nvml

__all__ = ["rig", "static_sleeper", "stub_nvml"]  # the rig's fixtures, used here
SERVER = "nvidia-cuda-mps-server"


def driver_runs(rig: Rig, pids: set[int]) -> None:
    """The driver lists `pids` as its own (as hami-core-gpu does for its MPS servers' PIDs)."""
    listed = rig.driver.processes
    rig.driver.processes = lambda: [  # type: ignore[method-assign]
        dataclasses.replace(p, system="mps-server" if p.pid in pids else None) for p in listed()]


def test_the_drivers_own_process_is_neither_judged_nor_counted_in_a_claim(rig: Rig) -> None:
    """review 2026-12-04 #11: the driver's server (no hook, 10 GiB) as a host process, and one
    whose mounts happen to name a 4 GiB claim: no verdict under kill, nothing charged to the claim;
    the device's process count includes them."""
    c = rig.claim(memory=4 * GiB, action="kill")
    host_server = rig.start(None, ["sleep", "300"])
    claim_server = rig.start(c, ["sleep", "301"])
    tenant = rig.start(c, ["sleep", "302"])
    driver_runs(rig, {host_server, claim_server})
    rig.on_gpu(host_server, c.device, 10 * GiB)
    rig.on_gpu(claim_server, c.device, 10 * GiB)
    rig.on_gpu(tenant, c.device, GiB)
    wd = rig.watchdog(action="kill")
    assert wd.poll() == [] and wd.poll() == []
    assert rig.alive(host_server) and rig.alive(claim_server) and rig.alive(tenant)
    assert {s.proc.pid for s in wd.identifier.procs.values()} == {tenant}
    assert rig.registry.get_sample_value("dra_device_processes", {"driver": rig.driver.name, "device": c.device}) == 3
    assert rig.registry.get_sample_value("dra_device_processes_unheld",
                                         {"driver": rig.driver.name, "device": c.device}) == 0


def test_a_tenant_cannot_pass_for_the_drivers_process(rig: Rig, static_sleeper: Path, tmp_path: Path) -> None:
    """review 2026-12-04 #11, hostile: static programs called ``nvidia-cuda-mps-server`` (comm,
    argv[0], executable name), one in a claim whose action is kill, one in a pod with no claim,
    beside the driver's real server: both are unheld, the one in the claim is killed, the server
    is left alone."""
    fake = tmp_path / SERVER
    shutil.copy(static_sleeper, fake)
    c = rig.claim(action="kill")
    server = rig.start(None, ["sleep", "300"])
    in_claim = rig.start(c, [str(fake)])
    in_pod = rig.start(None, [str(fake)], pod_uid="7e1c0a55-0000-4000-8000-00000000c001")
    assert Path(f"/proc/{in_claim}/comm").read_text().strip() == SERVER[:15]
    driver_runs(rig, {server})
    for pid in (server, in_claim, in_pod):
        rig.on_gpu(pid, c.device, GiB)
    got = {v.pid: v for v in rig.watchdog().poll()}
    assert {(v.kind, pid) for pid, v in got.items()} == {("unheld", in_claim), ("unheld", in_pod)}
    assert got[in_claim].outcome == f"process {in_claim} killed (SIGKILL)"
    assert rig.wait_gone(in_claim) == -9
    assert rig.alive(server) and rig.alive(in_pod)
