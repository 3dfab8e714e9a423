"""dra.SharedDeviceDriver (the skeleton both vendor drivers stand on), with a toy vendor part:
refusals, share summing and order, quotas, the health lifecycle, close, and dra.Processed."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence

import pytest

import dra
from dra import AllocatedDevice, ClaimRef, ContainerEdits, Device, DriverContext, PreparedDevice, PrepareError, Taint
from dra.fakes.stub import check_stub_value, parse_stub_devices, stub_devices

GiB = 1 << 30
CLAIM = ClaimRef("ns", "claim", "uid-1")


@dataclasses.dataclass(frozen=True)
class Toy:
    uuid: str
    slot: int


@dataclasses.dataclass(frozen=True)
class ToyConfig(dra.ShareConfig):
    pass


class Monitor:
    def __init__(self, on_change: object) -> None:
        self.state = {"t-0": (True, "ok"), "t-1": (True, "ok")}
        self.started = self.stopped = 0

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        self.stopped += 1

    def taints(self) -> Mapping[str, tuple[Taint, ...]]:
        return {u: (Taint("toy/bad", "1", "NoSchedule"),) for u, (ok, _) in self.state.items() if not ok}

    def snapshot(self) -> list[tuple[str, bool | None, str]]:
        return [(u, ok, why) for u, (ok, why) in self.state.items()]


class ToyDriver(dra.SharedDeviceDriver[Toy, ToyConfig]):
    name = "toy.example.com"
    cdi_kind = "k8s.toy.example.com/claim"
    config_type = ToyConfig
    config_api_version = "toy.example.com/v1"
    noun = "toy"
    device_name = staticmethod(lambda t: f"toy-{t.slot}")
    usable_memory = staticmethod(lambda t: 8 * GiB)

    def __init__(self, order_by_slot: bool = False) -> None:
        super().__init__()
        self.order_by_slot = order_by_slot
        self.released: list[str] = []

    def discover(self, ctx: DriverContext) -> Sequence[Toy]:
        self.on_close(lambda: self.released.append("backend"))
        return [Toy("t-0", 0), Toy("t-1", 1)]

    def watch_health(self, ctx: DriverContext, devices: Sequence[Toy]) -> Monitor:
        return Monitor(self.health_changed)

    def to_devices(self, taints: Mapping[str, tuple[Taint, ...]]) -> Sequence[Device]:
        return [Device(self.device_name(t), taints=taints.get(t.uuid, ())) for t in self.by_name.values()]

    def container_order(self, visible: list[dra.Visible[Toy]]) -> list[dra.Visible[Toy]]:
        return sorted(visible, key=lambda v: v.device.slot) if self.order_by_slot else visible

    def prepared_device(self, claim: ClaimRef, allocated: AllocatedDevice, device: Toy) -> PreparedDevice:
        return PreparedDevice(allocated, ContainerEdits(), state={"uuid": device.uuid})


def alloc(device: str, memory: int = GiB, cores: int = 10, config: ToyConfig | None = None) -> AllocatedDevice:
    return AllocatedDevice("r", "pool", device, consumed_capacity={"memory": memory, "cores": cores}, config=config)


def started(driver: ToyDriver | None = None) -> tuple[ToyDriver, list[object]]:
    reports: list[object] = []
    d = driver or ToyDriver()
    d.setup(DriverContext("node", "pool", on_health=reports.append))
    return d, reports


def test_devices_before_setup_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"devices\(\) before setup"):
        ToyDriver().devices()


def test_a_device_of_another_node_is_refused_naming_the_known_ones() -> None:
    d, _ = started()
    with pytest.raises(PrepareError, match=r"toy-9 \(pool pool\) is not a shared toy of this node.*toy-0"):
        d.prepare(CLAIM, [alloc("toy-9")])


def test_shares_of_one_device_are_summed_in_allocation_or_container_order() -> None:
    for by_slot, want in ((False, ["toy-1", "toy-0"]), (True, ["toy-0", "toy-1"])):
        d, _ = started(ToyDriver(order_by_slot=by_slot))
        got = d.visible(CLAIM, [alloc("toy-1", GiB, 10), alloc("toy-0", GiB, 20), alloc("toy-1", 2 * GiB, 30)])
        assert [v.name for v in got] == want
        assert {v.name: (v.memory, v.cores) for v in got} == {"toy-1": (3 * GiB, 40), "toy-0": (GiB, 20)}


def test_enforcement_has_one_quota_per_visible_device_and_lifts_compute_where_the_config_says() -> None:
    d, _ = started()
    free = ToyConfig(compute_limit=False)
    prepared = d.prepare(CLAIM, [alloc("toy-0", GiB, 30, free), alloc("toy-1", 2 * GiB, 40, free)])
    enforcement = d.enforcement(CLAIM, prepared)
    assert enforcement is not None and enforcement.library.name == "libvgpu.so"
    assert [(q.uuid, q.memory, q.cores) for q in enforcement.quotas] == [("t-0", GiB, 100), ("t-1", 2 * GiB, 100)]


class Counting(ToyDriver):
    """Counts the skeleton's computations of a claim's view."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def visible(self, claim: ClaimRef, allocated: Sequence[AllocatedDevice]) -> list[dra.Visible[Toy]]:
        self.calls.append("visible")
        return super().visible(claim, allocated)

    def claim_config(self, allocated: Sequence[AllocatedDevice]) -> ToyConfig:
        self.calls.append("claim_config")
        return super().claim_config(allocated)

    def device_configs(self, allocated: Sequence[AllocatedDevice]) -> Mapping[str, ToyConfig]:
        self.calls.append("device_configs")
        return super().device_configs(allocated)


def test_a_claim_s_view_is_computed_once_for_its_prepare_edits_and_enforcement() -> None:
    """What the framework calls for one claim (prepare, claim_edits, enforcement with prepare's
    answer) computes the claim's devices and configs once; another allocation of the same claim
    (deallocated and allocated again) is computed anew."""
    d, _ = started(Counting())
    devices = [alloc("toy-1", GiB, 10, ToyConfig(compute_limit=False)), alloc("toy-0", GiB, 20)]
    prepared = d.prepare(CLAIM, devices)
    d.claim_edits(CLAIM, prepared)
    enforcement = d.enforcement(CLAIM, prepared)
    assert d.calls == ["visible", "claim_config", "device_configs"]
    assert enforcement is not None and [(q.uuid, q.cores) for q in enforcement.quotas] == [("t-1", 100), ("t-0", 20)]
    again = d.enforcement(CLAIM, d.prepare(CLAIM, [alloc("toy-1", GiB, 10)]))
    assert d.calls == ["visible", "claim_config", "device_configs"] * 2
    assert again is not None and [(q.uuid, q.cores) for q in again.quotas] == [("t-1", 10)]


def test_health_changes_republish_and_report_every_device() -> None:
    d, reports = started()
    assert isinstance(d.monitor, Monitor) and d.monitor.started == 1
    d.monitor.state["t-1"] = (False, "broken")
    d.health_changed()
    assert [(e.device, e.healthy, e.message) for e in reports[-1]] == [("toy-0", True, "ok"), ("toy-1", False, "broken")]
    assert [x.name for x in d.devices() if x.taints] == ["toy-1"]


def test_close_stops_the_monitor_first_then_releases_in_reverse_once() -> None:
    d, _ = started()
    monitor = d.monitor
    assert isinstance(monitor, Monitor)
    d.close()
    d.close()
    assert monitor.stopped == 1 and d.released == ["backend"]


def test_processed_waits_for_work_done_by_another_thread() -> None:
    done = dra.Processed()
    assert not done.wait(1, timeout=0.01)
    threading.Timer(0.05, done.add, args=(2,)).start()
    assert done.wait(2, timeout=5) and done.count == 2


@pytest.mark.parametrize("value", ["NVIDIA H200", "910B3", "x" * 95])
def test_stub_values_with_spaces_round_trip(value: str) -> None:
    text = stub_devices([{"uuid": "GPU-1", "name": value, "memory": 5}])
    assert parse_stub_devices(text) == [{"uuid": "GPU-1", "name": value, "memory": "5"}]


@pytest.mark.parametrize("value", ["a,b", "a;b", "a=b", "", "x" * 96, " edge"])
def test_stub_values_the_stubs_cannot_read_back_are_refused(value: str) -> None:
    assert not check_stub_value(value)
    with pytest.raises(ValueError, match=r"1\.\.95 characters"):
        stub_devices([{"uuid": "GPU-1", "name": value}])
