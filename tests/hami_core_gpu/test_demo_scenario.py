"""`dra demo --driver hami-core-gpu`: the scenario of examples/hami-core-gpu/demo.yaml."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kubernetes import client

from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.demo.scenario import expected_pods, load_scenario, run_scenario

pytestmark = pytest.mark.scheduler  # `make test-versions` runs it on every minor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hami-core-gpu"


def test_the_scenario_applies_every_example_on_every_version() -> None:
    scenario = load_scenario("hami-core-gpu")
    assert scenario is not None and scenario.nodes == 2 and scenario.fake == "h200x8"
    listed = {e.file.name for e in scenario.examples}
    assert listed == {p.name for p in EXAMPLES.glob("*.yaml")} - {"deviceclass.yaml", "demo.yaml"}
    for version in ("v1.34.4", "v1.35.4", "v1.37.2"):  # one request per device: nothing needs 1.35 (issue 16)
        use, left = scenario.for_version(version)
        assert len(use) == len(scenario.examples) and not left
    assert scenario.chart is not None and (scenario.chart / "Chart.yaml").is_file()
    assert scenario.fenced is not None and scenario.fenced.parent.name == "fenced"
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
    # Every example on every version; one workload per claim device, each refused past its quota.
    assert int(done[1]) == 12 and "left out" not in out and "allowed" not in out, out
    assert out.count("refused") >= int(done[1])
    # `dra top --once` while every workload held half its quota: every claim listed, each holding memory
    top = re.search(r"dra top --once -o json: (\d+) claims, each with its device, requested and used memory and cores"
                    r" \((\d+) holding memory now\)", out)
    assert top is not None and int(top[1]) == int(done[1]) == int(top[2]), out
    minor = int(cluster.k8s_version.split(".")[1])
    if minor < 35:  # the fenced request refused at admission, with the bug and the way out
        assert "refused two-gpus-one-request.yaml:" in out and "kubernetes#133705" in out, out
    else:
        assert "two-gpus-one-request.yaml: admitted" in out, out
    data = client.CoreV1Api(api_client).list_node(_preload_content=False).data
    assert not [n for n in json.loads(data)["items"] if n["metadata"]["name"].startswith("demo-")]
