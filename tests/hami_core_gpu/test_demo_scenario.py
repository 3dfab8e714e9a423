"""`dra demo --driver hami-core-gpu`: the scenario of examples/hami-core-gpu/demo.yaml."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kubernetes import client

from dra.cluster.controlplane import ControlPlane
from dra.demo_scenario import expected_pods, load_scenario, run_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu"


def test_the_scenario_applies_every_example_from_1_35_and_the_safe_ones_on_1_34() -> None:
    scenario = load_scenario("hami-core-gpu")
    assert scenario is not None and scenario.nodes == 2 and scenario.fake == "h200x8"
    listed = {e.file.name for e in scenario.examples}
    assert listed == {p.name for p in EXAMPLES.glob("*.yaml")} - {"deviceclass.yaml", "demo.yaml"}
    old, left = scenario.for_version("v1.34.4")
    assert len(left) == 7
    assert [e.file.name for e in old] == ["two-pods-one-gpu.yaml", "cores-and-memory.yaml"]
    new, none = scenario.for_version("v1.37.2")
    assert len(new) == len(scenario.examples) and not none
    assert expected_pods(EXAMPLES / "claim-template-deployment.yaml") == 3
    assert load_scenario("no-such-driver") is None


@pytest.mark.cluster
def test_the_demo_runs_and_cleans_up(cluster: ControlPlane, api_client: client.ApiClient, stub_nvml: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    scenario = load_scenario("hami-core-gpu")
    assert scenario is not None
    assert run_scenario(cluster, scenario) == 0
    out = capsys.readouterr().out
    done = re.search(r"demo complete: (\d+) claims on 2 nodes", out)
    assert done is not None, out
    # One workload per claim device, each refused past its quota (3 claims on 1.34, more from 1.35).
    assert int(done[1]) >= 3 and out.count("refused") >= int(done[1]) and "allowed" not in out
    data = client.CoreV1Api(api_client).list_node(_preload_content=False).data
    assert not [n for n in json.loads(data)["items"] if n["metadata"]["name"].startswith("demo-")]
