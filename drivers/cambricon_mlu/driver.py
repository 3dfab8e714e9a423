"""`cambricon-mlu.project-hami.io`: Cambricon MLUs shared by consumable capacity, each share held
by the vendor's sMLU partitioning; no hook.

Each MLU in sMLU mode is published with consumable ``cores``/``memory``; a claim's share of it
becomes an sMLU instance of that quota and memory, made through CNDev at prepare (`smlu.py`), and
the container gets the instance's device node and the variables Cambricon's runtime reads
(`edits.py`). The vendor's driver holds the container to the instance, so the framework installs
and preloads nothing (`dra.Driver.shares_held_by_device`). MLUs with sMLU off, and every MLU with
``--set sharing=whole``, are allocated whole.

    dra run cambricon-mlu --node-name "$NODE_NAME"                    # an MLU node (libcndev.so)
    dra run cambricon-mlu --node-name node-1 --fake mlu370-x8x8 ...   # fake MLUs (stub libcndev.so)

The skeleton (`dra.SharedDeviceDriver`) does the rest: the devices kept by name, a device the node
does not have refused, the shares of one MLU in one claim summed, their configs merged. The
processes on the MLUs, for the watchdog, come from CNDev (`processes.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import dra
from drivers.cambricon_mlu import cndev, devices, edits, fake, smlu
from drivers.cambricon_mlu.config import API_VERSION, MluConfig
from drivers.cambricon_mlu.health import HealthMonitor
from drivers.cambricon_mlu.processes import ProcessReader
from drivers.cambricon_mlu.settings import Settings

log = logging.getLogger(__name__)


class CambriconMluDriver(dra.SharedDeviceDriver[cndev.Mlu, MluConfig]):
    name = devices.DRIVER_NAME
    cdi_kind = "k8s.cambricon-mlu.project-hami.io/mlu"
    config_type = MluConfig
    config_api_version = API_VERSION
    noun = "MLU"
    shares_held_by_device = True  # the vendor's sMLU instances hold them: no hook

    def __init__(self) -> None:
        super().__init__()
        self.settings = Settings()
        self.inventory: cndev.Inventory | None = None
        self.fake: fake.FakeBackend | None = None
        self.library: cndev.Cndev | None = None
        self.shared: frozenset[str] = frozenset()  # the devices shared by sMLU instances
        self._processes: ProcessReader | None = None

    def discover(self, ctx: dra.DriverContext) -> Sequence[cndev.Mlu]:
        self.settings = Settings.parse(ctx.settings)
        sysfs = self.settings.sysfs
        if ctx.fake:
            self.fake = self.adopt(fake.FakeBackend(fake.load(ctx.fake, ctx.node_name), fake.stub_library()), at_exit=True)
            sysfs, self.library = self.fake.sysfs, self.fake.cndev
        else:
            self.library = cndev.Cndev(self.settings.cndev_library or cndev.DEFAULT_LIBRARIES)
        self.inventory = cndev.discover(self.library, sysfs)
        mlus = self.inventory.mlus
        if self.settings.sharing == "smlu":
            self.shared = frozenset(devices.device_name(m) for m in mlus if m.smlu)
            for m in mlus:
                if not m.smlu:
                    log.warning("MLU with sMLU mode off is published whole (`cnmon set -c N -smlu on` shares it)",
                                extra={"mlu": m.index, "uuid": m.uuid})
        log.info("MLUs discovered", extra={
            "mlus": [f"{devices.device_name(m)} {m.uuid} {m.name} {'sMLU' if devices.device_name(m) in self.shared else 'whole'}"
                     for m in mlus],
            "driver_version": self.inventory.driver_version, "fake": ctx.fake or None})
        smlu.repair(self.library, ctx, {devices.device_name(m): m for m in mlus if m.smlu})
        self._processes = ProcessReader(self.library, mlus)
        return mlus

    device_name = staticmethod(devices.device_name)
    usable_memory = staticmethod(devices.usable_memory)

    def watch_health(self, ctx: dra.DriverContext, mlus: Sequence[cndev.Mlu]) -> HealthMonitor | None:
        """The CNDev health poller (`health.py`), when ``health`` is on and the node has MLUs."""
        if not (self.settings.health and mlus and self.library is not None):
            return None
        return HealthMonitor(self.library, mlus, self.health_changed, self.settings.health_interval)

    def processes(self) -> Sequence[dra.DeviceProcess] | None:
        """Every process on the MLUs, from CNDev (`processes.py`), for the watchdog; None before
        setup or where the library has no process query."""
        return self._processes.read() if self._processes is not None else None

    def to_devices(self, taints: Mapping[str, tuple[dra.Taint, ...]]) -> Sequence[dra.Device]:
        assert self.inventory is not None
        return devices.to_devices(self.inventory, sorted(self.shared), dict(taints) if self.monitor else None)

    def container_order(self, visible: list[dra.Visible[cndev.Mlu]]) -> list[dra.Visible[cndev.Mlu]]:
        """Index ascending: a container numbers its MLUs so (`edits.py`)."""
        return sorted(visible, key=lambda v: v.device.index)

    def prepare(self, claim: dra.ClaimRef, devices_: Sequence[dra.AllocatedDevice]) -> Sequence[dra.PreparedDevice]:
        """The claim's sMLU instance on each of its shared MLUs (one per MLU, of the claim's summed
        share there), made or found again; whole MLUs need nothing made."""
        view = self.view(claim, devices_)  # refuses a device the node lacks, configs that conflict, preload
        assert self.library is not None
        made = {v.name: smlu.make(self.library, claim, v.device, self.held_cores(view, v), v.memory)
                for v in view.visible if v.name in self.shared}
        out = []
        for dev in devices_:
            mlu, inst = self.by_name[dev.device], made.get(dev.device)
            state: dict[str, object] = {"uuid": mlu.uuid, "index": mlu.index,
                                        **{k: int(v) for k, v in dev.consumed_capacity.items()}}
            if inst is not None:
                state["smlu"] = {"name": inst.name, "node": inst.node, "quota": inst.quota, "memory": inst.memory}
            out.append(dra.PreparedDevice(dev, dra.ContainerEdits(), state=state))  # nodes are claim-wide
        return out

    def claim_edits(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> dra.ContainerEdits:
        """The MLUs' device nodes (each once), ``CAMBRICON_VISIBLE_DEVICES`` and ``VIRTUAL_DEVICES``."""
        nodes: dict[int, str | None] = {}  # index -> its sMLU instance node (None: whole)
        for p in prepared:
            share = p.state.get("smlu")
            nodes[int(p.state["index"])] = str(share["node"]) if isinstance(share, Mapping) else None
        env = edits.visible_env([i for i, n in nodes.items() if n is None],
                                [(i, n) for i, n in nodes.items() if n is not None])
        if self.fake is not None:
            env.update(self.fake.container_env(nodes))
            return dra.ContainerEdits(env=env, mounts=self.fake.container_mounts())
        dev_root = self.settings.dev_root
        device_nodes = [*edits.control_nodes(dev_root)]
        for index, node in sorted(nodes.items()):
            device_nodes += edits.mlu_nodes(index, dev_root, node)
        return dra.ContainerEdits(env=env, device_nodes=tuple(device_nodes))

    def unprepare(self, claim: dra.ClaimRef, prepared: Sequence[dra.PreparedDevice]) -> None:
        """Destroy the claim's sMLU instances (found by the claim: a record still "preparing", or a
        rolled-back prepare, has no state); nothing where they are gone already."""
        assert self.library is not None
        for name in dict.fromkeys(p.device.device for p in prepared):
            if name in self.by_name and self.by_name[name].smlu:
                smlu.remove(self.library, claim, self.by_name[name])
