"""Desired-slice computation: chunking, ordering, encoding and validation, no API server."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dra._runtime.publish.desired import (
    DeviceValidationError,
    comparable_devices,
    desired_pool,
    encode_device,
    slice_object,
)
from dra._runtime.publish.timing import Backoff
from dra.driver import Capacity, Device, RequestPolicy, Taint, Version
from drivers.example.driver import ExampleDriver

DRIVER = "gpu.example.com"


def devices(n: int, **kwargs: object) -> list[Device]:
    return [Device(name=f"dev-{i}", **kwargs) for i in range(n)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(0, [0]), (1, [1]), (128, [128]), (129, [128, 1]), (300, [128, 128, 44])],
)
def test_slices_hold_at_most_128_devices(count: int, sizes: list[int]) -> None:
    pool = desired_pool(DRIVER, "node-1", devices(count))
    assert [len(s) for s in pool.slices] == sizes
    assert pool.device_count == count


def test_slices_hold_at_most_64_devices_when_any_device_has_taints() -> None:
    devs = devices(130)
    devs[7] = Device(name="dev-7", taints=(Taint("example.com/unhealthy", "xid-79", "NoExecute"),))
    pool = desired_pool(DRIVER, "node-1", devs)
    assert [len(s) for s in pool.slices] == [64, 64, 2]


def test_empty_device_list_still_publishes_one_empty_slice() -> None:
    pool = desired_pool(DRIVER, "node-1", [])
    assert pool.slices == ((),)
    body = slice_object(pool, 0, 1, "uid-1")
    assert body["spec"]["devices"] == []
    assert body["spec"]["pool"] == {"name": "node-1", "generation": 1, "resourceSliceCount": 1}


def test_order_is_deterministic_and_natural() -> None:
    devs = devices(300)
    shuffled = list(devs)
    random.Random(7).shuffle(shuffled)
    a = desired_pool(DRIVER, "node-1", devs)
    b = desired_pool(DRIVER, "node-1", shuffled)
    assert a == b
    names = [d["name"] for s in a.slices for d in s]
    assert names[:12] == [f"dev-{i}" for i in range(12)]  # dev-2 before dev-10


def test_example_driver_devices_are_encoded_as_the_api_expects() -> None:
    pool = desired_pool(DRIVER, "node-1", ExampleDriver(count=1, memory="16Gi").devices())
    (device,) = pool.slices[0]
    assert device == {
        "name": "gpu-0",
        "attributes": {
            "driverVersion": {"version": "1.0.0"},
            "index": {"int": 0},
            "model": {"string": "Example Accelerator"},
            "uuid": {"string": "GPU-57554201-0000-4000-8000-000000000000"},
        },
        "capacity": {
            "cores": {"value": "100", "requestPolicy": {"default": "100", "validRange": {"min": "1", "max": "100", "step": "1"}}},
            "memory": {
                "value": "16Gi",
                "requestPolicy": {"default": "16Gi", "validRange": {"min": "1Mi", "max": "16Gi", "step": "1Mi"}},
            },
        },
        "allowMultipleAllocations": True,
    }


def test_bool_attributes_stay_bool_and_taints_are_encoded() -> None:
    dev = Device(name="d0", attributes={"healthy": True, "count": 3}, taints=(Taint("k", effect="NoSchedule"),))
    out = encode_device(dev)
    assert out["attributes"] == {"count": {"int": 3}, "healthy": {"bool": True}}
    assert out["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    assert "allowMultipleAllocations" not in out


def test_valid_values_policy_is_encoded() -> None:
    cap = Capacity("8", RequestPolicy(default="2", valid_values=("1", "2", "4", "8")))
    out = encode_device(Device(name="d0", capacity={"slots": cap}, allow_multiple_allocations=True))
    assert out["capacity"]["slots"] == {"value": "8", "requestPolicy": {"default": "2", "validValues": ["1", "2", "4", "8"]}}


def test_slice_object_names_the_node_and_its_owner() -> None:
    pool = desired_pool(DRIVER, "node-1", devices(3))
    body = slice_object(pool, 0, 4, "uid-1")
    assert body["metadata"] == {
        "generateName": "node-1-gpu.example.com-",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "uid-1", "controller": True}],
    }
    assert body["spec"]["nodeName"] == "node-1"
    assert body["spec"]["driver"] == DRIVER
    assert slice_object(pool, 0, 4, "uid-1", name="s-1")["metadata"]["name"] == "s-1"


def test_comparison_ignores_what_the_server_normalises() -> None:
    sent = [encode_device(Device(name="d0", capacity={"memory": Capacity("1024Mi")}, taints=(Taint("k"),)))]
    stored: list[dict[str, Any]] = [
        {
            "name": "d0",
            "capacity": {"memory": {"value": "1Gi"}},
            "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}],
            "allowMultipleAllocations": False,
        }
    ]
    assert comparable_devices(sent) == comparable_devices(stored)
    stored[0]["capacity"]["memory"]["value"] = "2Gi"
    assert comparable_devices(sent) != comparable_devices(stored)


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (Device(name="GPU_0"), "device 'GPU_0': the name must be a DNS label"),
        (Device(name="d0", attributes={"9lives": 1}), "attribute '9lives': the name must be a C identifier"),
        (Device(name="d0", attributes={"Bad_Domain/x": 1}), "the prefix 'Bad_Domain' must be a DNS subdomain"),
        (Device(name="d0", attributes={"x": 1.5}), "float is not one of str, int, bool, Version"),  # type: ignore[dict-item]
        (Device(name="d0", attributes={"x": "y" * 65}), "at most 64"),
        (Device(name="d0", attributes={"v": Version("12")}), "is not a semantic version"),
        (Device(name="d0", attributes={"x": 2**63}), "does not fit in int64"),
        (Device(name="d0", capacity={"m": Capacity("lots")}), "value 'lots' is not a Kubernetes quantity"),
        (
            Device(name="d0", capacity={"m": Capacity("1Gi", RequestPolicy(default="1Mi", min="1Mi"))}),
            "needs allow_multiple_allocations=True",
        ),
        (
            Device(
                name="d0",
                capacity={"m": Capacity("1Gi", RequestPolicy(default="1Mi", min="1Mi", valid_values=("1Mi",)))},
                allow_multiple_allocations=True,
            ),
            "not both",
        ),
        (
            Device(name="d0", capacity={"m": Capacity("1Gi", RequestPolicy(min="1Mi"))}, allow_multiple_allocations=True),
            "needs a default",
        ),
        (
            Device(
                name="d0",
                capacity={"m": Capacity("1Gi", RequestPolicy(default="1Mi", max="2Gi", min="1Mi"))},
                allow_multiple_allocations=True,
            ),
            "max 2Gi exceeds the value 1Gi",
        ),
        (
            Device(
                name="d0",
                capacity={"m": Capacity("8", RequestPolicy(default="3", valid_values=("2", "4")))},
                allow_multiple_allocations=True,
            ),
            "default 3 must be one of the valid values",
        ),
        (Device(name="d0", taints=(Taint("k", effect="Sometimes"),)), "has effect 'Sometimes'"),
    ],
)
def test_invalid_devices_are_rejected_with_a_message_naming_them(device: Device, message: str) -> None:
    with pytest.raises(DeviceValidationError, match="device '") as info:
        desired_pool(DRIVER, "node-1", [Device(name="ok-0"), device])
    assert f"device {device.name!r}" in str(info.value)
    assert message in str(info.value)


def test_too_many_attributes_and_capacities_name_the_device() -> None:
    dev = Device(
        name="big-3",
        attributes={f"a{i}": i for i in range(30)},
        capacity={"c0": Capacity("1"), "c1": Capacity("1"), "c2": Capacity("1")},
    )
    with pytest.raises(DeviceValidationError, match=r"device 'big-3': has 30 attributes and 3 capacities; at most 32"):
        desired_pool(DRIVER, "node-1", [dev])


def test_duplicate_device_names_are_rejected() -> None:
    with pytest.raises(DeviceValidationError, match="device 'd0' is listed twice"):
        desired_pool(DRIVER, "node-1", [Device(name="d0"), Device(name="d0")])


def test_bad_driver_or_node_name_is_rejected() -> None:
    with pytest.raises(DeviceValidationError, match="driver name"):
        desired_pool("GPU.Example.com", "node-1", [])
    with pytest.raises(DeviceValidationError, match="node name"):
        desired_pool(DRIVER, "Node_1", [])


def test_backoff_grows_to_its_ceiling_and_resets() -> None:
    backoff = Backoff(initial=0.2, factor=2.0, maximum=5.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(7)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    backoff.reset()
    assert backoff.next_delay() == 0.2


def test_backoff_jitter_stays_within_bounds() -> None:
    backoff = Backoff(initial=1.0, factor=2.0, maximum=4.0, jitter=0.5, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(50)]
    assert all(0.5 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 10
