"""How a pool's devices are cut into ResourceSlices, chosen from the API server's version.

kube-scheduler 1.34 checks a multi-allocatable device's consumable capacity on
``slice.Spec.Devices[i]`` where ``i`` is the index of the device *within the request*, not within
its slice (kubernetes#133705, fixed in 1.35.0, in no 1.34 patch). With several devices per slice
every share lands on the slice's first device and the others stay empty. With one device per
slice (`PER_DEVICE`) the index of a request's first device, 0, is the right one, so every device
of a node is shareable; a request for more than one device (index 1 and up) then reads past the
end of its one-device slice and kube-scheduler panics, which is why the charts fence such
requests on 1.34 (`helm/dra-common/templates/_fence.tpl`).

From 1.35 on the scheduler reads the right device, and `PACKED` (up to 128 devices per slice,
the upstream default) is used: fewer objects, and it needs no fence.
"""

from __future__ import annotations

import enum
import re

from dra.errors import UserError

FIXED_IN_MINOR = 35
"""The first Kubernetes 1.x minor whose scheduler carries the fix of kubernetes#133705."""

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class SliceLayout(enum.StrEnum):
    """`PER_DEVICE`: one device per slice, one pool of N slices. `PACKED`: up to 128 per slice."""

    PER_DEVICE = "per-device"
    PACKED = "packed"


def parse_server_version(info: object) -> tuple[int, int]:
    """(major, minor) from the API server's ``/version`` answer; its gitVersion wins over `minor`
    (which some distributions write as "34+")."""
    if not isinstance(info, dict):
        raise ValueError(f"the API server's /version answer is not an object: {info!r:.100}")
    git = info.get("gitVersion")
    if isinstance(git, str) and (m := _VERSION.match(git)):
        return int(m.group(1)), int(m.group(2))
    major, minor = str(info.get("major", "")), str(info.get("minor", "")).rstrip("+")
    if major.isdigit() and minor.isdigit():
        return int(major), int(minor)
    raise ValueError(f"the API server's /version answer names no version: {info!r:.200}")


def layout_for(version: tuple[int, int]) -> SliceLayout:
    """The layout that lets kube-scheduler of `version` share every device of a node."""
    major, minor = version
    if major == 1 and minor < FIXED_IN_MINOR:
        return SliceLayout.PER_DEVICE
    return SliceLayout.PACKED


def needs_fence(version: tuple[int, int]) -> bool:
    """Whether requests for several devices must be refused at admission (kubernetes#133705)."""
    return layout_for(version) is SliceLayout.PER_DEVICE


def parse_layout(value: str) -> SliceLayout | None:
    """`--set`-style setting: "auto" (None: from the version), "per-device" or "packed"."""
    if value == "auto":
        return None
    try:
        return SliceLayout(value)
    except ValueError:
        raise UserError(
            f"slice layout {value!r} is not one of auto, per-device, packed"
            " (auto: per-device on Kubernetes 1.34 for kubernetes#133705, packed from 1.35)"
        ) from None
