"""A real process started with a claim's CDI edits is held to the claim's share.

The example driver prepares a claim through the framework (hook set, preload file, the claim's
config and ledger); `dra.testing.runtime.run_with_cdi` starts `cuda_workload` with those edits
in a private mount namespace, under the stub libcuda and the real hook. The workload prints the
total of cuMemGetInfo and whether an allocation one MiB past it is refused.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from ci_gate import gate

import dra
from dra._runtime.cdi import CDISpecs
from dra._runtime.checkpoint import Checkpoint
from dra._runtime.enforcement import ClaimHooks
from dra._runtime.hookdir import HookDir
from dra._runtime.prepare import ClaimPreparer
from dra.fakes.stub import workload_program
from dra.testing.claims import RecordedClaims, claim_dict, result
from dra.testing.runtime import mount_script, run_with_cdi, runtime_unavailable
from drivers.example.driver import ExampleDriver

if TYPE_CHECKING:
    from tests.hook.conftest import HookLibs

GiB = 1 << 30
WHY = runtime_unavailable()
_gate = gate(WHY and f"runtime-like runner: {WHY}")


class Node:
    def __init__(self, tmp: Path, driver: ExampleDriver, preload: dra.Preload = dra.Preload.FILE) -> None:
        self.claims = RecordedClaims()
        cp = Checkpoint(tmp / "state", boot_id="b")
        self.cdi = tmp / "cdi"
        self.prep = ClaimPreparer(driver, self.claims, "node-a", cp, CDISpecs(driver.cdi_kind, self.cdi),
                                  hooks=ClaimHooks(cp.state_dir, HookDir(tmp / "hook-dir"), preload))

    def claim(self, name: str, device: str, memory: str, cores: str = "100") -> list[str]:
        c = self.claims.add(claim_dict(name, results=[result(device, share_id=f"share-{name}", memory=memory,
                                                             cores=cores)]))
        out = self.prep.prepare_claims([dra.ClaimRef(c.uid, c.namespace, c.name)])[c.uid]
        assert out.error == ""
        return [i for d in out.devices for i in d.cdi_device_ids]

    def run(self, ids: Sequence[str], *argv: str) -> dict[str, str]:
        proc = run_with_cdi(self.cdi, ids, argv or [str(workload_program())])
        out = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        out["rc"] = str(proc.returncode)
        out["stderr"] = proc.stderr
        return out


@pytest.fixture
def workload(hookcore_libs: HookLibs) -> Path:
    assert workload_program().is_file(), "make -C hookcore libs builds build/workload/cuda_workload"
    return workload_program()


@pytest.mark.parametrize(("device", "memory"), [("gpu-0", "4Gi"), ("gpu-1", "2Gi")])
def test_the_workload_sees_its_share_in_cuMemGetInfo_and_is_refused_past_it(
        tmp_path: Path, workload: Path, device: str, memory: str) -> None:
    node = Node(tmp_path, ExampleDriver(count=2))
    got = node.run(node.claim("a", device, memory, cores="30"))
    assert got["quota_total_bytes"] == str(dra.quantity_to_int(memory)), got
    assert got["within_quota_alloc"] == "ok" and got["over_quota_alloc"] == "refused", got
    assert got["rc"] == "0"
    assert got["uuid"] == ExampleDriver().uuid(int(device[-1])), "the claim's device, selected by the driver's edits"


def test_two_claims_sharing_one_device_each_see_their_own_share(tmp_path: Path, workload: Path) -> None:
    node = Node(tmp_path, ExampleDriver(count=1))
    a, b = node.claim("a", "gpu-0", "3Gi"), node.claim("b", "gpu-0", "5Gi")
    assert node.run(a)["quota_total_bytes"] == str(3 * GiB)
    assert node.run(b)["quota_total_bytes"] == str(5 * GiB)


def test_without_enforcement_the_same_share_is_not_held(tmp_path: Path, workload: Path) -> None:
    """The contrast that makes the tests above mean something: no hook, the whole device shows."""
    node = Node(tmp_path, ExampleDriver(count=1, enforce=False))
    got = node.run(node.claim("a", "gpu-0", "3Gi"))
    assert got["quota_total_bytes"] == str(16 * GiB), "the whole device, not the 3Gi share"
    assert got["within_quota_alloc"] == "ok"  # 8Gi: far past the share, within the device


def test_env_preload_works_for_processes_that_keep_the_environment(tmp_path: Path, workload: Path) -> None:
    node = Node(tmp_path, ExampleDriver(count=1), preload=dra.Preload.ENV)
    got = node.run(node.claim("a", "gpu-0", "2Gi"))
    assert got["quota_total_bytes"] == str(2 * GiB) and got["over_quota_alloc"] == "refused"


def _reads_config_file(libvgpu: Path) -> bool:
    return b"/run/hookcore" in libvgpu.read_bytes()


def test_a_child_started_with_an_empty_environment_still_gets_the_claims_limits(
        tmp_path: Path, workload: Path, hookcore_libs: HookLibs) -> None:
    """HAMi #2125: su/ssh/`env -i` children lose LD_PRELOAD and the quota variables; the preload
    file loads the hook into them and the claim's config file gives it the limits."""
    assert _reads_config_file(hookcore_libs.libvgpu), "this libvgpu.so does not read /run/hookcore/<stem>/config"
    node = Node(tmp_path, ExampleDriver(count=1))
    got = node.run(node.claim("a", "gpu-0", "3Gi"), "/bin/sh", "-c", f"exec env -i {workload}")
    assert got["quota_total_bytes"] == str(3 * GiB), got
    assert got["over_quota_alloc"] == "refused" and got["rc"] == "0"


def test_the_runner_changes_nothing_on_the_host(tmp_path: Path, workload: Path) -> None:
    before = {p: os.path.lexists(p) for p in ("/etc/ld.so.preload", "/usr/lib/hookcore", "/run/hookcore",
                                              "/usr/lib/libcuda.so.1")}
    node = Node(tmp_path, ExampleDriver(count=1))
    got = node.run(node.claim("a", "gpu-0", "1Gi"), "/bin/sh", "-c", "cat /etc/ld.so.preload; ls /run/hookcore/vgpu")
    assert got["rc"] == "0", got["stderr"]
    assert {p: os.path.lexists(p) for p in before} == before


def test_a_mount_whose_top_level_directory_is_missing_is_refused() -> None:
    with pytest.raises(ValueError, match="top-level directory does not exist"):
        mount_script([dra.Mount("/tmp", "/no-such-top-level-dir/x")], "/tmp/scratch")
