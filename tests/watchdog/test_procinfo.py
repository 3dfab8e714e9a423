"""dra._runtime.procinfo's readers on the text the kernel writes, and on hostile text a tenant might arrange."""

from __future__ import annotations

import os
from pathlib import Path

from dra._runtime import procinfo

POD = "5ae2730d-6b61-478f-a856-d947fc297498"
CID = "0a9c5e58dc66497a89faf38e4cf71b57ae228b0454bd4b9095989979c33e8ea4"
CLAIM = "c5fd560f-309b-4572-be80-20cfd52af561"


def test_pod_and_container_from_cgroupfs_and_systemd_paths() -> None:
    assert procinfo.pod_of(f"0::/kubepods/besteffort/pod{POD}/{CID}\n") == (POD, CID)
    systemd = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice/"
               f"cri-containerd-{CID}.scope\n")
    assert procinfo.pod_of(systemd) == (POD, CID)
    v1 = f"9:name=systemd:/\n8:pids:/dra-node-x/kubepods/pod{POD}/{CID}\n4:memory:/\n"
    assert procinfo.pod_of(v1) == (POD, CID)
    assert procinfo.pod_of(f"0::/kubepods/pod{POD}\n") == (POD, None)  # the pod's own cgroup


def test_no_pod_for_host_processes_or_lookalike_names() -> None:
    assert procinfo.pod_of("0::/\n") == (None, None)
    assert procinfo.pod_of("0::/system.slice/containerd.service\n") == (None, None)
    assert procinfo.pod_of(f"0::/user.slice/mypod{POD}x/{CID}\n") == (None, None)  # not a whole component
    assert procinfo.pod_of("garbage without colons\n\x00\xff") == (None, None)


def mountinfo(root: str, dev: str = "254:0", point: str = "/run/hookcore/vgpu") -> str:
    return f"75 69 {dev} {root} {point} rw,nosuid,nodev,relatime - ext4 /dev/vda rw\n"


def test_the_claim_from_its_hook_files_mounted_from_the_hooks_root() -> None:
    """A claim is named only by a mount of exactly the daemon's hooks/<uid>/config or ledger on the
    hooks filesystem (review 2026-12-04 #6: by file identity, not by a path's ending)."""
    hooks = procinfo.HooksFs("254:0", "/var/lib/kubelet/plugins/d/state/hooks")
    base = f"{hooks.path}/{CLAIM}"
    point = "/run/hookcore/vgpu/ledger"
    text = "22 1 254:0 / / rw - ext4 /dev/vda rw\n" + mountinfo(f"{base}/ledger", point=point)
    assert procinfo.claims_of(text, hooks) == {CLAIM}
    assert procinfo.claims_of(mountinfo(f"{base}/config", point="/run/hookcore/vgpu/config"), hooks) == {CLAIM}
    # the whole dir (a directory mount, as an emptyDir subPath makes one): never
    assert procinfo.claims_of(mountinfo(base), hooks) == frozenset()
    # elsewhere on the same filesystem, ending the same way (a file in a tenant's emptyDir): never
    tenant = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~empty-dir/x/hooks"
    assert procinfo.claims_of(mountinfo(f"{tenant}/{CLAIM}/ledger", point=point), hooks) == frozenset()
    assert procinfo.claims_of(mountinfo(f"/x{base}/ledger", point=point), hooks) == frozenset()
    # on another filesystem: never
    assert procinfo.claims_of(mountinfo(f"{base}/ledger", dev="0:52", point=point), hooks) == frozenset()
    # deeper, a longer name, another file, a truncated line: nothing
    for root in (f"{base}/sub/ledger", f"{base}x/ledger", f"{base}/other", f"{base}/ledger/x", f"{base}/ledgerx"):
        assert procinfo.claims_of(mountinfo(root, point=point), hooks) == frozenset(), root
    assert procinfo.claims_of(f"75 69 254:0 {base}/ledger\n", hooks) == frozenset()
    # octal escapes are undone before comparing (a space in the state dir)
    spaced = procinfo.HooksFs("254:0", "/my state/hooks")
    assert procinfo.claims_of(mountinfo(f"/my\\040state/hooks/{CLAIM}/ledger", point=point), spaced) == {CLAIM}


def test_the_hooks_root_on_its_filesystem_from_the_daemons_own_mountinfo(tmp_path: Path) -> None:
    """The mount holding the hooks root (the longest mount point above it, the last when stacked),
    its root field plus the rest of the path."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "mountinfo").write_text(
        "22 1 254:0 / / rw - ext4 /dev/vda rw\n"
        "30 22 254:1 /var/lib/kubelet/plugins /var/lib/kubelet/plugins rw - ext4 /dev/vdb rw\n"
        "31 22 254:2 /other /var/lib/kubelet/pluginsX rw - ext4 /dev/vdc rw\n"
        "32 30 254:3 /plugins /var/lib/kubelet/plugins rw - ext4 /dev/vdd rw\n")
    got = procinfo.hooks_fs(tmp_path, Path("/var/lib/kubelet/plugins/d/state/hooks"))
    assert got == procinfo.HooksFs("254:3", "/plugins/d/state/hooks")
    assert procinfo.hooks_fs(tmp_path, Path("/srv/hooks")) == procinfo.HooksFs("254:0", "/srv/hooks")
    assert procinfo.hooks_fs(tmp_path / "none", Path("/srv/hooks")) is None
    real = procinfo.hooks_fs(Path("/proc"), tmp_path)
    assert real is not None and real.path.endswith(str(tmp_path).lstrip("/"))


def test_the_hook_is_loaded_only_when_its_file_is_mapped_executable() -> None:
    lib = (os.makedev(254, 0), 10045785)
    exe = b"7f7b6abc7000-7f7b6abd6000 r-xp 00005000 fe:00 10045785   /usr/lib/hookcore/libvgpu.so\n"
    data = b"7f7b6abc2000-7f7b6abc7000 r--p 00000000 fe:00 10045785   /usr/lib/hookcore/libvgpu.so\n"
    other_dev = b"7f7b6abc7000-7f7b6abd6000 r-xp 00005000 00:34 10045785   /usr/lib/hookcore/libvgpu.so\n"
    renamed = b"7f7b6abc7000-7f7b6abd6000 r-xp 00005000 fe:00 999   /usr/lib/hookcore/libvgpu.so\n"
    assert procinfo.maps_file(data + exe, {lib})
    assert not procinfo.maps_file(data, {lib})  # read, never executed
    assert not procinfo.maps_file(other_dev + renamed, {lib})  # named like it, another file
    assert not procinfo.maps_file(b"zz\n\xff\xfe r-xp 0 zz:yy 10045785 x\n", {lib})
    assert not procinfo.maps_file(exe, set())


def test_start_time_survives_a_comm_with_spaces_and_parentheses(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    fields = " ".join(str(i) for i in range(3, 53))  # field 22 is "22"
    (tmp_path / "42" / "stat").write_bytes(f"42 (a) b (c) {fields}\n".encode())
    assert procinfo.start_time(tmp_path, 42) == 22
    assert procinfo.start_time(tmp_path, 43) is None
    (tmp_path / "42" / "stat").write_bytes(b"42 (x) R")
    assert procinfo.start_time(tmp_path, 42) is None


def test_this_process_reads_as_itself() -> None:
    me = procinfo.start_time(Path("/proc"), os.getpid())
    assert me is not None and me > 0
    hooks = procinfo.HooksFs("254:0", "/hooks")
    w = procinfo.workload(Path("/proc"), os.getpid(), hooks)
    assert w is not None and w.claims == frozenset() and w.complete
    assert procinfo.workload(Path("/proc"), 2**22 + 7, hooks) is None
    assert procinfo.ns_tgid(Path("/proc"), os.getpid()) == os.getpid()
