"""The checkpoint's file format does not move: a record written by an earlier release is read and
written back byte for byte, and the prepare path writes the record it wrote before.

The files under tests/data/checkpoint/ were written by the code of 1c45735, before the claim path's
records were built by constructors (`DeviceRecord.of`, `.prepared`) instead of field-by-field copies:
``claim-v1.json`` by `Checkpoint.put` of `rich_record()`, ``prepared-v1.json`` by `prepare_claim`
(paths of the machine replaced by placeholders, `placeholders`). Never regenerate them with the
code under test: they are the old format.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import hookcore
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import PREPARED, Checkpoint, ClaimRecord, DeviceRecord
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.driver import AllocatedDevice, ClaimRef, ContainerEdits, DeviceNode, Mount, PreparedDevice
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result
from drivers.example.driver import ExampleDriver

DATA = Path(__file__).resolve().parents[1] / "data" / "checkpoint"
UID = "0b5c9a4e-1111-4222-8333-944455556666"
KIND = "k8s.gpu.example.com/claim"


def rich_record() -> ClaimRecord:
    """Every field of a record set, and each optional one both ways (shared and whole device, with
    and without config)."""
    shared = DeviceRecord(driver="gpu.example.com", request="gpu/small", pool="node-a", device="gpu-0", share_id="s-1",
                          consumed_capacity={"memory": 1 << 30, "cores": 30}, admin_access=False,
                          cdi_name=f"{UID}-gpu-0-s-1", cdi_ids=(f"{KIND}={UID}-gpu-0-s-1", "vendor.com/gpu=GPU-0"),
                          edits=ContainerEdits(env={"A": "1", "Ü": "ß"}, mounts=(Mount("/h", "/c"), Mount("/x", "/y", ("rw",))),
                                               device_nodes=(DeviceNode("/dev/a"), DeviceNode("/dev/b", "/dev/hb", "rw"))),
                          state={"memory": 1 << 30, "nested": {"k": [1, 2.5, None, True]}},
                          config={"apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", "mode": "shared"})
    whole = DeviceRecord(driver="gpu.example.com", request="admin", pool="node-a", device="gpu-1", admin_access=True,
                         cdi_name=f"{UID}-gpu-1", cdi_ids=(f"{KIND}={UID}-gpu-1",))
    return ClaimRecord(uid=UID, namespace="ns", name="claim", phase=PREPARED, boot_id="boot-1", devices=(shared, whole),
                       claim_edits=ContainerEdits(env={"CLAIM": "x"}, mounts=(Mount("/l", "/usr/lib/l"),)),
                       created_at=100.0, updated_at=101.25,
                       enforcement={"library": "/lib/libvgpu.so", "stem": "vgpu", "preload": "file",
                                    "settings": {"HOOKCORE_LEDGER": "/run/hookcore/vgpu/ledger"},
                                    "configDir": "/run/hookcore/vgpu", "set": "/hooks/sets/abc"})


def test_a_record_of_the_old_format_is_read_and_written_back_byte_for_byte(tmp_path: Path) -> None:
    golden = (DATA / "claim-v1.json").read_bytes()
    cp = Checkpoint(tmp_path, boot_id="boot-1")
    cp.path(UID).write_bytes(golden)
    got = cp.get(UID)
    assert got == rich_record()  # read field by field as it was written
    cp.path(UID).unlink()
    cp.put(got)
    assert cp.path(UID).read_bytes() == golden


def test_records_built_by_the_claim_path_s_constructors_are_the_old_ones() -> None:
    """`DeviceRecord.of` then `.prepared` (what prepare does) give the record the old copies gave;
    `AllocatedDevice.of` gives back what the driver was handed."""
    want = rich_record().devices[0]
    device = AllocatedDevice(want.request, want.pool, want.device, want.share_id, dict(want.consumed_capacity),
                             want.admin_access, config=object())
    base = DeviceRecord.of(want.driver, device, want.cdi_name, want.config)
    assert base == DeviceRecord(want.driver, want.request, want.pool, want.device, want.share_id,
                                dict(want.consumed_capacity), want.admin_access, want.cdi_name, config=want.config)
    done = base.prepared(want.cdi_ids[0], PreparedDevice(device, want.edits, dict(want.state), want.cdi_ids[1:]))
    assert done == want
    assert AllocatedDevice.of(done, device.config) == device and done.key == device.key


def prepare_claim(root: Path) -> bytes:
    """A claim of two example devices (one shared, one whole, a claim config) prepared with
    enforcement at a fixed time; the record file's bytes."""
    driver = ExampleDriver(count=2)
    claims = RecordedClaims()
    cp = Checkpoint(root / "state", boot_id="boot-1")
    prep = ClaimPreparer(driver, claims, "node-a", cp, CDISpecs(driver.cdi_kind, root / "cdi"),
                         hooks=ClaimHooks(cp.state_dir, HookDir(root / "hook-dir")))
    config = opaque(driver.name, {"apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", "mode": "exclusive"})
    claims.add(claim_dict("c", uid=UID, config=[config], results=[
        result("gpu-0", request="a", share_id="s-1", memory="1Gi", cores="30"), result("gpu-1", request="b")]))
    real = time.time
    time.time = lambda: 1000.0  # type: ignore[assignment]  # created and updated: the golden's
    try:
        (out,) = prep.prepare_claims([ClaimRef(UID, "default", "c")]).values()
    finally:
        time.time = real  # type: ignore[assignment]
    assert out.error == ""
    return cp.path(UID).read_bytes()


def placeholders(raw: bytes, root: Path) -> dict[str, Any]:
    """The record's ``claim`` with this machine's paths as placeholders: the temp dir, the checkout
    (stub libraries), the hook set (named by the library's digest)."""
    claim = json.loads(raw)["claim"]
    text = json.dumps(claim, sort_keys=True)
    text = text.replace(claim["enforcement"]["set"], "<set>").replace(claim["enforcement"]["library"], "<library>")
    text = text.replace(str(root), "<root>").replace(str(hookcore.BUILD_DIR), "<build>")
    out: dict[str, Any] = json.loads(text)
    return out


@pytest.mark.usefixtures("hook_library_built")
def test_the_prepare_path_writes_the_record_it_wrote_before(tmp_path: Path) -> None:
    raw = prepare_claim(tmp_path)
    golden = json.loads((DATA / "prepared-v1.json").read_text())
    assert placeholders(raw, tmp_path) == golden
    doc = json.loads(raw)
    assert list(doc) == ["apiVersion", "checksum", "claim", "kind"]  # the envelope too


@pytest.fixture
def hook_library_built() -> None:
    if not (hookcore.BUILD_DIR / "libvgpu.so").is_file():
        pytest.fail("libvgpu.so is not built: run `make -C hookcore`")


if __name__ == "__main__":  # how the goldens were made (with the old code on the path)
    import sys
    import tempfile

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cp = Checkpoint(Path(tmp), boot_id="boot-1")
        cp.put(rich_record())
        shutil.copy(cp.path(UID), out / "claim-v1.json")
    with tempfile.TemporaryDirectory() as tmp:
        raw = prepare_claim(Path(tmp))
        (out / "prepared-v1.json").write_text(json.dumps(placeholders(raw, Path(tmp)), indent=1, sort_keys=True) + "\n")
