"""How a claim's DCUs reach its containers: device nodes, visible devices, driver files.

A DCU is used through two kinds of device nodes: ``/dev/kfd`` (one per node, the compute driver
every HIP process opens) and the DCU's DRM render node ``/dev/dri/renderD<minor>`` (ROCm SMI's
``rsmi_dev_drm_render_minor_get``). The runtime uses only the devices whose render node the
container has, so the claim's CDI spec lists ``/dev/kfd`` (and ``/dev/mkfd``, the DCU driver's
second control node, where the host has one: HAMi's DCU plugin hands it to containers too) and
the render node of each of its DCUs; the container's runtime numbers them 0..n-1.

``HIP_VISIBLE_DEVICES`` is set to those ordinals: HIP reads ``CUDA_VISIBLE_DEVICES`` when
``HIP_VISIBLE_DEVICES`` is unset, so in a heterogeneous container whose NVIDIA devices set
``CUDA_VISIBLE_DEVICES`` (GPU UUIDs HIP cannot parse) HIP would otherwise see no device.
The hook does not depend on the order: libvhip keys each quota by PCI bus ID (``pci-<bus ID>``)
and asks the runtime which ordinal has it (``hipDeviceGetPCIBusId``), so a workload reordering
its devices is still charged to the right one, and a device outside the claim (a privileged
container sees every render node) has no quota at all.

DTK images expect the host's DCU user space at ``/opt/hyhal`` (what HAMi's DCU plugin mounts);
it is mounted read-only when the host has it. The fake backend has no device nodes; its "HIP"
is hookcore's stub ``libamdhip64.so``, which reads the claim's devices from
``HOOKCORE_STUB_HIP_DEVICES``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra import ContainerEdits, DeviceNode, Mount, PrepareError

KFD = "kfd"
OPTIONAL_NODES = ("mkfd",)
DRIVER_FILES = ("opt/hyhal",)  # (host path under driverRoot), each mounted read-only where present


def hook_key(pci_bus_id: str) -> str:
    """hookcore's key for a DCU (what the framework writes as its HOOKCORE_DEVICE_UUID_<i>)."""
    return f"pci-{pci_bus_id.lower()}"


def visible_devices_env(count: int) -> dict[str, str]:
    return {"HIP_VISIBLE_DEVICES": ",".join(str(i) for i in range(count))}


def render_node(minor: int, dev_root: Path) -> DeviceNode:
    host = dev_root / "dev" / "dri" / f"renderD{minor}"
    if not host.exists():
        raise PrepareError(
            f"/dev/dri/renderD{minor} does not exist under devRoot {dev_root}: is the DCU driver loaded, and the "
            "host's /dev mounted into the driver's pod?"
        )
    return DeviceNode(f"/dev/dri/renderD{minor}", host_path=str(host))


@dataclasses.dataclass(frozen=True)
class HostFiles:
    """The host's control nodes and driver files, checked once at start."""

    control_nodes: tuple[DeviceNode, ...]
    mounts: tuple[Mount, ...]

    @classmethod
    def find(cls, dev_root: Path, driver_root: Path) -> HostFiles:
        kfd = dev_root / "dev" / KFD
        if not kfd.exists():
            raise FileNotFoundError(
                f"/dev/kfd not found under devRoot {dev_root}: is the DCU kernel driver loaded and the host's /dev "
                "mounted into the driver's pod (set --set devRoot=<where it is mounted>)?"
            )
        nodes = [DeviceNode("/dev/kfd", host_path=str(kfd))]
        nodes += [DeviceNode(f"/dev/{n}", host_path=str(dev_root / "dev" / n)) for n in OPTIONAL_NODES
                  if (dev_root / "dev" / n).exists()]
        mounts = [Mount(str(driver_root / rel), "/" + rel) for rel in DRIVER_FILES if (driver_root / rel).exists()]
        return cls(tuple(nodes), tuple(mounts))

    def claim_edits(self) -> ContainerEdits:
        return ContainerEdits(mounts=self.mounts, device_nodes=self.control_nodes)
