"""Every shape of claim the bundled drivers prepare, through the real framework path on their
fakes, and what a runtime gives its containers (`claim_inputs`): the mounts with their modes and
the environment. The trust-boundary test (`test_trust_boundary.py`) holds them against the table
in docs/trust-boundary.md, so a new writable mount or variable cannot arrive unlisted."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dra import ClaimRef, Device, Driver, DriverContext, Mount
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.config import encode_config
from dra.testing.cdi import apply_cdi
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result

NODE = "trust-node"


@dataclasses.dataclass(frozen=True)
class Shape:
    """One kind of claim: a driver on its fake, a class config (the admin's), which devices."""

    name: str
    driver: Callable[[], Driver]
    fake: str | None = None
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    config: Any = None  # the DeviceClass's config (FromClass: the admin's, never a loosening)
    pick: Callable[[Sequence[Device]], Sequence[Device]] = lambda devs: [d for d in devs if "-mig-" not in d.name][:2]


@dataclasses.dataclass(frozen=True)
class ClaimInputs:
    """What one claim's containers get: env and mounts (container path -> options)."""

    env: dict[str, str]
    mounts: list[Mount]

    def writable(self) -> dict[str, Mount]:
        return {m.container_path: m for m in self.mounts if "ro" not in m.options}


def _results(driver: Driver, devices: Sequence[Device]) -> list[dict[str, Any]]:
    out = []
    for i, dev in enumerate(devices):
        capacity = {k: (c.policy.default if c.policy and c.policy.default else c.value) for k, c in dev.capacity.items()} \
            if dev.allow_multiple_allocations else {}
        if "cores" in capacity:
            capacity["cores"] = "30"
        out.append(result(dev.name, request=f"r{i}", driver=driver.name, pool=NODE,
                          share_id=str(uuid.uuid4()) if dev.allow_multiple_allocations else None, **capacity))
    return out


@contextmanager
def _stub_env(root: Path) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith("HOOKCORE_STUB_")}
    os.environ["HOOKCORE_STUB_NVML_MIG"] = str(root / "mig.state")
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("HOOKCORE_STUB_")]:
            del os.environ[k]
        os.environ.update(saved)


def claim_inputs(shape: Shape, root: Path) -> ClaimInputs:
    """Prepare one claim of `shape` as kubelet would and apply its CDI spec as a runtime would."""
    with _stub_env(root):
        driver = shape.driver()
        driver.setup(DriverContext(node_name=NODE, pool_name=NODE, settings=dict(shape.settings), fake=shape.fake))
        try:
            claims = RecordedClaims()
            cp = Checkpoint(root / "state", boot_id="trust-boot")
            prep = ClaimPreparer(driver, claims, NODE, cp, CDISpecs(driver.cdi_kind, root / "cdi"),
                                 hooks=ClaimHooks(cp.state_dir, HookDir(root / "hook-dir")))
            config = [] if shape.config is None else [
                opaque(driver.name, encode_config(type(driver), shape.config), "FromClass")]
            c = claims.add(claim_dict("shape", "tenant", results=_results(driver, shape.pick(driver.devices())),
                                      config=config, node=NODE))
            ref = ClaimRef(c.uid, c.namespace, c.name)
            out = prep.prepare_claims([ref])[ref.uid]
            assert out.error == "", f"{shape.name}: {out.error}"
            env, mounts = apply_cdi(root / "cdi", [i for d in out.devices for i in d.cdi_device_ids])
            assert prep.unprepare_claims([ref]) == {ref.uid: ""}
            return ClaimInputs(env, mounts)
        finally:
            close = getattr(driver, "close", None)
            if close is not None:
                close()
