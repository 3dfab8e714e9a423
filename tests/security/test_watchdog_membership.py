"""Claim membership by file identity, not by a path's ending (review 2026-12-04 #6).

On 0cee347 any mount on the hooks filesystem whose root ended in ``/hooks/<uid>`` made a process a
member of claim <uid>: a pod's emptyDir with ``subPath: hooks/<victim-uid>`` (kubelet's disk, the
same filesystem as the daemon's state) put the tenant's process in the victim's claim, whose quota
it then overran and whose process the kill took (W1). Now only a file mount of exactly the daemon's
``hooks/<uid>/config`` or ``ledger`` counts, and where the process's root is readable, the ledger
it sees must be the claim's file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra._runtime import procinfo
from dra._runtime.enforcement import RW
from dra.driver import Mount
from tests.watchdog.watchdog_rig import GiB, Rig, rig, static_sleeper, stub_nvml

__all__ = ["rig", "static_sleeper", "stub_nvml"]  # the rig's fixtures, used here
MiB = 1 << 20


def spoofs(rig: Rig, pod_uid: str, victim_uid: str) -> tuple[Mount, ...]:
    """The tenant's pod volumes: an emptyDir mounted with ``subPath: hooks/<victim>`` (a directory),
    and a file ``hooks/<victim>/ledger`` in another emptyDir, mounted by itself."""
    empty = rig.root / "pods" / pod_uid / "volumes" / "kubernetes.io~empty-dir"
    subdir = empty / "scratch" / "hooks" / victim_uid
    subdir.mkdir(parents=True)
    file = empty / "files" / "hooks" / victim_uid / "ledger"
    file.parent.mkdir(parents=True)
    file.write_bytes((rig.state / "hooks" / victim_uid / "ledger").read_bytes())
    return Mount(str(subdir), "/run/spoof/dir", RW), Mount(str(file), "/run/spoof/ledger", RW)


def assert_in_place(rig: Rig, pid: int, victim_uid: str) -> None:
    """The attack as the review made it: both spoofing mounts are on the hooks filesystem."""
    hooks = procinfo.hooks_fs(Path("/proc"), rig.state / "hooks")
    assert hooks is not None
    roots = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        roots[fields[3]] = fields[2]
    spoofed = [r for r in roots if r.endswith((f"/hooks/{victim_uid}", f"/hooks/{victim_uid}/ledger"))
               and "kubernetes.io~empty-dir" in r]
    assert len(spoofed) == 2 and all(roots[r] == hooks.dev for r in spoofed), roots


@pytest.mark.parametrize("maps", [True, False])
def test_w1_an_emptydir_named_hooks_uid_joins_no_claim_and_the_victim_lives(rig: Rig, maps: bool) -> None:
    """review 2026-12-04 #6 (W1): the tenant (its own claim on the victim's GPU, 1.7 GiB within its
    quota) mounts ``hooks/<victim>`` from an emptyDir, as a directory and as a file. The victim's
    claim (action kill) holds its quota plus the tolerance. The tenant's process stays in its own claim;
    no verdict names the victim's claim; the victim's process lives."""
    victim = rig.claim(memory=4 * GiB, action="kill")
    v = rig.start_hooked(victim)  # held (maps) and registered (the ledger, all a daemon without maps sees)
    rig.on_gpu(v, victim.device, 4 * GiB + 64 * MiB)  # its quota + the tolerance of 64 MiB: at the limit, not over
    tenant = rig.claim(device=victim.device, memory=2 * GiB)
    t = rig.start(tenant, ["sleep", "301"], mounts=spoofs(rig, tenant.pod_uid, victim.uid))
    rig.on_gpu(t, victim.device, int(1.7 * GiB))
    wd = rig.watchdog(maps=maps)
    assert_in_place(rig, t, victim.uid)
    got = []
    for _ in range(3):
        got += wd.poll()
        rig.now += 1
    assert not [x for x in got if x.claim is not None and x.claim.uid == victim.uid], got
    start = procinfo.start_time(Path("/proc"), t)
    assert start is not None
    member = wd.identifier.procs[(t, start)].claim
    assert member is not None and member.uid == tenant.uid
    assert rig.alive(v) and rig.alive(t)


def test_w1_spoofing_mounts_alone_put_a_process_in_no_claim_and_kill_spares_everyone(rig: Rig,
                                                                                   static_sleeper: Path) -> None:
    """review 2026-12-04 #6 (W1), a pod with no claim of its own: its process is in none of the
    driver's claims (unheld, never killed), and the victim's claim is not charged with it."""
    victim = rig.claim(memory=4 * GiB, action="kill")
    v = rig.start(victim, ["sleep", "300"])
    rig.on_gpu(v, victim.device, 4 * GiB + 64 * MiB)
    pod = "7e1c0a55-0000-4000-8000-00000000b001"
    t = rig.start(None, [str(static_sleeper)], pod_uid=pod, mounts=spoofs(rig, pod, victim.uid))
    rig.on_gpu(t, victim.device, 2 * GiB)
    wd = rig.watchdog(action="kill")
    assert_in_place(rig, t, victim.uid)
    got = wd.poll()
    assert [(x.kind, x.pid, x.claim) for x in got] == [("unheld", t, None)]
    assert "in no claim" in got[0].outcome and "not killed" in got[0].outcome
    assert rig.alive(v) and rig.alive(t)


def test_a_process_seeing_another_file_at_its_ledgers_path_is_unheld(rig: Rig) -> None:
    """review 2026-12-04 #6, the file check: a process of the claim whose ``/run/hookcore/vgpu/ledger``
    is another file (a private ledger bind-mounted over it, so its hook charges nothing the claim
    sees) is unheld, though its hook is mapped; it stays in its claim (its mounts say so), and its
    neighbour, seeing the claim's ledger, is held."""
    c = rig.claim()
    private = rig.root / "private-ledger"
    private.write_bytes((rig.state / "hooks" / c.uid / "ledger").read_bytes())
    covered = rig.start(c, ["sleep", "300"], mounts=(Mount(str(private), "/run/hookcore/vgpu/ledger", RW),))
    plain = rig.start(c, ["sleep", "301"])
    rig.on_gpu(covered, c.device, GiB)
    rig.on_gpu(plain, c.device, GiB)
    seen = os.stat(os.path.join(f"/proc/{covered}", "root", "run/hookcore/vgpu/ledger"))
    assert (seen.st_dev, seen.st_ino) == (os.stat(private).st_dev, os.stat(private).st_ino)
    got = rig.watchdog().poll()
    assert [(x.kind, x.pid, x.claim.uid if x.claim else None) for x in got] == [("unheld", covered, c.uid)]
    assert "another file than its claim's ledger" in got[0].message


def test_a_symlink_at_the_ledgers_path_is_not_followed(rig: Rig, tmp_path: Path) -> None:
    """The daemon looks at the ledger a process sees without following any symlink: a tenant's
    link (here the whole /run/hookcore/vgpu dir replaced by one to the claim's own hook dir, as
    the daemon would see it) is not taken for the claim's file."""
    c = rig.claim()
    link_dir = tmp_path / "link"
    link_dir.mkdir()
    (link_dir / "vgpu").symlink_to(rig.state / "hooks" / c.uid)
    pid = rig.start(c, ["sleep", "300"], mounts=(Mount(str(link_dir), "/run/hookcore", ("rw", "bind")),))
    assert procinfo.file_in_root(Path("/proc"), pid, "/run/hookcore/vgpu/ledger") is None
    assert procinfo.file_in_root(Path("/proc"), pid, "/run/hookcore/vgpu/../vgpu/ledger") is None
    plain = rig.start(c, ["sleep", "301"])
    want = os.stat(rig.state / "hooks" / c.uid / "ledger")
    assert procinfo.file_in_root(Path("/proc"), plain, "/run/hookcore/vgpu/ledger") == (want.st_dev, want.st_ino)
