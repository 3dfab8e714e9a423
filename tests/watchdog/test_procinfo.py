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


def test_the_claim_from_its_hook_dir_mount_on_the_hooks_filesystem() -> None:
    dev = os.makedev(254, 0)
    text = "22 1 254:0 / / rw - ext4 /dev/vda rw\n" + mountinfo(f"/var/lib/kubelet/plugins/d/state/hooks/{CLAIM}")
    assert procinfo.claims_of(text, dev) == {CLAIM}
    # on another filesystem (a tenant's own directory named like it): not the claim's
    assert procinfo.claims_of(mountinfo(f"/tmp/x/hooks/{CLAIM}", dev="0:52"), dev) == frozenset()
    # the claim's files mounted one by one (config read-only, ledger read-write)
    assert procinfo.claims_of(mountinfo(f"/s/hooks/{CLAIM}/config", point="/run/hookcore/vgpu/config"), dev) == {CLAIM}
    # deeper, a longer name, a truncated line: nothing
    assert procinfo.claims_of(mountinfo(f"/s/hooks/{CLAIM}/sub/x"), dev) == frozenset()
    assert procinfo.claims_of(mountinfo(f"/s/hooks/{CLAIM}x"), dev) == frozenset()
    assert procinfo.claims_of(f"75 69 254:0 /s/hooks/{CLAIM}\n", dev) == frozenset()
    # octal escapes are undone before matching (a space in the state dir)
    assert procinfo.claims_of(mountinfo(f"/my\\040state/hooks/{CLAIM}"), dev) == {CLAIM}
    # the claim's two file mounts (config read-only, ledger read-write) name it too; other files do not
    point = "/run/hookcore/vgpu/config"
    assert procinfo.claims_of(mountinfo(f"/s/hooks/{CLAIM}/config", point=point), dev) == {CLAIM}
    assert procinfo.claims_of(mountinfo(f"/s/hooks/{CLAIM}/ledger", point=point), dev) == {CLAIM}
    assert procinfo.claims_of(mountinfo(f"/s/hooks/{CLAIM}/other", point=point), dev) == frozenset()


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
    w = procinfo.workload(Path("/proc"), os.getpid(), os.stat("/").st_dev)
    assert w is not None and w.claims == frozenset()
    assert procinfo.workload(Path("/proc"), 2**22 + 7, 0) is None
