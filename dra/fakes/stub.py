"""The stub CUDA/NVML libraries (hookcore/stub) for fake backends: where they are, and the
device description they read.

A fake backend publishes its devices and adds ``HOOKCORE_STUB_DEVICES`` to the claim's container
edits, so a workload under the stub sees the claim's devices (UUIDs, memory) and the hook
enforces the claim's quota on them. Format: devices separated by ``;``, each a list of
``key=value`` separated by ``,``; keys ``uuid`` (required), ``memory`` (bytes or a quantity),
``name``; the NVML stub reads more keys (hookcore/stub/README.md). Unknown keys are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

STUB_DEVICES_ENV = "HOOKCORE_STUB_DEVICES"
STUB_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
STUB_LIBRARY_DIR_IN_CONTAINER = "/usr/lib"
"""Where a fake backend mounts the stub libraries: a directory the dynamic loader searches by
default, as the vendor's container toolkit does with the real ones, so a child started with an
empty environment still finds them."""

_VALUE = re.compile(r"^[^,;=\s]+$")


def stub_library_dir() -> Path:
    """The directory of the built stub ``libcuda.so.1`` and ``libnvidia-ml.so.1``."""
    from hookcore import stub_dir

    return stub_dir()


def stub_library_mounts() -> list[tuple[str, str]]:
    """(host path, container path) of each stub library, for a fake backend's container edits."""
    return [(str(stub_library_dir() / name), f"{STUB_LIBRARY_DIR_IN_CONTAINER}/{name}") for name in STUB_LIBRARIES]


def workload_program() -> Path:
    """The built ``cuda_workload`` (hookcore/workload): prints its memory quota and whether an
    allocation past it is refused."""
    from hookcore import BUILD_DIR

    return BUILD_DIR / "workload" / "cuda_workload"


def stub_devices(devices: Sequence[Mapping[str, str | int]]) -> str:
    """``HOOKCORE_STUB_DEVICES`` for `devices` (each a mapping with at least ``uuid``)."""
    out = []
    for i, dev in enumerate(devices):
        if "uuid" not in dev:
            raise ValueError(f"stub device {i}: a uuid is required")
        fields = []
        for k, v in dev.items():
            if not _VALUE.match(k) or not _VALUE.match(str(v)):
                raise ValueError(f"stub device {i}: {k}={v!r} cannot be written (no ',', ';', '=' or spaces)")
            fields.append(f"{k}={v}")
        out.append(",".join(fields))
    return ";".join(out)


def parse_stub_devices(text: str) -> list[dict[str, str]]:
    """The inverse of `stub_devices` (for tests and fake backends reading a profile file)."""
    devices = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        dev = {}
        for field in filter(None, (f.strip() for f in part.split(","))):
            k, sep, v = field.partition("=")
            if not sep:
                raise ValueError(f"stub device {part!r}: {field!r} is not key=value")
            dev[k] = v
        if "uuid" not in dev:
            raise ValueError(f"stub device {part!r}: a uuid is required")
        devices.append(dev)
    return devices
