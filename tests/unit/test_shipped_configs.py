"""What users run outside this machine stays in step with what the tests run here."""

from __future__ import annotations

from pathlib import Path

import yaml

from dra_dev.cluster.controlplane import FEATURE_GATES

ROOT = Path(__file__).resolve().parents[2]


def test_kind_config_turns_on_the_gates_the_embedded_control_plane_uses() -> None:
    cfg = yaml.safe_load((ROOT / "examples" / "kind-cluster.yaml").read_text())
    assert cfg["kind"] == "Cluster"
    assert {g for g, on in cfg["featureGates"].items() if on} == set(FEATURE_GATES)
    assert cfg["runtimeConfig"]["resource.k8s.io/v1alpha3"] == "true"  # DeviceTaintRule
    assert "enable_cdi = true" in cfg["containerdConfigPatches"][0]

