"""How a claim's NPUs reach its containers: visible devices, device nodes, driver files.

Every claim's containers get ``ASCEND_VISIBLE_DEVICES`` listing its NPUs' physical IDs in
ascending order. That is the order the Ascend driver numbers a container's NPUs (logic IDs
0..n-1 follow the ``/dev/davinci<N>`` minors it is given), so runtime device i is the claim's
i-th NPU and hookcore's quota index i. The hook checks it: its key for an NPU is
``davinci<phyID>``, which libvnpu compares with what the runtime reports for device i
(``aclrtGetPhyDevIdByLogicDevId``, ``rtGetDevicePhyIdByIndex`` on older CANN).

Device nodes and driver files, two modes (``--set deviceNodes=``):

- ``cdi`` (default): no Ascend container runtime needed. The claim's CDI spec lists
  ``/dev/davinci<phyID>`` per NPU and the shared control nodes ``/dev/davinci_manager``,
  ``/dev/devmm_svm`` and ``/dev/hisi_hdc``, and mounts the driver's user-space files read-only
  at their usual paths: ``/usr/local/Ascend/driver/lib64``, ``/usr/local/Ascend/driver/version.info``,
  ``/etc/ascend_install.info`` (and ``/usr/local/dcmi`` and ``npu-smi`` when present), which is
  what CANN images expect (their ``LD_LIBRARY_PATH`` already names the driver directory).
- ``runtime``: compose with the Ascend Docker Runtime (``ascend-docker-runtime``, pods with
  ``runtimeClassName: ascend``): it injects the device nodes and driver files itself from
  ``ASCEND_VISIBLE_DEVICES``; listing them here as well would give the container each node
  twice. The quota, ledger and preload are this driver's in both modes.

The fake backend has no device nodes and no driver on disk; its "runtime" is hookcore's stub
``libascendcl.so``, which reads the claim's NPUs from ``HOOKCORE_STUB_NPUS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from dra import ContainerEdits, DeviceNode, Mount, PrepareError

CONTROL_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")
DRIVER_FILES = (  # (host path under driverRoot, required)
    ("usr/local/Ascend/driver/lib64", True),
    ("usr/local/Ascend/driver/version.info", True),
    ("etc/ascend_install.info", False),
    ("usr/local/dcmi", False),
    ("usr/local/bin/npu-smi", False),
)


def hook_key(phy_id: int) -> str:
    """hookcore's key for an NPU (what the framework writes as its HOOKCORE_DEVICE_UUID_<i>)."""
    return f"davinci{phy_id}"


def visible_devices_env(phy_ids: Sequence[int]) -> dict[str, str]:
    return {"ASCEND_VISIBLE_DEVICES": ",".join(str(p) for p in phy_ids)}


def chip_node(phy_id: int, dev_root: Path) -> DeviceNode:
    host = dev_root / "dev" / f"davinci{phy_id}"
    if not host.exists():
        raise PrepareError(
            f"/dev/davinci{phy_id} does not exist under devRoot {dev_root}: is the Ascend driver loaded, and "
            "the host's /dev mounted into the driver's pod (or use --set deviceNodes=runtime with the Ascend runtime)?"
        )
    return DeviceNode(f"/dev/davinci{phy_id}", host_path=str(host))


@dataclasses.dataclass(frozen=True)
class HostFiles:
    """The host's control nodes and driver files, checked once at start (``cdi`` mode)."""

    control_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]

    @classmethod
    def find(cls, dev_root: Path, driver_root: Path) -> HostFiles:
        nodes = []
        for name in CONTROL_NODES:
            host = dev_root / "dev" / name
            if not host.exists():
                raise FileNotFoundError(
                    f"/dev/{name} not found under devRoot {dev_root}: is the Ascend driver installed and the host's "
                    "/dev mounted into the driver's pod? (or use --set deviceNodes=runtime with the Ascend container runtime)"
                )
            nodes.append(DeviceNode(f"/dev/{name}", host_path=str(host)))
        mounts = []
        for rel, required in DRIVER_FILES:
            host = driver_root / rel
            if not host.exists():
                if required:
                    raise FileNotFoundError(
                        f"{rel} not found under driverRoot {driver_root}: set --set driverRoot=<where the host's / is "
                        "mounted in the driver's pod>, or use --set deviceNodes=runtime with the Ascend container runtime"
                    )
                continue
            mounts.append(Mount(str(host), "/" + rel))
        return cls(tuple(nodes), tuple(mounts))

    def claim_edits(self) -> ContainerEdits:
        return ContainerEdits(mounts=self.mounts, device_nodes=self.control_nodes)
