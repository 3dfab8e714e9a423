"""What the charts ship against tenants (security review 2026-12, §3 HTTP and finding 8), rendered
by the real helm: the daemon's HTTP port bound to the pod's address and closed by a NetworkPolicy,
the webhook's callers confined by a NetworkPolicy and, with ``webhook.clientCA``, authenticated;
the admin's ``allowClaimLoosening`` reaching both. At 165651d: 0.0.0.0, no policy, no client CA. Review
2026-12-04 #12: the webhook chart refuses to install with no caller authentication unless accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_dev.cluster.binaries import build_helm

HELM_DIR = Path(__file__).resolve().parents[2] / "helm"


@pytest.fixture(scope="module")
def helm() -> Path:
    return build_helm(progress=lambda m: print(m, file=sys.stderr))


def helm_template(helm: Path, chart: str, values: dict[str, Any] | None = None,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    sets = [a for k, v in (values or {}).items() for a in ("--set-json", f"{k}={json.dumps(v)}")]
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/dra-helm-cache", "HELM_CONFIG_HOME": "/tmp/dra-helm-config",
           "HELM_DATA_HOME": "/tmp/dra-helm-data"}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run([str(helm), "template", "r", str(HELM_DIR / chart), "--namespace", "dra-test",
                           "--kube-version", "1.34.4", *sets], capture_output=True, text=True, env=env, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def objects(helm: Path, chart: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(helm_template(helm, chart, values).stdout) if d]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind]
    return found


@pytest.mark.parametrize("chart", ["hami-core-gpu", "ascend"])
def test_the_daemons_http_port_is_bound_to_the_pod_and_closed_to_other_pods(helm: Path, chart: str) -> None:
    objs = objects(helm, chart)
    pod = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    (daemon,) = [c for c in pod["containers"] if c["name"] == "daemon"]
    assert "--metrics-address=$(POD_IP)" in daemon["args"]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in daemon["env"]
    assert "--allow-claim-loosening" not in daemon["args"]  # off unless the admin says so
    policy = one(objs, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"] and policy["ingress"] == []  # nobody, by default
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "kubelet-plugin"
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    opened = objects(helm, chart, {"networkPolicy.metricsFrom": monitoring, "daemon.metricsBind": "all",
                                   "daemon.allowClaimLoosening": True})
    (rule,) = one(opened, "NetworkPolicy")["spec"]["ingress"]
    assert rule["from"] == monitoring and rule["ports"] == [{"port": 8080, "protocol": "TCP"}]
    (daemon,) = [c for c in one(opened, "DaemonSet")["spec"]["template"]["spec"]["containers"] if c["name"] == "daemon"]
    assert "--metrics-address=0.0.0.0" in daemon["args"] and "--allow-claim-loosening" in daemon["args"]
    assert "NetworkPolicy" not in [o["kind"] for o in objects(helm, chart, {"networkPolicy.enabled": False})]
    bad = helm_template(helm, chart, {"daemon.metricsBind": "everywhere"}, check=False)
    assert bad.returncode != 0 and "/daemon/metricsBind" in bad.stderr


def test_the_webhook_admits_the_api_server_only_and_checks_its_certificate(helm: Path) -> None:
    objs = objects(helm, "dra-webhook", {"webhook.acceptUnauthenticatedCallers": True})
    policy = one(objs, "NetworkPolicy")["spec"]
    (https,) = policy["ingress"]  # the HTTPS port from anywhere, the health port from no pod, when accepted
    assert https["ports"] == [{"port": 8443, "protocol": "TCP"}] and "from" not in https
    api_server = [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    objs = objects(helm, "dra-webhook", {"networkPolicy.apiServerFrom": api_server,
                                         "webhook.clientCA.configMap": "apiserver-webhook-client-ca",
                                         "webhook.allowClaimLoosening": True})
    (https,) = one(objs, "NetworkPolicy")["spec"]["ingress"]
    assert https["from"] == api_server
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "--client-ca=/client-ca/ca.crt" in c["args"] and "--allow-claim-loosening" in c["args"]
    assert {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True} in c["volumeMounts"]
    assert {"name": "client-ca", "configMap": {"name": "apiserver-webhook-client-ca"}} in pod["volumes"]
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in c["env"]
    role = one(objs, "ClusterRole")
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses"], "verbs": ["get"]} in role["rules"]


AUTHENTICATED = {
    "client CA": {"webhook.clientCA.configMap": "apiserver-webhook-client-ca"},
    "API server NetworkPolicy": {"networkPolicy.apiServerFrom": [{"ipBlock": {"cidr": "10.0.0.10/32"}}]},
    "accepted by the admin": {"webhook.acceptUnauthenticatedCallers": True},
}


@pytest.mark.parametrize("values", [{}, {"networkPolicy.apiServerFrom": [{"ipBlock": {"cidr": "10.0.0.10/32"}}],
                                         "networkPolicy.enabled": False}], ids=["defaults", "policy-disabled"])
def test_the_webhook_chart_refuses_to_install_answering_any_caller(helm: Path, values: dict[str, Any]) -> None:
    """review 2026-12-04 #12: by default the HTTPS port answered any in-cluster client (a forged
    review fills a namespace with templates); now `helm template`/`install` fails naming the three
    values that fix it, also when apiServerFrom is set but no NetworkPolicy applies it."""
    proc = helm_template(helm, "dra-webhook", values, check=False)
    assert proc.returncode != 0 and "kind: Deployment" not in proc.stdout
    message = " ".join(proc.stderr.split())
    assert "nothing authenticates the callers of the webhook's /mutate and /validate" in message, message
    for value in ("webhook.clientCA.configMap", "networkPolicy.apiServerFrom", "webhook.acceptUnauthenticatedCallers=true"):
        assert value in message, (value, message)
    if values:
        assert "networkPolicy.enabled=false: no policy applies it" in message


@pytest.mark.parametrize("how", sorted(AUTHENTICATED))
def test_the_webhook_chart_installs_with_each_way_of_authenticating_callers(helm: Path, how: str) -> None:
    """review 2026-12-04 #12: each of the three values passes; the shape limit reaches the server."""
    objs = objects(helm, "dra-webhook", AUTHENTICATED[how])
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--max-shapes-per-pod=32" in c["args"]
    assert ("--client-ca=/client-ca/ca.crt" in c["args"]) is (how == "client CA")
    (https, *_) = one(objs, "NetworkPolicy")["spec"]["ingress"]
    assert ("from" in https) is (how == "API server NetworkPolicy")
