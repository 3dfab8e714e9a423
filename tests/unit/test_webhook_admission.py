"""The webhook's AdmissionReview handling, claim checks, configurations and HTTPS server, without
a cluster (tests/integration/test_webhook.py runs them behind a real API server)."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from dra._runtime import registry
from dra.webhook import checks, registration, vendors
from dra.webhook.inventory import StaticInventory
from dra.webhook.review import Admission, BadReview
from dra.webhook.server import WebhookServer
from dra.webhook.templates import TemplateError
from dra_dev.cluster.certs import new_ca, new_serving_cert, write_pair
from drivers.example.driver import ExampleDriver

MAPPING = vendors.load()
GPU = "hami-core-gpu.project-hami.io"
SIZES = StaticInventory({GPU: (80 << 30,)})
DRIVERS: dict[str, type] = {"gpu.example.com": ExampleDriver}


class RecordingTemplates:
    """Stands in for the API-backed TemplateStore: records what would be created."""

    def __init__(self, fail: str | None = None) -> None:
        self.created: list[Mapping[str, Any]] = []
        self.fail = fail

    def ensure(self, body: Mapping[str, Any]) -> None:
        if self.fail:
            raise TemplateError(self.fail)
        self.created.append(body)


def review(obj: Mapping[str, Any], kind: str = "Pod", operation: str = "CREATE", dry_run: bool = False,
           group: str = "") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": group, "version": "v1", "kind": kind}, "operation": operation,
        "namespace": "team-a", "object": obj, "dryRun": dry_run}}


def gpu_pod(**limits: str) -> dict[str, Any]:
    return {"metadata": {"generateName": "train-"}, "spec": {"containers": [
        {"name": "main", "resources": {"limits": limits or {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"}}}]}}


def admission(templates: Any = None) -> Admission:
    return Admission(MAPPING, SIZES, templates, DRIVERS)


def patch_of(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    resp = answer["response"]
    assert resp["patchType"] == "JSONPatch"
    return list(json.loads(base64.b64decode(resp["patch"])))


# --- /mutate -----------------------------------------------------------------------------------


def test_mutate_creates_the_template_then_answers_with_the_patch() -> None:
    t = RecordingTemplates()
    answer = admission(t).mutate(review(gpu_pod()))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["response"]["uid"] == "u-1"
    assert answer["response"]["allowed"] is True
    (created,) = t.created
    assert created["metadata"]["namespace"] == "team-a" and created["kind"] == "ResourceClaimTemplate"
    claims = next(op for op in patch_of(answer) if op["path"] == "/spec/resourceClaims")["value"]
    assert claims == [{"name": "nvidia-main", "resourceClaimTemplateName": created["metadata"]["name"]}]


def test_mutate_on_dry_run_creates_nothing_but_answers_the_same_patch() -> None:
    wet, dry = RecordingTemplates(), RecordingTemplates()
    a = admission(wet).mutate(review(gpu_pod()))
    b = admission(dry).mutate(review(gpu_pod(), dry_run=True))
    assert dry.created == [] and len(wet.created) == 1
    assert patch_of(a) == patch_of(b)


def test_mutate_leaves_impossible_pods_for_validate_to_refuse() -> None:
    t = RecordingTemplates()
    pod = gpu_pod(**{"nvidia.com/gpu": "1", "nvidia.com/gpucores": "101"})
    answer = admission(t).mutate(review(pod))
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    assert "not converted" in answer["response"]["warnings"][0] and t.created == []
    refused = admission(t).validate(review(pod))["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 400
    assert refused["status"]["message"].startswith("pod team-a/train-*: container 'main': nvidia.com/gpucores=101")


def test_mutate_refuses_the_pod_when_its_template_cannot_be_made() -> None:
    answer = admission(RecordingTemplates(fail="HTTP 403 Forbidden")).mutate(review(gpu_pod()))
    assert answer["response"]["allowed"] is False and "HTTP 403 Forbidden" in answer["response"]["status"]["message"]


def test_mutate_passes_everything_else_through() -> None:
    a = admission(RecordingTemplates())
    plain = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}
    for r in (review(plain), review(gpu_pod(), operation="UPDATE"), review({}, kind="ConfigMap")):
        resp = a.mutate(r)["response"]
        assert resp == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("body", [{}, {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "x"}},
                                  {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}])
def test_bad_reviews_are_errors(body: dict[str, Any]) -> None:
    with pytest.raises(BadReview):
        admission().mutate(body)


# --- /validate ---------------------------------------------------------------------------------


def test_validate_refuses_a_pod_nobody_converted() -> None:
    resp = admission().validate(review(gpu_pod()))["response"]
    assert resp["allowed"] is False and "the mutating webhook did not convert it" in resp["status"]["message"]
    assert admission().validate(review(gpu_pod(), operation="UPDATE"))["response"]["allowed"] is True


def claim(exactly: dict[str, Any] | None = None, config: list[dict[str, Any]] | None = None,
          first: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {"name": "gpu"}
    if exactly:
        req["exactly"] = exactly
    if first:
        req["firstAvailable"] = first
    devices: dict[str, Any] = {"requests": [req]}
    if config:
        devices["config"] = config
    return {"metadata": {"name": "c"}, "spec": {"devices": devices}}


def example_config(**params: Any) -> list[dict[str, Any]]:
    return [{"opaque": {"driver": "gpu.example.com",
                        "parameters": {"apiVersion": "gpu.example.com/v1alpha1", "kind": "ExampleConfig", **params}}}]


CLAIMS = [
    (claim({"deviceClassName": GPU, "capacity": {"requests": {"cores": "101"}}}), "capacity cores=101 is more than"),
    (claim({"deviceClassName": GPU, "capacity": {"requests": {f"{GPU}/cores": "200"}}}), f"capacity {GPU}/cores=200"),
    (claim({"deviceClassName": GPU, "capacity": {"requests": {"memory": "81Gi"}}}),
     "capacity memory=81Gi is more than any published hami-core-gpu.project-hami.io device has (largest: 80Gi)"),
    (claim(first=[{"name": "big", "deviceClassName": GPU, "capacity": {"requests": {"cores": "150"}}}]),
     "request 'gpu/big': capacity cores=150"),
    (claim({"deviceClassName": "gpu.example.com"}, example_config(mode="shared", colour="red")),
     "config[0] for driver gpu.example.com: field 'colour': unknown field"),
    (claim({"deviceClassName": "gpu.example.com"}, example_config(mode=3)), "field 'mode'"),
    (claim({"deviceClassName": "gpu.example.com"}, example_config(mode="bogus")),  # the config's own validate()
     "config[0] for driver gpu.example.com: invalid: mode must be 'shared' or 'exclusive', not 'bogus'"),
    (claim({"deviceClassName": "gpu.example.com"}, [{"opaque": {"driver": "gpu.example.com", "parameters": [1]}}]),
     "parameters must be a JSON object"),
]


@pytest.mark.parametrize(("obj", "message"), CLAIMS, ids=[m for _, m in CLAIMS])
def test_claims_that_could_never_be_prepared(obj: dict[str, Any], message: str) -> None:
    problems = checks.check_claim(obj, "ResourceClaim", MAPPING, DRIVERS, SIZES)
    assert any(message in p for p in problems), problems
    template = {"metadata": {"name": "t"}, "spec": {"spec": obj["spec"]}}
    assert checks.check_claim(template, "ResourceClaimTemplate", MAPPING, DRIVERS, SIZES) == problems
    resp = admission().validate(review(obj, kind="ResourceClaim", group="resource.k8s.io"))["response"]
    assert resp["allowed"] is False and message in resp["status"]["message"]


def test_claims_within_limits_and_configs_for_other_drivers_pass() -> None:
    ok = [
        claim({"deviceClassName": GPU, "capacity": {"requests": {"cores": "100", "memory": "80Gi"}}}),
        claim({"deviceClassName": "gpu.example.com"}, example_config(mode="shared")),
        claim({"deviceClassName": "other"}, [{"opaque": {"driver": "other.io", "parameters": {"anything": 1}}}]),
        claim({"deviceClassName": "other", "capacity": {"requests": {"cores": "500"}}}),  # not a mapped class
    ]
    for obj in ok:
        assert checks.check_claim(obj, "ResourceClaim", MAPPING, DRIVERS, SIZES) == []


def test_installed_driver_classes_come_from_entry_points_uninstantiated() -> None:
    assert registry.driver_classes()["gpu.example.com"] is ExampleDriver


# --- configurations ----------------------------------------------------------------------------


def test_configurations_declare_side_effects_scope_and_policy() -> None:
    mutating, validating = registration.configurations(MAPPING, "Q0E=", url="https://127.0.0.1:9443", namespace="gpu-system",
                                                       failure_policy="Ignore", drivers=["gpu.example.com"])
    hooks = mutating["webhooks"] + validating["webhooks"]
    assert [h["name"] for h in hooks] == ["pods.dra-webhook.dra.project-hami.io"] * 2 + [
        "claims.dra-webhook.dra.project-hami.io", "claimtemplates.dra-webhook.dra.project-hami.io"]
    for h in hooks:
        assert h["sideEffects"] == "NoneOnDryRun" and h["failurePolicy"] == "Ignore"
        assert h["admissionReviewVersions"] == ["v1"] and h["rules"][0]["operations"] == ["CREATE"]
        assert h["clientConfig"]["caBundle"] == "Q0E=" and h["clientConfig"]["url"].startswith("https://127.0.0.1:9443/")
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gpu-system", "kube-system"]} in \
            h["namespaceSelector"]["matchExpressions"]
        assert {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]} in h["namespaceSelector"]["matchExpressions"]
    cond = mutating["webhooks"][0]["matchConditions"][0]["expression"]
    assert 'k.startsWith("nvidia.com/")' in cond and 'k.startsWith("huawei.com/Ascend")' in cond
    assert "initContainers" in cond
    claims_cond = validating["webhooks"][1]["matchConditions"][0]["expression"]
    assert f'"{GPU}"' in claims_cond and '"gpu.example.com"' in claims_cond
    svc, _ = registration.configurations(MAPPING, "Q0E=", service=("dra", "webhook", 443))
    assert svc["webhooks"][0]["clientConfig"]["service"] == {"namespace": "dra", "name": "webhook", "port": 443, "path": "/mutate"}
    with pytest.raises(ValueError):
        registration.configurations(MAPPING, "Q0E=", url="https://x", failure_policy="Maybe")


# --- the HTTPS server --------------------------------------------------------------------------


def pki(directory: Path, cn: str = "dra-webhook") -> tuple[Path, Path, Path]:
    ca, ca_key = new_ca(f"{cn}-ca")
    cert, key = new_serving_cert(ca, ca_key, cn, ["localhost"], ["127.0.0.1"])
    directory.mkdir(parents=True, exist_ok=True)
    write_pair(directory / "ca.crt", directory / "ca.key", ca, ca_key)
    write_pair(directory / "tls.crt", directory / "tls.key", cert, key)
    return directory / "ca.crt", directory / "tls.crt", directory / "tls.key"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WebhookServer, Path, dict[str, bool]]]:
    ca, cert, key = pki(tmp_path / "a")
    ready = {"ready": False}
    srv = WebhookServer(admission(RecordingTemplates()), cert, key, port=0, host="127.0.0.1", health_port=0,
                        ready=lambda: ready["ready"], reload_every=0.0)
    srv.start()
    yield srv, ca, ready
    srv.stop()


def post(port: int, ca: Path, path: str, body: bytes) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_server_answers_reviews_over_https(served: tuple[WebhookServer, Path, dict[str, bool]]) -> None:
    srv, ca, _ = served
    code, body = post(srv.port, ca, "/mutate", json.dumps(review(gpu_pod())).encode())
    assert code == 200 and json.loads(body)["response"]["patchType"] == "JSONPatch"
    code, body = post(srv.port, ca, "/validate", json.dumps(review(gpu_pod())).encode())
    assert code == 200 and json.loads(body)["response"]["allowed"] is False
    assert post(srv.port, ca, "/mutate", b"{not json")[0] == 400
    assert post(srv.port, ca, "/mutate", json.dumps({"kind": "Pod"}).encode())[0] == 400
    assert post(srv.port, ca, "/elsewhere", b"{}")[0] == 404


def test_health_port_says_ready_only_once_the_inventory_is(served: tuple[WebhookServer, Path, dict[str, bool]]) -> None:
    srv, _, ready = served

    def get(path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{srv.health_port}{path}", timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as e:
            return e.code

    assert get("/healthz") == 200 and get("/readyz") == 503
    ready["ready"] = True
    assert get("/readyz") == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.health_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert 'dra_webhook_admissions_total{endpoint="mutate",verdict="converted"} 0.0' in text


def test_metrics_count_verdicts_and_connections(served: tuple[WebhookServer, Path, dict[str, bool]]) -> None:
    srv, ca, _ = served
    for _ in range(2):
        post(srv.port, ca, "/mutate", json.dumps(review(gpu_pod())).encode())
    post(srv.port, ca, "/validate", json.dumps(review(gpu_pod())).encode())
    text = srv.metrics.render().decode()
    assert 'dra_webhook_admissions_total{endpoint="mutate",verdict="converted"} 2.0' in text
    assert 'dra_webhook_admissions_total{endpoint="validate",verdict="refused"} 1.0' in text
    assert "dra_webhook_connections_total 3.0" in text  # urllib opens one connection per request


def test_a_rotated_certificate_is_served_without_a_restart(tmp_path: Path,
                                                           served: tuple[WebhookServer, Path, dict[str, bool]]) -> None:
    srv, old_ca, _ = served
    new_ca_path, new_cert, new_key = pki(tmp_path / "b", "rotated")
    cert_path, key_path = srv.https.certificates.cert, srv.https.certificates.key  # type: ignore[union-attr]
    time.sleep(0.05)  # a different mtime
    cert_path.write_bytes(new_cert.read_bytes())
    key_path.write_bytes(new_key.read_bytes())
    body = json.dumps(review(gpu_pod())).encode()
    assert post(srv.port, new_ca_path, "/mutate", body)[0] == 200
    with pytest.raises(urllib.error.URLError):
        post(srv.port, old_ca, "/mutate", body)


# --- the CLI -----------------------------------------------------------------------------------


def test_manifests_prints_both_configurations_for_a_service(tmp_path: Path) -> None:
    import yaml
    from typer.testing import CliRunner

    from dra.webhook.cli import app

    ca, _, _ = pki(tmp_path)
    result = CliRunner().invoke(app, ["manifests", "--ca-bundle", str(ca), "--service", "dra-system/dra-webhook:443"])
    assert result.exit_code == 0, result.output
    mutating, validating = yaml.safe_load_all(result.output)
    assert mutating["kind"] == "MutatingWebhookConfiguration" and validating["kind"] == "ValidatingWebhookConfiguration"
    svc = mutating["webhooks"][0]["clientConfig"]["service"]
    assert svc == {"namespace": "dra-system", "name": "dra-webhook", "port": 443, "path": "/mutate"}
    assert base64.b64decode(mutating["webhooks"][0]["clientConfig"]["caBundle"]) == ca.read_bytes()
    bad = CliRunner().invoke(app, ["manifests", "--ca-bundle", str(ca), "--service", "nonsense"])
    assert bad.exit_code != 0 and "NAMESPACE/NAME:PORT" in str(bad.exception)


def test_a_missing_or_broken_mapping_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(vendors.VendorConfigError, match="cannot read the vendor mapping"):
        vendors.load(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("vendors: [\n")
    with pytest.raises(vendors.VendorConfigError, match="is not valid YAML"):
        vendors.load(tmp_path / "bad.yaml")


def test_the_shape_limit_is_one_number_in_the_code_the_cli_and_the_chart() -> None:
    """review 2026-12-04 #12: `dra webhook run --max-shapes-per-pod` defaults to
    `translate.MAX_SHAPES_PER_POD`, as does the chart's webhook.maxShapesPerPod; 0 is refused."""
    import inspect

    import yaml
    from typer.testing import CliRunner

    from dra.webhook import cli, translate
    from dra.webhook.cli import app

    option = inspect.signature(cli.run).parameters["max_shapes_per_pod"]
    assert option.default == translate.MAX_SHAPES_PER_POD
    chart = yaml.safe_load((Path(__file__).resolve().parents[2] / "helm/dra-webhook/values.yaml").read_text())
    assert chart["webhook"]["maxShapesPerPod"] == translate.MAX_SHAPES_PER_POD
    bad = CliRunner().invoke(app, ["run", "--cert", "c", "--key", "k", "--max-shapes-per-pod", "0"])
    assert bad.exit_code == 2 and "max-shapes-per-pod" in bad.output
    with pytest.raises(ValueError, match="at least 1"):
        Admission(MAPPING, max_shapes_per_pod=0)
