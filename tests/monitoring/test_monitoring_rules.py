"""The charts' monitoring objects as rendered: promtool accepts every PrometheusRule's rules, each
alert carries a runbook line whose section exists in docs/monitoring.md, the PodMonitor,
PrometheusRule and dashboard follow the Prometheus Operator's CRDs (`.Capabilities`) unless told,
and the dashboard's queries name only series the framework exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dra_dev.monitoring.rules import (
    dashboard,
    fast_rule_values,
    of_kind,
    panel_queries,
    render_chart,
    rule_groups,
    write_rule_file,
)

pytestmark = pytest.mark.monitoring
ROOT = Path(__file__).resolve().parents[2]
DRIVER_CHARTS = ("hami-core-gpu", "ascend", "hygon-dcu", "cambricon-mlu")
WEBHOOK = {"webhook.acceptUnauthenticatedCallers": True}
MONITORING_KINDS = {"PodMonitor", "PrometheusRule"}


def values(chart: str) -> dict[str, object]:
    return WEBHOOK if chart == "dra-webhook" else {}


@pytest.mark.parametrize("chart", [*DRIVER_CHARTS, "dra-webhook"])
def test_promtool_checks_the_rendered_rules(chart: str, helm_bin: Path, prometheus_bin: Path, tmp_path: Path) -> None:
    for short in (False, True):  # the defaults, and the short durations the alert tests use
        vals = {**values(chart), **(fast_rule_values(chart) if short else {})}
        objects = render_chart(helm_bin, chart, values=vals)
        rules = write_rule_file(objects, tmp_path / f"{chart}-{short}.rules.yaml")
        proc = subprocess.run([str(prometheus_bin / "promtool"), "check", "rules", str(rules)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        count = sum(len(g["rules"]) for g in rule_groups(objects))
        assert f"SUCCESS: {count} rules found" in proc.stdout, proc.stdout


@pytest.mark.parametrize("chart", [*DRIVER_CHARTS, "dra-webhook"])
def test_every_alert_has_a_runbook_line_and_its_section(chart: str, helm_bin: Path) -> None:
    doc = (ROOT / "docs" / "monitoring.md").read_text()
    headings = {re.sub(r"[^a-z0-9]", "", h.lower()) for h in re.findall(r"^#+ (.+)$", doc, re.M)}
    rules = [r for g in rule_groups(render_chart(helm_bin, chart, values=values(chart))) for r in g["rules"]]
    assert rules
    for rule in rules:
        runbook = rule["annotations"]["runbook"]
        assert f"docs/monitoring.md#{rule['alert'].lower()}" in runbook, rule
        assert rule["alert"].lower() in headings, f"docs/monitoring.md has no section {rule['alert']}"
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.parametrize("chart", ["hami-core-gpu", "dra-webhook"])
def test_monitoring_objects_follow_the_crds_unless_told(chart: str, helm_bin: Path) -> None:
    def kinds(crds: bool, **enabled: object) -> set[str]:
        vals = dict(values(chart))
        for part, on in enabled.items():
            vals[f"monitoring.{part}.enabled"] = on
        objects = render_chart(helm_bin, chart, values=vals, crds=crds)
        found = {o["kind"] for o in objects if o["kind"] in MONITORING_KINDS}
        found |= {"dashboard" for o in of_kind(objects, "ConfigMap") if "grafana_dashboard" in (o["metadata"].get("labels") or {})}
        return found

    everything = MONITORING_KINDS | ({"dashboard"} if chart != "dra-webhook" else set())
    assert kinds(crds=False) == set()  # auto, no CRDs: an install on a cluster without the operator works
    assert kinds(crds=True) == everything
    off = {"podMonitor": False, "prometheusRule": False} | ({"dashboard": False} if chart != "dra-webhook" else {})
    assert kinds(crds=True, **off) == set()
    assert kinds(crds=False, podMonitor=True) == {"PodMonitor"}  # told: rendered (the CRDs come later)


def test_the_podmonitor_labels_targets_as_the_alerts_select_them(helm_bin: Path) -> None:
    objects = render_chart(helm_bin, "hami-core-gpu", release="gpu", values={"monitoring.podMonitor.labels": {"release": "kps"}})
    (pm,) = of_kind(objects, "PodMonitor")
    (ds,) = of_kind(objects, "DaemonSet")
    assert pm["metadata"]["labels"]["release"] == "kps"
    assert pm["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    ports = [p["name"] for c in ds["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
    assert endpoint["port"] in ports
    job = next(r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job")
    down = next(r for g in rule_groups(objects) for r in g["rules"] if r["alert"] == "DraDaemonDown")
    assert down["expr"] == f'up{{job="{job}"}} == 0' and job == "gpu-hami-core-gpu"


@pytest.mark.parametrize("chart", DRIVER_CHARTS)
def test_the_dashboard_queries_only_series_the_framework_exports(chart: str, helm_bin: Path) -> None:
    board = dashboard(render_chart(helm_bin, chart))
    assert board["uid"] == f"dra-{chart}" and json.dumps(board)
    exported = exported_names()
    for q in panel_queries(board):
        for name in re.findall(r"\b(dra_\w+)\b", q.expr):
            assert name in exported, f"panel {q.panel!r} queries {name}, which no exporter of the framework has"


def exported_names() -> set[str]:
    """Every series name in the framework's exporters' source (their families and their suffixes)."""
    names = set()
    for path in [*ROOT.joinpath("dra").rglob("*metrics*.py")]:
        for name in re.findall(r'"(dra_[a-z_]+)"', path.read_text()):
            names |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


def _crd(plural: str, kind: str) -> dict[str, object]:
    """A stand-in for the Prometheus Operator's CRD of `kind` (its schema left open): what makes the
    API server serve monitoring.coreos.com/v1, which is all the charts look for."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


@pytest.mark.cluster
def test_helm_install_renders_them_once_the_cluster_serves_the_crds(helm_bin: Path, cluster) -> None:  # type: ignore[no-untyped-def]
    """`auto` against a real API server: `helm install --dry-run=server` reads the cluster's API
    versions; without the CRDs nothing of monitoring, with them all three objects."""
    import os

    import yaml
    from kube_helpers import unique, wait_for
    from kubernetes import client

    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "HELM_CACHE_HOME": "/tmp/dra-helm-cache",
           "HELM_CONFIG_HOME": "/tmp/dra-helm-config", "HELM_DATA_HOME": "/tmp/dra-helm-data"}
    release = unique("mon")

    def rendered() -> set[str]:
        proc = subprocess.run([str(helm_bin), "install", release, str(ROOT / "helm" / "hami-core-gpu"), "-n", release,
                               "--dry-run=server", "--set", "featureGates.check=false",
                               "--set-json", "deviceClasses=[]", "--set", "modeClasses=null"],  # cluster-scoped: other tests' may exist
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        docs = [d for d in yaml.safe_load_all(proc.stdout.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]) if d]
        return {d["kind"] for d in docs if d["kind"] in MONITORING_KINDS} | {
            "dashboard" for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {})}

    ext = client.ApiextensionsV1Api(cluster.api_client())
    discovery = client.ApisApi(cluster.api_client())

    def served() -> bool:
        return any(g.name == "monitoring.coreos.com" for g in discovery.get_api_versions().groups)

    assert not served(), "another test left the monitoring CRDs"
    assert rendered() == set()
    crds = [_crd("podmonitors", "PodMonitor"), _crd("prometheusrules", "PrometheusRule")]
    for crd in crds:
        ext.create_custom_resource_definition(crd)
    try:
        wait_for(lambda: served() or None, 30, what="monitoring.coreos.com/v1 served")
        assert rendered() == MONITORING_KINDS | {"dashboard"}
    finally:
        for crd in crds:
            ext.delete_custom_resource_definition(crd["metadata"]["name"])  # type: ignore[index]
        wait_for(lambda: not served() or None, 60, what="monitoring.coreos.com/v1 gone")
    # helm refreshes the API versions it caches on disk: later installs on this cluster render none.
    assert rendered() == set()
