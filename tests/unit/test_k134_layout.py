"""The slice layout chosen from the API server's version (kubernetes#133705), and its parsing."""

from __future__ import annotations

from typing import Any

import pytest

from dra._runtime.publish import SliceLayout, desired_pool, layout_for, needs_fence, parse_server_version
from dra._runtime.publish.layout import parse_layout
from dra.driver import Capacity, Device, RequestPolicy
from dra.errors import UserError

pytestmark = pytest.mark.scheduler  # `make test-versions` runs it on every minor


def gpus(n: int) -> list[Device]:
    cap = {"cores": Capacity("100", RequestPolicy(default="100", min="1", max="100"))}
    return [Device(name=f"gpu-{i}", capacity=cap, allow_multiple_allocations=True) for i in range(n)]


@pytest.mark.parametrize(("version", "layout"), [
    ((1, 34), SliceLayout.PER_DEVICE),  # the scheduler reads Devices[request index]: kubernetes#133705
    ((1, 33), SliceLayout.PER_DEVICE),
    ((1, 35), SliceLayout.PACKED),  # fixed in 1.35.0
    ((1, 37), SliceLayout.PACKED),
    ((2, 0), SliceLayout.PACKED),
])
def test_the_layout_follows_the_schedulers_fix(version: tuple[int, int], layout: SliceLayout) -> None:
    assert layout_for(version) is layout
    assert needs_fence(version) is (layout is SliceLayout.PER_DEVICE)


@pytest.mark.parametrize(("answer", "version"), [
    ({"major": "1", "minor": "34", "gitVersion": "v1.34.4"}, (1, 34)),
    ({"major": "1", "minor": "34+", "gitVersion": "v1.34.4-eks-1a2b3c"}, (1, 34)),  # a distribution's build
    ({"major": "1", "minor": "35+"}, (1, 35)),  # no gitVersion: minor without its "+"
    ({"gitVersion": "v1.37.2"}, (1, 37)),
])
def test_server_versions_parse(answer: dict[str, Any], version: tuple[int, int]) -> None:
    assert parse_server_version(answer) == version


@pytest.mark.parametrize("answer", [None, [], "v1.34.4", {}, {"major": "one", "minor": "34"}, {"gitVersion": "latest"}])
def test_a_version_answer_naming_no_version_is_an_error_not_a_guess(answer: object) -> None:
    with pytest.raises(ValueError, match="version"):
        parse_server_version(answer)


def test_per_device_puts_each_device_in_its_own_slice_of_one_pool() -> None:
    pool = desired_pool("gpu.example.com", "node-1", gpus(10), SliceLayout.PER_DEVICE)
    assert [[d["name"] for d in s] for s in pool.slices] == [[f"gpu-{i}"] for i in range(10)]
    assert pool.layout is SliceLayout.PER_DEVICE and pool.pool_name == "node-1"
    packed = desired_pool("gpu.example.com", "node-1", gpus(10), SliceLayout.PACKED)
    assert [len(s) for s in packed.slices] == [10]
    # Same devices, same encoding: only the cut differs, so a layout change moves no device.
    assert [d for s in pool.slices for d in s] == [d for s in packed.slices for d in s]


def test_per_device_of_an_empty_pool_is_still_one_empty_slice() -> None:
    assert desired_pool("gpu.example.com", "node-1", [], SliceLayout.PER_DEVICE).slices == ((),)


def test_the_layout_setting_is_checked() -> None:
    assert parse_layout("auto") is None
    assert parse_layout("per-device") is SliceLayout.PER_DEVICE
    with pytest.raises(UserError, match="auto, per-device, packed"):
        parse_layout("one-per-slice")


def test_the_version_matrix_takes_the_newest_release_of_each_minor_from_1_34() -> None:
    from dra_dev.cluster.binaries import newest_patches

    listed = ["v1.33.9", "v1.34.0", "v1.34.10", "v1.34.4", "v1.35.4", "v1.36.1", "v1.36.3", "v1.37.2",
              "v1.38.0-beta.0", "v1.38.0-rc.1", "v2.0.0", "latest"]
    assert newest_patches(listed) == ["v1.34.10", "v1.35.4", "v1.36.3", "v1.37.2"]  # numbers, not strings
    assert newest_patches([]) == []


def test_a_shared_device_that_draws_counters_is_refused_naming_both_bugs() -> None:
    """kubernetes#134100 / #139034: counters and multiple allocations on one device are
    mis-counted before 1.36; the framework publishes either, never both on one device."""
    from dra._runtime.publish import DeviceValidationError
    from dra.driver import CounterConsumption, CounterSet

    memory = CounterSet("gpu-0-memory", {"slices": "8"})
    exclusive = Device(name="mig-0", consumes_counters=(CounterConsumption(memory, {"slices": "4"}),))
    assert desired_pool("gpu.example.com", "node-1", [exclusive]).device_count == 1
    shared = Device(name="mig-1", allow_multiple_allocations=True, capacity=gpus(1)[0].capacity,
                    consumes_counters=(CounterConsumption(memory, {"slices": "4"}),))
    with pytest.raises(DeviceValidationError, match=r"device 'mig-1': draws on a counter set and allows multiple"
                                                    r" allocations.*kubernetes#134100, #139034"):
        desired_pool("gpu.example.com", "node-1", [exclusive, shared])
