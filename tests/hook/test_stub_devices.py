"""The stub libcuda's fake devices: HOOKCORE_STUB_DEVICES and UUIDs in CUDA_VISIBLE_DEVICES.

`shim_client devices` lists what the (stub) driver enumerates, with and without libvgpu.so
preloaded; the grammar is in hookcore/stub/stub_devices.h and hookcore/stub/README.md.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.hook.clients import client_env

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

GiB = 1 << 30
A = "GPU-11111111-2222-3333-4444-5555555555ab"
B = "GPU-66666666-7777-8888-9999-000000000000"
C = "GPU-66666666-aaaa-bbbb-cccc-dddddddddddd"
SPEC = f"uuid={A},memory=141Gi,name=NVIDIA H200,pci=0000:19:00.0;  uuid={B}, memory = 80G ;uuid={C};"


def devices(client: Path, libs: HookLibs, preload: Path | None = None, **env: str) -> tuple[list[tuple], str]:
    proc = subprocess.run([str(client), "devices"], env=client_env(libs, preload, **env), capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = []
    for ln in proc.stdout.splitlines():
        if ln.startswith("DEV "):
            _, ordinal, uuid, total, name = ln.split(" ", 4)
            out.append((int(ordinal), uuid, int(total), name))
    return out, proc.stderr


def test_devices_from_the_description(client: Path, hookcore_libs: HookLibs) -> None:
    got, _ = devices(client, hookcore_libs, HOOKCORE_STUB_DEVICES=SPEC)
    assert got == [(0, A, 141 * GiB, "NVIDIA H200"), (1, B, 80 * 10**9, "Stub GPU 1"),
                   (2, C, 16 * GiB, "Stub GPU 2")]


def test_values_hold_spaces_and_up_to_95_characters(client: Path, hookcore_libs: HookLibs) -> None:
    name = "NVIDIA H200 " + "x" * 83
    got, _ = devices(client, hookcore_libs, HOOKCORE_STUB_DEVICES=f"uuid={A},memory=3000m,name= {name} ")
    assert got == [(0, A, 3000 << 20, name)]   # 3000m: the core's rule (MiB), trimmed name of 95


def test_legacy_variables_when_unset(client: Path, hookcore_libs: HookLibs) -> None:
    got, _ = devices(client, hookcore_libs, STUB_CUDA_DEVICES="2", STUB_CUDA_MEMORY="2Gi")
    assert [(u, t) for _, u, t, _ in got] == [("GPU-57554201-0000-4000-8000-000000000000", 2 * GiB),
                                              ("GPU-57554201-0000-4000-8000-000000000001", 2 * GiB)]


@pytest.mark.parametrize("visible,expect", [
    (f"{B},0", [B, A]),                 # full UUID, then an index
    ("GPU-1111", [A]),                  # a unique prefix
    ("11111111-2222,2", [A, C]),        # without "GPU-"
    ("GPU-6666", []),                   # ambiguous prefix (B and C): nothing from there on
    ("2,GPU-ffff,0", [C]),              # the first entry naming no device ends the list
    ("1,1", [B]),                       # a device listed twice ends it too
    ("", []),
])
def test_cuda_visible_devices_takes_uuids(client: Path, hookcore_libs: HookLibs, visible: str,
                                          expect: list[str]) -> None:
    got, _ = devices(client, hookcore_libs, HOOKCORE_STUB_DEVICES=SPEC, CUDA_VISIBLE_DEVICES=visible)
    assert [u for _, u, _, _ in got] == expect


@pytest.mark.parametrize("spec,needle", [
    ("memory=1Gi", "device 0: uuid is required"),
    (f"uuid={A};uuid=GPU-1", "device 1: uuid=GPU-1: expected GPU-xxxxxxxx"),
    # quantities are the core's (hk_parse_mem) and its message says why
    (f"uuid={A},memory=12x", 'device 0: memory="12x": unknown unit "x"'),
    (f"uuid={A},memory=0", 'device 0: memory="0": must be greater than 0'),
    # the value rule of the grammar (stub_grammar.h, dra/fakes): 1..95 characters, none of , ; =
    (f"uuid={A},name=", "bad entry \"name=\""),
    (f"uuid={A},name={'x' * 96}", "value 1..95 characters"),
    (f"uuid={A};uuid=GPU-{A[4:].upper()}", "already used by device 0"),
    (f"uuid={A},uuid={B}", "key uuid given twice"),
    (f"uuid={A},flag", "\"flag\" is not key=value"),
    (f"uuid={A},sms=0", "device 0: sms=0: expected an SM count, 1..4096"),
    (f"uuid={A},sms=13x", "device 0: sms=13x: expected an SM count, 1..4096"),
])
def test_bad_description_leaves_no_device_and_says_why(client: Path, hookcore_libs: HookLibs, spec: str,
                                                       needle: str) -> None:
    got, err = devices(client, hookcore_libs, HOOKCORE_STUB_DEVICES=spec)
    assert got == []
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("stub: HOOKCORE_STUB_DEVICES: ") and needle in lines[0], err


def test_quota_follows_a_uuid_given_in_cuda_visible_devices(client: Path, hookcore_libs: HookLibs,
                                                            tmp_path: Path) -> None:
    """The claim keys its quota by UUID; the container selects the GPU by UUID (as CDI does)."""
    got, _ = devices(client, hookcore_libs, hookcore_libs.libvgpu, HOOKCORE_STUB_DEVICES=SPEC,
                     CUDA_VISIBLE_DEVICES=B, HOOKCORE_DEVICE_UUID_0=B, HOOKCORE_MEMORY_LIMIT_0="4Gi",
                     HOOKCORE_LEDGER=str(tmp_path / "l"))
    assert got == [(0, B, 4 * GiB, "Stub GPU 1")]
