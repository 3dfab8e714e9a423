"""The dra-webhook chart: the webhooks it registers are the ones `dra webhook` builds, its
certificate is one the API server would trust for its Service, its command is what `dra webhook
run` accepts; and against the real API server it installs, keeps its CA across upgrades and
uninstalls without leaving anything.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import HELM_DIR, Tool, container, kinds, one, render, render_error, set_args
from cryptography import x509
from kube_helpers import unique, wait_for
from kubernetes import client
from test_commands import parse
from test_install import assert_nothing_left, derived, helm_release_secrets, labelled_objects

import dra
from dra._runtime import registry
from dra.webhook import registration, vendors

CHART = "dra-webhook"
CERT_MANAGER = ["--api-versions", "cert-manager.io/v1"]

# The chart refuses to install while nothing authenticates the webhook's callers (review
# 2026-12-04 #12); these are the three ways to satisfy it. "defaults" is the chart's defaults plus
# the client CA.
CLIENT_CA = {"webhook.clientCA.configMap": "apiserver-webhook-client-ca"}
API_SERVER_ONLY = {"networkPolicy.apiServerFrom": [{"ipBlock": {"cidr": "10.0.0.10/32"}}]}
ANY_CALLER = {"webhook.acceptUnauthenticatedCallers": True}
VALUE_SETS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "defaults": (CLIENT_CA, []),
    "ignore-one-replica": ({"webhook.failurePolicy": "Ignore", "replicas": 1, "webhook.logLevel": "debug",
                            "webhook.excludeNamespaces": ["monitoring", "kube-system"], **API_SERVER_ONLY}, []),
    "cert-manager-self-signed": ({"certificates.mode": "cert-manager", **CLIENT_CA}, CERT_MANAGER),
    "cert-manager-cluster-issuer": ({"certificates.mode": "cert-manager",
                                     "certificates.certManager.issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"},
                                     **API_SERVER_ONLY}, CERT_MANAGER),
    "own-secret": ({"certificates.mode": "secret", "certificates.secret.name": "my-tls",
                    "certificates.secret.caBundle": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(),
                    "service.port": 8443, "webhook.port": 9443, "webhook.healthPort": 9090, **ANY_CALLER}, []),
}


def fullname(release: str) -> str:
    return release if CHART in release else f"{release}-{CHART}"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_lint_and_template_pass_for_every_value_set(helm: Tool, name: str) -> None:
    values, extra = VALUE_SETS[name]
    # (helm lint knows no --api-versions; it does not stop at fail(), so cert-manager's sets lint too.)
    lint = helm.run("lint", "--strict", "--kube-version", "1.34.4", str(HELM_DIR / CHART), *set_args(values), check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    objects = render(helm, CHART, values=values, extra=extra)
    assert {"Deployment", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= set(kinds(objects))


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_webhooks_are_the_ones_dra_webhook_registers(helm: Tool, name: str) -> None:
    """Same rules, CEL match conditions, selectors and paths as dra.webhook.registration builds
    for this release's Service; only the CA bundle's origin differs."""
    values, extra = VALUE_SETS[name]
    objects = render(helm, CHART, release="rel", namespace="hami-system", values=values, extra=extra)
    svc = one(objects, "Service")
    want = registration.configurations(
        vendors.load(None), "CA", service=("hami-system", fullname("rel"), svc["spec"]["ports"][0]["port"]),
        namespace="hami-system", failure_policy=values.get("webhook.failurePolicy", "Fail"), name=fullname("rel"),
        drivers=sorted(registry.driver_classes()))
    excluded = values.get("webhook.excludeNamespaces", [])
    for expected in want:
        for w in expected["webhooks"]:  # the chart's extra exclusions join the builder's
            for e in w["namespaceSelector"]["matchExpressions"]:
                if e["key"] == "kubernetes.io/metadata.name":
                    e["values"] = sorted({*e["values"], *excluded})
        got = one(objects, expected["kind"])
        assert got["metadata"]["name"] == expected["metadata"]["name"]
        assert normalized(got["webhooks"]) == normalized(expected["webhooks"])
        ca_bundles = {w["clientConfig"].get("caBundle") for w in got["webhooks"]}
        if values.get("certificates.mode") == "cert-manager":
            assert ca_bundles == {None}
            assert got["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"hami-system/{fullname('rel')}"}
        else:
            assert len(ca_bundles) == 1 and None not in ca_bundles


def normalized(webhooks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = json.loads(json.dumps(webhooks))
    for w in out:
        w["clientConfig"].pop("caBundle", None)
        for e in w["namespaceSelector"]["matchExpressions"]:
            e["values"] = sorted(e["values"])
    return list(out)


def decode(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def test_helm_makes_a_certificate_the_api_server_trusts_for_the_service(helm: Tool) -> None:
    objects = render(helm, CHART, release="rel", namespace="hami-system", values=CLIENT_CA)
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(decode(secret, "ca.crt"))
    cert = x509.load_pem_x509_certificate(decode(secret, "tls.crt"))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "rel-dra-webhook.hami-system.svc" in names
    for cfg in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for w in one(objects, cfg)["webhooks"]:
            assert base64.b64decode(w["clientConfig"]["caBundle"]) == decode(secret, "ca.crt")
    not_after = secret["metadata"]["annotations"]["dra.project-hami.io/not-after"]
    assert abs(datetime.datetime.fromisoformat(not_after) - cert.not_valid_after_utc) < datetime.timedelta(minutes=5)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": secret["metadata"]["name"]}} in pod["volumes"]


def test_the_webhook_server_serves_the_charts_certificate(helm: Tool, tmp_path: Path) -> None:
    """`dra webhook run` with the chart's key pair: a TLS client that trusts only the chart's CA
    and asks for the Service's DNS name (as the API server does) completes the handshake."""
    secret = one(render(helm, CHART, release="rel", namespace="hami-system", values=CLIENT_CA), "Secret")
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / key).write_bytes(decode(secret, key))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "x",
                                          "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
                                          "users": [{"name": "x", "user": {}}],
                                          "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    from dra.testing.daemon import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dra.cli", "webhook", "run", f"--cert={tmp_path / 'tls.crt'}",
                             f"--key={tmp_path / 'tls.key'}", f"--port={port}", "--health-port=0", "--host=127.0.0.1",
                             f"--kubeconfig={kubeconfig}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        import socket

        def handshake() -> str | None:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, \
                        ctx.wrap_socket(raw, server_hostname="rel-dra-webhook.hami-system.svc") as tls:
                    return str(tls.version())
            except ConnectionRefusedError:
                time.sleep(0.1)
                return None

        assert wait_for(handshake, timeout=30, what="a TLS handshake with the chart's certificate").startswith("TLS")
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.mark.parametrize("name", ["defaults", "own-secret"])
def test_the_server_accepts_the_charts_command_and_serves_the_ports_it_declares(
        helm: Tool, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    values, extra = VALUE_SETS[name]
    objects = render(helm, CHART, values=values, extra=extra)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    c = container(pod, "webhook")
    cli, params = parse(c, monkeypatch)
    assert cli == "dra webhook run"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"https": params["port"], "health": params["health_port"]}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    tls_mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "tls")
    assert params["cert"].parent == Path(tls_mount) and params["key"].parent == Path(tls_mount)
    assert params["kubeconfig"] is None and params["config"] is None
    assert params["max_shapes_per_pod"] == 32  # review 2026-12-04 #12: the chart's webhook.maxShapesPerPod
    assert one(objects, "Service")["spec"]["ports"][0]["targetPort"] == "https"
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True


def test_replicas_spread_and_a_disruption_budget_keeps_one(helm: Tool) -> None:
    objects = render(helm, CHART, values=CLIENT_CA)
    assert one(objects, "Deployment")["spec"]["replicas"] == 2
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert "PodDisruptionBudget" not in kinds(render(helm, CHART, values={"replicas": 1, **CLIENT_CA}))


BAD_VALUES: list[tuple[dict[str, Any], list[str], str]] = [
    ({"webhook.failurePolicy": "Never"}, [], "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"),
    ({"certificates.mode": "job"}, [], "at '/certificates/mode': value must be one of 'helm', 'cert-manager', 'secret'"),
    ({"certificates.validityDays": 7}, [], "at '/certificates/validityDays': minimum: got 7, want 31"),
    ({"replicas": 0}, [], "at '/replicas': minimum: got 0, want 1"),
    ({"webhook.excludeNamespaces": ["Monitoring"]}, [], "at '/webhook/excludeNamespaces/0'"),
    ({"certificates.mode": "cert-manager"}, [], "the cluster does not serve cert-manager.io/v1: install cert-manager first"),
    ({"certificates.mode": "secret"}, [], "certificates.secret.name must name the kubernetes.io/tls Secret"),
    ({"certificates.mode": "secret", "certificates.secret.name": "x"}, [],
     "certificates.mode=secret needs the CA that signed x: set certificates.secret.caBundle"),
]


@pytest.mark.parametrize(("values", "extra", "message"), BAD_VALUES, ids=[str(i) for i in range(len(BAD_VALUES))])
def test_bad_values_are_refused_with_a_message_naming_them(helm: Tool, values: dict[str, Any], extra: list[str],
                                                           message: str) -> None:
    assert message in render_error(helm, CHART, values={**CLIENT_CA, **values}, extra=extra)


# ---------------------------------------------------------------------------------------------------
# against the real API server


def test_the_memory_only_classes_are_the_examples_and_the_ones_the_mapping_names(helm: Tool) -> None:
    """HAMi's memory-only shares go to these classes (vendors.yaml memoryOnly). The drivers' charts
    make them by default (test_render.py), so this chart makes none unless listed; listed as
    examples/hami-compat/deviceclasses.yaml writes them, it renders exactly those, each config one
    its driver takes and that lifts the compute limit."""
    assert [o for o in render(helm, CHART, values=CLIENT_CA) if o["kind"] == "DeviceClass"] == []
    example = list(yaml.safe_load_all((HELM_DIR.parent / "examples" / "hami-compat" / "deviceclasses.yaml").read_text()))
    listed = [{"name": o["metadata"]["name"], "driver": o["spec"]["config"][0]["opaque"]["driver"],
               "selector": o["spec"]["selectors"][0]["cel"]["expression"],
               "parameters": o["spec"]["config"][0]["opaque"]["parameters"]} for o in example]
    rendered = {o["metadata"]["name"]: o for o in render(helm, CHART, values={**CLIENT_CA, "memoryOnlyClasses": listed})
                if o["kind"] == "DeviceClass"}
    assert {o["metadata"]["name"]: o["spec"] for o in example} == {n: o["spec"] for n, o in rendered.items()}
    named = {v.memory_only.device_class for v in vendors.load().vendors if v.memory_only}
    assert set(rendered) == named
    drivers = registry.driver_classes()
    for obj in rendered.values():
        (config,) = obj["spec"]["config"]
        decoded = dra.decode_config(drivers[config["opaque"]["driver"]], config["opaque"]["parameters"])
        assert decoded.compute_limit is False


def tls_secret(kubectl: Tool, namespace: str, name: str) -> dict[str, Any]:
    secret: dict[str, Any] = json.loads(kubectl.run("get", "secret", name, "-n", namespace, "-o", "json").stdout)
    return secret


@pytest.mark.cluster
def test_install_upgrade_keeps_the_ca_and_uninstall_leaves_nothing(cluster_helm: Tool, kubectl: Tool,
                                                                   api_client: client.ApiClient) -> None:
    release = unique("hook")
    namespace = release
    path = str(HELM_DIR / CHART)
    # Ignore: nothing serves the webhook here (no kubelet runs its pods); pods other tests create
    # meanwhile must not be refused because of it.
    values = {"webhook.failurePolicy": "Ignore", **API_SERVER_ONLY}
    installed = cluster_helm.run("install", release, path, "-n", namespace, "--create-namespace", *set_args(values))
    try:
        assert "STATUS: deployed" in installed.stdout and f"deployment/{fullname(release)}" in installed.stdout
        created = sorted(n.split("/")[0] for n in labelled_objects(kubectl, release) if not derived(n))
        assert created == sorted([
            "clusterrole.rbac.authorization.k8s.io", "clusterrolebinding.rbac.authorization.k8s.io",
            "deployment.apps",  # no DeviceClass: the drivers' charts make the memory-only ones
            "mutatingwebhookconfiguration.admissionregistration.k8s.io",
            "networkpolicy.networking.k8s.io", "poddisruptionbudget.policy", "secret", "service", "serviceaccount",
            "validatingwebhookconfiguration.admissionregistration.k8s.io",
        ])
        before = tls_secret(kubectl, namespace, f"{fullname(release)}-tls")["data"]
        cluster_helm.run("upgrade", release, path, "-n", namespace, *set_args({**values, "webhook.logLevel": "debug"}))
        after = tls_secret(kubectl, namespace, f"{fullname(release)}-tls")["data"]
        assert after == before, "an upgrade must keep the serving certificate (lookup) while it has time left"
        mwc = json.loads(kubectl.run("get", "mutatingwebhookconfiguration", fullname(release), "-o", "json").stdout)
        assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == before["ca.crt"]
        assert mwc["webhooks"][0]["failurePolicy"] == "Ignore"
        sa = f"system:serviceaccount:{namespace}:{fullname(release)}"
        for verb, resource, allowed in (("watch", "resourceslices.resource.k8s.io", "yes"),
                                        ("create", "resourceclaimtemplates.resource.k8s.io", "yes"),
                                        ("get", "deviceclasses.resource.k8s.io", "yes"),
                                        ("delete", "resourceclaimtemplates.resource.k8s.io", "no"),
                                        ("create", "resourceclaims.resource.k8s.io", "no"),
                                        ("create", "resourceslices.resource.k8s.io", "no"),
                                        ("create", "events", "yes"), ("get", "replicasets.apps", "yes"),
                                        ("list", "replicasets.apps", "no"), ("update", "deployments.apps", "no"),
                                        ("list", "resourcequotas", "yes"), ("update", "resourcequotas", "no"),
                                        ("get", "secrets", "no"), ("patch", "pods", "no")):
            got = kubectl.run("auth", "can-i", verb, resource, "-n", "default", f"--as={sa}", check=False).stdout.strip()
            assert got == allowed, (verb, resource)
    finally:
        uninstalled = cluster_helm.run("uninstall", release, "-n", namespace, "--wait", check=False)
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert_nothing_left(kubectl, release)
    assert helm_release_secrets(kubectl, namespace, release) == []
    client.CoreV1Api(api_client).delete_namespace(namespace)


@pytest.mark.cluster
@pytest.mark.parametrize("name", ["defaults", "own-secret"])
def test_every_rendered_object_is_created_by_the_api_server(helm: Tool, kubectl: Tool, api_client: client.ApiClient,
                                                            name: str) -> None:
    """(cert-manager's Issuer and Certificate need cert-manager's CRDs, which this cluster lacks:
    those value sets are checked by helm template only.)"""
    values, extra = VALUE_SETS[name]
    namespace = unique("hookobj")
    client.CoreV1Api(api_client).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    objects = render(helm, CHART, release=namespace, namespace=namespace,
                     values={**values, "webhook.failurePolicy": "Ignore"}, extra=extra)
    manifest = yaml.safe_dump_all(objects, sort_keys=False)
    try:
        applied = json.loads(kubectl.run("apply", "--server-side", "--field-manager=chart-test", "-o", "json", "-f", "-",
                                         stdin=manifest).stdout)
        items = applied.get("items", [applied])
        assert sorted(i["kind"] for i in items) == sorted(o["kind"] for o in objects)
        for obj, got in zip(objects, items, strict=True):
            if obj["kind"].endswith("WebhookConfiguration"):
                # The API server compiled every CEL match condition and kept every field.
                assert normalized(got["webhooks"]) == normalized(obj["webhooks"])
    finally:
        kubectl.run("delete", "--wait=false", "-f", "-", stdin=manifest, check=False)
        client.CoreV1Api(api_client).delete_namespace(namespace)
