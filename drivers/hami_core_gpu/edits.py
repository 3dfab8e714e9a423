"""How a claim's GPUs reach its containers: visible devices, device nodes, driver libraries.

Every claim's containers get ``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` listing its
GPUs by UUID, in allocation order: CUDA ordinal i is the claim's i-th GPU, whose quota is
hookcore's index i (the framework writes ``HOOKCORE_DEVICE_UUID_<i>`` beside it, so the hook
also checks by UUID). Setting ``NVIDIA_VISIBLE_DEVICES`` also keeps the NVIDIA runtime's legacy
hook, where it is the default runtime, from exposing every GPU of an image that says ``all``.

Device nodes and driver libraries, two modes (``--set cdiMode=``):

- ``toolkit`` (default): compose with the NVIDIA Container Toolkit. Each GPU adds the CDI device
  ``nvidia.com/gpu=<uuid>`` to what kubelet passes to the runtime; the toolkit's spec (from
  ``nvidia-ctk cdi generate --device-name-strategy=uuid``, or the GPU Operator) brings
  ``/dev/nvidia<minor>``, ``/dev/nvidiactl``, ``/dev/nvidia-uvm*``, the driver's libraries and
  its ldcache hook. Nothing of the driver's install is repeated here.
- ``self-contained``: no toolkit on the node. This driver lists the device nodes it finds under
  ``devRoot`` and mounts the driver's user-space libraries from ``driverRoot`` read-only at
  ``/usr/local/nvidia/lib64`` and sets ``LD_LIBRARY_PATH`` to what NVIDIA's CUDA images set
  (``/usr/local/nvidia/lib64:/usr/local/nvidia/lib``; an image's own value is replaced, CDI
  cannot append), and mounts ``nvidia-smi`` at ``/usr/bin/nvidia-smi``.

The fake backend has no device nodes and no toolkit spec; its "driver" is hookcore's stub
libcuda and libnvidia-ml, mounted like a driver's libraries in self-contained mode (in both modes).
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dra import ContainerEdits, DeviceNode, Mount, PrepareError

if TYPE_CHECKING:
    from drivers.hami_core_gpu.settings import Settings

CONTAINER_LIB_DIR = "/usr/local/nvidia/lib64"
CONTAINER_BIN_DIR = "/usr/bin"
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "lib64", "lib",
            "usr/local/nvidia/lib64", "usr/local/nvidia/lib", ".")
BIN_DIRS = ("usr/bin", "usr/local/nvidia/bin")
REQUIRED_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")
# What CUDA programs load beside libcuda (JIT, NVVM, the GPU compiler, the debugger); optional.
OPTIONAL_LIBS = ("libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4", "libcudadebugger.so.1", "libnvidia-gpucomp.so.*")
BINARIES = ("nvidia-smi",)
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def visible_devices_env(uuids: Sequence[str]) -> dict[str, str]:
    listed = ",".join(uuids)
    return {"NVIDIA_VISIBLE_DEVICES": listed, "CUDA_VISIBLE_DEVICES": listed}


def toolkit_device_ids(kind: str, uuids: Sequence[str]) -> list[str]:
    """The toolkit's CDI devices for these GPUs (its spec names them by UUID)."""
    return [f"{kind}={u}" for u in uuids]


@dataclasses.dataclass(frozen=True)
class DriverFiles:
    """The host's driver user-space files, found once at start (self-contained mode)."""

    libraries: tuple[Path, ...]  # host paths, each mounted as its soname
    binaries: tuple[Path, ...]

    @classmethod
    def find(cls, driver_root: Path) -> DriverFiles:
        libs: list[Path] = []
        searched = [driver_root / d for d in LIB_DIRS]
        for pattern in (*REQUIRED_LIBS, *OPTIONAL_LIBS):
            hits = sorted(h for d in searched for h in glob.glob(str(d / pattern)))
            if not hits:
                if pattern in REQUIRED_LIBS:
                    raise FileNotFoundError(
                        f"{pattern} not found under driverRoot {driver_root} (searched {', '.join(LIB_DIRS)}): "
                        "set --set driverRoot=<where the NVIDIA driver is installed>, or use cdiMode=toolkit"
                    )
                continue
            libs.append(Path(hits[0]))
        bins = [next(driver_root / d / b for d in BIN_DIRS if (driver_root / d / b).exists())
                for b in BINARIES if any((driver_root / d / b).exists() for d in BIN_DIRS)]
        return cls(tuple(libs), tuple(bins))

    def mounts(self) -> tuple[Mount, ...]:
        out = [Mount(os.path.realpath(p), f"{CONTAINER_LIB_DIR}/{p.name}") for p in self.libraries]
        out += [Mount(os.path.realpath(p), f"{CONTAINER_BIN_DIR}/{p.name}") for p in self.binaries]
        return tuple(out)


def self_contained_claim_edits(files: DriverFiles, dev_root: Path | None) -> ContainerEdits:
    """Claim-wide edits: the libraries, nvidia-smi and (with a /dev) the control nodes."""
    nodes: tuple[DeviceNode, ...] = ()
    if dev_root is not None:
        nodes = tuple(DeviceNode(f"/dev/{n}", host_path=str(dev_root / "dev" / n))
                      for n in CONTROL_NODES if (dev_root / "dev" / n).exists())
        if not any(n.path == "/dev/nvidiactl" for n in nodes):
            raise PrepareError(f"{dev_root / 'dev/nvidiactl'} does not exist: is the NVIDIA kernel module loaded?"
                               " (or set --set devRoot=<where the host's /dev is mounted>)")
    # CDI cannot append to a variable: this is the value NVIDIA's CUDA images set themselves.
    env = {"LD_LIBRARY_PATH": f"{CONTAINER_LIB_DIR}:/usr/local/nvidia/lib"}
    return ContainerEdits(env=env, mounts=files.mounts(), device_nodes=nodes)


def self_contained_device_node(minor: int, dev_root: Path) -> DeviceNode:
    host = dev_root / "dev" / f"nvidia{minor}"
    if not host.exists():
        raise PrepareError(f"{host} does not exist: the GPU's device node is missing (driver not loaded, or GPU lost?)")
    return DeviceNode(f"/dev/nvidia{minor}", host_path=str(host))


def device_edits(settings: Settings, on_host: bool, minor: int, uuid: str,
                 extra_nodes: Sequence[DeviceNode] = ()) -> tuple[ContainerEdits, tuple[str, ...]]:
    """One prepared GPU (or MIG device, with its `extra_nodes`)'s device nodes and toolkit CDI
    device ids, per ``cdiMode``; none on a fake node (`on_host` False: the stub has no nodes)."""
    if on_host and settings.cdi_mode == "self-contained":
        return ContainerEdits(device_nodes=(self_contained_device_node(minor, settings.dev_root), *extra_nodes)), ()
    if on_host and settings.cdi_mode == "toolkit":
        return ContainerEdits(), tuple(toolkit_device_ids(settings.toolkit_cdi_kind, [uuid]))
    return ContainerEdits(), ()
