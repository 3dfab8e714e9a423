"""The stub CUDA/NVML libraries (hookcore/stub) for fake backends: where they are, and the
device description they read.

A fake backend publishes its devices and adds ``HOOKCORE_STUB_DEVICES`` to the claim's container
edits, so a workload under the stub sees the claim's devices (UUIDs, memory) and the hook
enforces the claim's quota on them. Format: devices separated by ``;``, each a list of
``key=value`` separated by ``,``; keys ``uuid`` (required), ``memory`` (bytes or a quantity),
``name``; the NVML stub reads more keys (hookcore/stub/README.md). Unknown keys are ignored.
``HOOKCORE_STUB_NPUS`` (the DCMI/ACL stubs) has the same grammar. This module is its one writer
(`stub_devices`) and one reader (`parse_stub_devices`), with one value rule (`STUB_VALUE`: what
the C stubs' parser keeps), so a fake can never write what the stubs read differently.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

STUB_DEVICES_ENV = "HOOKCORE_STUB_DEVICES"
STUB_NPUS_ENV = "HOOKCORE_STUB_NPUS"
STUB_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
STUB_LIBRARY_DIR_IN_CONTAINER = "/usr/lib"
"""Where a fake backend mounts the stub libraries: a directory the dynamic loader searches by
default, as the vendor's container toolkit does with the real ones, so a child started with an
empty environment still finds them."""

STUB_VALUE = re.compile(r"[^,;=]{1,95}")
"""A key or value the stubs read back unchanged: 1..95 characters, none of ``,;=`` (spaces are
fine: a product name such as "NVIDIA H200"); leading and trailing spaces are trimmed on read."""


def stub_library(name: str) -> Path:
    """The stub vendor library `name` (e.g. ``libdcmi.so``) as a fake backend loads and mounts it:
    hookcore's built one, or its copy under ``$DRA_FAKE_STUB_DIR`` (`dra.fakes.stub_dir`)."""
    import hookcore
    from dra.fakes import stub_dir

    return stub_dir(hookcore.stub_library(name).parent) / name


def stub_library_mounts() -> list[tuple[str, str]]:
    """(host path, container path) of each stub library, for a fake backend's container edits."""
    return [(str(stub_library(name)), f"{STUB_LIBRARY_DIR_IN_CONTAINER}/{name}") for name in STUB_LIBRARIES]


def workload_program() -> Path:
    """The built ``cuda_workload`` (hookcore/workload): prints its memory quota and whether an
    allocation past it is refused."""
    from hookcore import BUILD_DIR

    return BUILD_DIR / "workload" / "cuda_workload"


def check_stub_value(value: str) -> bool:
    """Whether `value` survives the stub grammar unchanged (`STUB_VALUE`, no edge spaces)."""
    return bool(STUB_VALUE.fullmatch(value)) and value == value.strip()


def stub_devices(devices: Sequence[Mapping[str, str | int]]) -> str:
    """``HOOKCORE_STUB_DEVICES`` (or ``_NPUS``) for `devices` (each a mapping with at least ``uuid``)."""
    out = []
    for i, dev in enumerate(devices):
        if "uuid" not in dev:
            raise ValueError(f"stub device {i}: a uuid is required")
        fields = []
        for k, v in dev.items():
            if not check_stub_value(k) or not check_stub_value(str(v)):
                raise ValueError(f"stub device {i}: {k}={v!r} cannot be written (1..95 characters, no ',', ';' or '=')")
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
            dev[k.strip()] = v.strip()
        if "uuid" not in dev:
            raise ValueError(f"stub device {part!r}: a uuid is required")
        devices.append(dev)
    return devices
