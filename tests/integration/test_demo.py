"""`dra demo --driver D`: every bundled driver ships a scenario, and the example driver's runs.

The scenarios are data (examples/*/demo.yaml); these tests hold each bundled driver to having
one whose files exist, and run the template driver's tour on the session's control plane. The
other drivers' tours: tests/hami_core_gpu/test_demo_scenario.py, tests/ascend/test_ascend_demo.py.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import clear_demo_drivers, unique
from kubernetes import client
from rich.console import Console

from dra._runtime import registry
from dra.errors import UserError
from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo import console
from dra_dev.demo.heterogeneous import load_parts
from dra_dev.demo.real_node import _pod_story, _wait_finished
from dra_dev.demo.scenario import load_scenario, scenario_files
from dra_dev.demo.tour import run_demo


def test_every_bundled_driver_ships_a_scenario_whose_files_exist() -> None:
    drivers = set(registry.registered(registry.DRIVERS))
    assert {"example", "hami-core-gpu", "ascend"} <= drivers
    assert set(scenario_files()) == drivers, "one examples/*/demo.yaml per bundled driver, and none for others"
    for entry in drivers:
        scenario = load_scenario(entry)
        assert scenario is not None and scenario.examples, entry
        assert scenario.device_class.is_file(), entry
        assert all(e.file.is_file() for e in scenario.examples), entry
    example = load_scenario("example")
    assert example is not None and example.fake is None and example.daemon_args == ("--set", "count=2")
    assert load_scenario("gpu.example.com") == example  # the examples directory's name works too
    ascend = load_scenario("ascend")
    assert ascend is not None and ascend.daemon_args[:1] == ("--fake",) and ascend.workload == "acl_workload"
    assert not ascend.real_node  # the real node's workload image speaks CUDA only
    assert {p.driver for p in load_parts()} <= drivers


def test_an_unknown_driver_is_refused_naming_the_drivers_with_a_scenario(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--driver no-such: no demo scenario .* drivers with one: .*ascend"):
        run_demo(tmp_path, "v1.34.4", driver_entry="no-such")


def test_real_node_is_refused_for_a_scenario_that_does_not_suit_it(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="realNode: false"):
        run_demo(tmp_path, "v1.34.4", driver_entry="ascend", node_mode="real")


@pytest.mark.cluster
def test_the_example_drivers_demo_runs_its_examples_and_holds_every_share(
        cluster: ControlPlane, monkeypatch: pytest.MonkeyPatch, api_client: Any) -> None:
    clear_demo_drivers(api_client)
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=220))
    assert run_demo(cluster.directory, cluster.k8s_version, driver_entry="example", node_mode="harness") == 0
    out = buf.getvalue()
    print(out)  # shown with pytest -s
    assert "a node daemon `dra run example --set count=2` each" in out
    assert len(re.findall(r"demo-\w+-\d: published 2 devices \((gpu-0, gpu-1|gpu-1, gpu-0)\)", out)) == 2
    assert "shared-device.yaml: allocated" in out and "claim-template.yaml: allocated" in out
    # shared-device.yaml's two claims and claim-template.yaml's four replicas' claims.
    assert "demo complete: 6 claims on 2 nodes" in out
    # One workload per claim device: it sees its consumed memory as the device's total and is
    # refused past it (claim, device, consumed memory, memory it sees, allocation past it, peak).
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines() if "│ refused" in line]
    seen = {r[0]: r for r in rows if len(r) == 6}
    assert len(seen) == 6, out
    assert seen["training"][2:5] == ["10Gi", "10Gi", "refused"] and seen["notebook"][2:5] == ["4Gi", "4Gi", "refused"]
    assert all(r[2] == r[3] and r[4] == "refused" for r in seen.values()), seen
    assert "unprepare errors: none" in out
    assert "heterogeneous claim complete" in out and "skipped" not in out
    assert "left running: the embedded control plane" in out and "cluster down --dir" in out


def test_a_broken_scenario_or_parts_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "demo.yaml").write_text("driver: mine\nexamples: [{file: a.yaml}]\n")  # no deviceClass
    with pytest.raises(UserError, match=r"mine/demo.yaml: not a demo scenario .*deviceClass"):
        load_scenario("mine", root=tmp_path)
    assert load_scenario("other", root=tmp_path) is None
    parts = tmp_path / "parts.yaml"
    parts.write_text("parts: [{driver: mine, fake: f, cores: '1'}]\n")  # no memory, no workload
    with pytest.raises(UserError, match=r"parts.yaml: not a heterogeneous demo .*memory"):
        load_parts(parts)


@pytest.mark.cluster
def test_a_pod_that_does_not_finish_is_reported_with_where_it_stands(api_client: Any) -> None:
    """The real-node demo's timeout names the pod's phase and state, not just "timed out"."""
    core = client.CoreV1Api(api_client)
    ns = unique("stuck")
    core.create_namespace({"metadata": {"name": ns}})
    try:
        core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stuck"}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "no-such-node"},
            "containers": [{"name": "main", "image": "registry.invalid/none:0"}]}})
        with pytest.raises(UserError, match=rf"timed out .* pod stuck to finish.* pod {ns}/stuck is Pending "
                                            r"\(no container started\); events: "):
            _wait_finished(core, ns, "stuck", 0.5)
        # A pod gone by the time of the diagnosis: it says so instead of raising over the timeout.
        assert _pod_story(core, ns, "none").startswith(f"pod {ns}/none: its status could not be read (")
    finally:
        core.delete_namespace(ns)
