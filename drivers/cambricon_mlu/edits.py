"""How a claim's MLUs reach its containers: device nodes and the variables Cambricon's runtime reads.

What Cambricon's device plugin hands a container (its source, ``device-plugin/pkg/mlu``), which
this driver hands it through CDI:

- a whole MLU: ``/dev/cambricon_dev<N>`` and, where the host has them, its ``/dev/cambr-msgq:<N>``,
  ``/dev/cambr-rpc:<N>``, ``/dev/cmsg_ctrl<N>``, ``/dev/commu<N>`` and ``/dev/cambricon_ipcm<N>``;
  ``CAMBRICON_VISIBLE_DEVICES`` lists the whole MLUs' indices (what Cambricon's container runtime
  reads to do the same);
- an sMLU share: ``/dev/cambricon_dev<N>``, ``/dev/cambricon_ipcm<N>`` where the host has it, and
  the instance's node ``/dev/cambricon-caps/cap_dev<N>_mi<M>`` (CNDev's ``devNodeName``);
  ``VIRTUAL_DEVICES`` lists ``<dev node>,<ipcm node>,<instance node>`` per share, ``;`` between
  (what the plugin passes in its dynamic-sMLU mode for Cambricon's container runtime);
- for the claim: ``/dev/cambricon_ctl`` and ``/dev/cambricon_gdr`` where the host has them.

An MLU is in one of the two variables, never both: the runtime must not hand an sMLU share's
container the whole MLU. A container numbers its MLUs by index ascending (across both lists).
The fake backend has no device nodes: its "runtime" is hookcore's stub ``libcnrt.so``, which
reads the same two variables and the stub's sMLU table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from dra import DeviceNode, PrepareError

CONTROL_NODES = ("cambricon_ctl", "cambricon_gdr")
WHOLE_EXTRA = ("cambr-msgq:{i}", "cambr-rpc:{i}", "cmsg_ctrl{i}", "commu{i}", "cambricon_ipcm{i}")
WHOLE_ENV = "CAMBRICON_VISIBLE_DEVICES"
SMLU_ENV = "VIRTUAL_DEVICES"
_INSTANCE_NODE = re.compile(r"/dev/cambricon-caps/[A-Za-z0-9_.-]{1,64}")


def _node(path: str, dev_root: Path, required: bool) -> DeviceNode | None:
    """`path` when the host has it (looked for under `dev_root`, where the daemon sees the host's
    /dev); the CDI spec names the host's own path, which the runtime reads."""
    if not (dev_root / path.lstrip("/")).exists():
        if required:
            raise PrepareError(f"{path} does not exist under devRoot {dev_root}: is the MLU driver loaded, and the"
                               " host's /dev mounted into the driver's pod?")
        return None
    return DeviceNode(path, host_path=path)


def mlu_nodes(index: int, dev_root: Path, instance: str | None = None) -> tuple[DeviceNode, ...]:
    """An MLU's device nodes: whole (`instance` None), or an sMLU share through `instance`'s node."""
    nodes = [_node(f"/dev/cambricon_dev{index}", dev_root, True)]
    if instance is None:
        nodes += [_node("/dev/" + extra.format(i=index), dev_root, False) for extra in WHOLE_EXTRA]
    else:
        nodes += [_node(f"/dev/cambricon_ipcm{index}", dev_root, False), _node(check_instance_node(instance),
                                                                              dev_root, True)]
    return tuple(n for n in nodes if n is not None)


def control_nodes(dev_root: Path) -> tuple[DeviceNode, ...]:
    return tuple(n for name in CONTROL_NODES if (n := _node(f"/dev/{name}", dev_root, False)) is not None)


def check_instance_node(path: str) -> str:
    """`path` when it is an sMLU instance node as CNDev names them; else a refusal (a device node
    path from the vendor's library is not handed to a container unchecked)."""
    if not _INSTANCE_NODE.fullmatch(path) or ".." in path:
        raise PrepareError(f"CNDev names the sMLU instance's device node {path!r}, not a /dev/cambricon-caps/ node")
    return path


def virtual_device(index: int, instance: str) -> str:
    """One ``VIRTUAL_DEVICES`` entry: the MLU's node, its IPC node and the instance's node."""
    return f"/dev/cambricon_dev{index},/dev/cambricon_ipcm{index},{check_instance_node(instance)}"


def visible_env(whole: Sequence[int], shares: Sequence[tuple[int, str]]) -> dict[str, str]:
    """``CAMBRICON_VISIBLE_DEVICES`` (the whole MLUs' indices) and ``VIRTUAL_DEVICES`` (the sMLU
    shares: (index, instance node)), each by index and only when it lists something."""
    env = {}
    if whole:
        env[WHOLE_ENV] = ",".join(str(i) for i in sorted(whole))
    if shares:
        env[SMLU_ENV] = ";".join(virtual_device(i, node) for i, node in sorted(shares))
    return env
