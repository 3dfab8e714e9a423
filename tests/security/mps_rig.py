"""A fake-H200 node's MPS prepare path for the tests/security MPS cases: the real NVIDIA driver
with its own `MpsDaemons` (the FAKE control program of drivers/hami_core_gpu/fake_mps, which
follows symlinks when it writes its pid file and log, as the real one did in the review), the
real checkpoint, hook config and CDI spec. ``sharing: mps`` comes from the DeviceClass (the
admin's word), so the loosening rule for claims does not decide these tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from driver_helpers import isolated_env

import dra
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.testing.cdi import apply_cdi
from dra.testing.claims import RecordedClaims, claim_dict, opaque, result
from drivers.hami_core_gpu.driver import HamiCoreGpuDriver
from drivers.hami_core_gpu.mps import MpsDaemons

GPU = "hami-core-gpu.project-hami.io"
FAKE_CONTROL = Path(__file__).resolve().parents[2] / "drivers" / "hami_core_gpu" / "fake_mps" / "nvidia-cuda-mps-control"
STUB_ENV = ("HOOKCORE_STUB_DEVICES", "HOOKCORE_STUB_NVML_DRIVER", "HOOKCORE_STUB_NVML_CUDA", "HOOKCORE_STUB_NVML_FAIL",
            "HOOKCORE_STUB_NVML_EVENTS", "HOOKCORE_STUB_NVML_MIG")


def mps_class_config() -> dict[str, Any]:
    return opaque(GPU, {"apiVersion": f"{GPU}/v1alpha1", "kind": "GpuConfig", "sharing": "mps"}, "FromClass")


class MpsNode:
    def __init__(self, root: Path, mps_root: Path, settings: Mapping[str, str]) -> None:
        self.root, self.mps_root, self.claims = root, mps_root, RecordedClaims()
        self.driver = HamiCoreGpuDriver()
        self.driver.setup(dra.DriverContext("node-a", "node-a", {"health": "off", "mpsRoot": str(mps_root), **settings},
                                            fake="h200x8"))
        cp = Checkpoint(root / "state", boot_id="b")
        self.prep = ClaimPreparer(self.driver, self.claims, "node-a", cp, CDISpecs(self.driver.cdi_kind, root / "cdi"),
                                  hooks=ClaimHooks(cp.state_dir, HookDir(root / "hook-dir")))

    @property
    def mps(self) -> MpsDaemons:
        return self.driver.mps

    def uuid(self, device: str) -> str:
        return self.driver.by_name[device].uuid

    def prepare(self, name: str, namespace: str = "default", device: str = "hami-gpu-0", cores: str = "30",
                uid: str | None = None) -> tuple[str, dra.ClaimRef, list[str]]:
        """Prepare an MPS claim as kubelet asks: (the error, "" when prepared; its ref; its CDI ids)."""
        obj = claim_dict(name, namespace=namespace, uid=uid, config=[mps_class_config()],
                         results=[result(device, driver=GPU, share_id=f"s-{name}", cores=cores, memory="1Gi")])
        c = self.claims.add(obj)
        ref = dra.ClaimRef(c.uid, c.namespace, c.name)
        out = self.prep.prepare_claims([ref])[ref.uid]
        return out.error, ref, [i for d in out.devices for i in d.cdi_device_ids]

    def unprepare(self, ref: dra.ClaimRef) -> str:
        return self.prep.unprepare_claims([ref])[ref.uid]

    def cdi(self, ids: list[str]) -> tuple[dict[str, str], list[dra.Mount]]:
        env, mounts = apply_cdi(self.root / "cdi", ids)
        return env, list(mounts)

    def hook_config(self, ref: dra.ClaimRef) -> dict[str, str]:
        text = (self.root / "state" / "hooks" / ref.uid / "config").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))

    def control(self, uuid: str) -> subprocess.Popen[bytes]:
        """The GPU's control daemon, a child of the driver."""
        process = self.mps.status()[uuid].process
        assert process is not None
        return process

    def ask(self, uuid: str, command: str) -> str | None:
        return self.mps.ask(uuid, command)

    def close(self) -> None:
        self.mps.stop_all()
        self.driver.close()


@contextmanager
def mps_node(tmp_path: Path, settings: Mapping[str, str] | None = None) -> Iterator[MpsNode]:
    """An `MpsNode` under a short MPS root (a unix socket's path must fit 108 bytes); every control
    daemon is quit at the end, and one the test's own quit left behind is asked to quit again."""
    short = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    short.chmod(0o755)  # uid 65534 may walk to the pipe dirs, as on a node
    with isolated_env(STUB_ENV):
        os.environ["HOOKCORE_STUB_NVML_MIG"] = str(tmp_path / "mig.state")
        node = MpsNode(tmp_path / "node", short, settings or {})
        try:
            yield node
        finally:
            node.close()
            for gpu in short.iterdir():
                subprocess.run([str(FAKE_CONTROL)], input="quit\n", capture_output=True, timeout=30,
                               env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(gpu / "pipe")})
            shutil.rmtree(short, ignore_errors=True)
