"""The Mutating- and ValidatingWebhookConfiguration objects for the webhook (pure builders).

Who is called, and what happens when the webhook is down:
- Namespaces: every one except ``kube-system``, the webhook's own and those labelled with the
  opt-out label (HAMi's ``hami.io/webhook=ignore`` by default); pods with that label are skipped
  too (objectSelector).
- Pods are sent only when a container or init container names a vendor resource
  (`matchConditions` built from the vendor mapping). So with ``failurePolicy: Fail`` a pod
  with HAMi limits is refused while the webhook is down (it could not run: no node advertises
  those resources), and every other pod is admitted as if the webhook did not exist.
  ``Ignore`` stores such pods unconverted instead.
- ResourceClaims and ResourceClaimTemplates are sent on CREATE only (their spec is immutable;
  status and finalizer updates never wait on the webhook, so claims are always released), and
  only when they name a mapped DeviceClass or carry opaque config for an installed driver.
  While the webhook is down under ``Fail``, such new claims wait (the resourceclaim controller
  retries) and every other claim is unaffected.
- ``sideEffects: NoneOnDryRun``: the mutating endpoint creates ResourceClaimTemplates, never
  on a dry-run request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dra.webhook.selectors import cel_string
from dra.webhook.vendors import VendorMapping

NAME = "dra-webhook"
LABEL = {"app.kubernetes.io/managed-by": "dra-webhook"}
DEFAULT_OPT_OUT = ("hami.io/webhook", "ignore")
TIMEOUT_S = 10


def _any_of(values: Iterable[str], fmt: str) -> str:
    return " || ".join(fmt.format(cel_string(v)) for v in values) or "false"


def pod_condition(mapping: VendorMapping) -> str:
    """CEL, true when a container or init container names a resource the mapping covers."""
    key = _any_of(mapping.prefixes, "k.startsWith({})")
    exact = [r for r in mapping.all_resources() if not any(r.startswith(p) for p in mapping.prefixes)]
    if exact:
        key += " || k in [" + ", ".join(cel_string(r) for r in exact) + "]"
    per_container = (f"has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, {key})) || "
                     f"(has(c.resources.requests) && c.resources.requests.exists(k, {key})))")
    return (f"object.spec.containers.exists(c, {per_container}) || "
            f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {per_container}))")


def claim_condition(mapping: VendorMapping, drivers: Sequence[str], template: bool) -> str:
    """CEL, true when a claim (or template) names a mapped DeviceClass or configures an installed driver."""
    spec = "object.spec.spec" if template else "object.spec"
    classes = "[" + ", ".join(cel_string(c) for c in mapping.device_classes) + "]"
    names = "[" + ", ".join(cel_string(d) for d in sorted(drivers)) + "]"
    devices = f"{spec}.devices"
    has_spec = "has(object.spec.spec) && " if template else ""
    requests = (f"(has({devices}.requests) && {devices}.requests.exists(r, "
                f"(has(r.exactly) && r.exactly.deviceClassName in {classes}) || "
                f"(has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName in {classes}))))")
    configs = f"(has({devices}.config) && {devices}.config.exists(x, has(x.opaque) && x.opaque.driver in {names}))"
    return f"{has_spec}has({devices}) && ({requests} || {configs})"


def _client_config(url: str | None, service: tuple[str, str, int] | None, path: str, ca_bundle: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {"caBundle": ca_bundle}
    if service is not None:
        ns, name, port = service
        cfg["service"] = {"namespace": ns, "name": name, "port": port, "path": path}
    else:
        cfg["url"] = (url or "").rstrip("/") + path
    return cfg


def configurations(mapping: VendorMapping, ca_bundle: str, *, url: str | None = None,
                   service: tuple[str, str, int] | None = None, namespace: str = "dra-system",
                   failure_policy: str = "Fail", opt_out: tuple[str, str] = DEFAULT_OPT_OUT,
                   drivers: Sequence[str] = (), name: str = NAME) -> tuple[dict[str, Any], dict[str, Any]]:
    """(MutatingWebhookConfiguration, ValidatingWebhookConfiguration) as API objects.

    `ca_bundle` is the base64 PEM of the CA that signed the serving certificate; the webhook is
    reached at `url` (``https://host:port``) or through `service` (namespace, name, port).
    """
    if failure_policy not in ("Fail", "Ignore"):
        raise ValueError(f"failure policy must be Fail or Ignore, not {failure_policy!r}")
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url and service")
    opt_key, opt_value = opt_out
    namespaces = {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": sorted({"kube-system", namespace})},
        {"key": opt_key, "operator": "NotIn", "values": [opt_value]},
    ]}
    objects = {"matchExpressions": [{"key": opt_key, "operator": "NotIn", "values": [opt_value]}]}

    def hook(hook_name: str, path: str, resources: list[str], group: str, condition: str) -> dict[str, Any]:
        return {
            "name": f"{hook_name}.{name}.dra.project-hami.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": _client_config(url, service, path, ca_bundle),
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": resources, "scope": "Namespaced"}],
            "matchPolicy": "Equivalent",
            "failurePolicy": failure_policy,
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": TIMEOUT_S,
            "namespaceSelector": namespaces,
            "objectSelector": objects,
            "matchConditions": [{"name": "names-a-vendor-resource", "expression": condition}],
        }

    meta = {"name": name, "labels": dict(LABEL)}
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
        "webhooks": [{**hook("pods", "/mutate", ["pods"], "", pod_condition(mapping)), "reinvocationPolicy": "Never"}],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": meta,
        "webhooks": [
            hook("pods", "/validate", ["pods"], "", pod_condition(mapping)),
            hook("claims", "/validate", ["resourceclaims"], "resource.k8s.io", claim_condition(mapping, drivers, False)),
            hook("claimtemplates", "/validate", ["resourceclaimtemplates"], "resource.k8s.io",
                 claim_condition(mapping, drivers, True)),
        ],
    }
    return mutating, validating
