"""AdmissionReview v1 in, AdmissionReview v1 out: the two endpoints' logic, no HTTP.

`/mutate` (Pods, CREATE): a pod whose vendor limits are all possible gets the JSON patch of
`translate.pod_patch`, after the templates it references exist (none are created on dry-run:
the webhook declares ``sideEffects: NoneOnDryRun``). A pod with an impossible request is left
as it came, with a warning, so that `/validate` refuses it with the full reasons.

`/validate` (Pods on CREATE; ResourceClaims and ResourceClaimTemplates, CREATE and UPDATE): refuses a pod
that still carries vendor resources (impossible ones, or ones nobody converted) and a claim or
template that can never be prepared (`checks.check_claim`), each with what to change.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Collection, Mapping
from typing import Any

from dra._runtime import registry
from dra.webhook import checks, translate
from dra.webhook.classes import ClassConfigs, NoClasses
from dra.webhook.events import Notifier
from dra.webhook.quota import NoQuotas, Quotas
from dra.webhook.quota import warnings as quota_warnings
from dra.webhook.templates import TemplateError, TemplateStore
from dra.webhook.translate import Inventory, NoInventory, Share
from dra.webhook.vendors import VendorMapping

log = logging.getLogger(__name__)
MAX_WARNING = 256  # the API server truncates longer admission warnings


class BadReview(ValueError):
    """The request body is not an AdmissionReview v1 the webhook can answer."""


def _response(uid: str, allowed: bool, message: str = "", patch: list[dict[str, Any]] | None = None,
              warnings: list[str] | None = None) -> dict[str, Any]:
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        resp["status"] = {"code": 400, "reason": "BadRequest", "message": message}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        resp["warnings"] = [w if len(w) <= MAX_WARNING else w[: MAX_WARNING - 3] + "..." for w in warnings]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}


def _request(review: Any) -> Mapping[str, Any]:
    if not isinstance(review, Mapping) or review.get("kind") != "AdmissionReview":
        raise BadReview("the body is not an AdmissionReview")
    if review.get("apiVersion") != "admission.k8s.io/v1":
        raise BadReview(f"AdmissionReview {review.get('apiVersion')} is not served; register the webhook with "
                        f"admissionReviewVersions: [v1]")
    req = review.get("request")
    if not isinstance(req, Mapping) or not req.get("uid"):
        raise BadReview("the AdmissionReview has no request.uid")
    return req


def _pod_name(req: Mapping[str, Any], obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or req.get("name") or (meta.get("generateName", "") + "*"))


def _joined(problems: list[str]) -> str:
    return "; ".join(problems)


class Admission:
    """Both endpoints over one vendor mapping, device inventory and template store."""

    def __init__(self, mapping: VendorMapping, inventory: Inventory | None = None,
                 templates: TemplateStore | None = None, drivers: Mapping[str, type] | None = None,
                 classes: ClassConfigs | None = None, allow_claim_loosening: bool = False,
                 protected_namespaces: Collection[str] = ("kube-system",),
                 max_shapes_per_pod: int = translate.MAX_SHAPES_PER_POD, events: Notifier | None = None,
                 quotas: Quotas | None = None) -> None:
        """`classes`: DeviceClasses' configs, the baseline of a claim's (`dra._runtime.loosening`);
        `allow_claim_loosening`: the admin's word that claims may loosen their enforcement (the
        node daemons' setting of the same name); `protected_namespaces`: never written to (the
        webhook's own namespace belongs there too); `max_shapes_per_pod`: the most templates one
        admission may create (`translate.MAX_SHAPES_PER_POD`); `events`: where a converted pod's
        warnings go besides the answer (Events on its owner, `dra.webhook.events`)."""
        if max_shapes_per_pod < 1:
            raise ValueError(f"max_shapes_per_pod must be at least 1, not {max_shapes_per_pod}")
        self.mapping = mapping
        self.inventory = inventory or NoInventory()
        self.templates = templates
        self.drivers = dict(drivers) if drivers is not None else registry.driver_classes()
        self.classes = classes or NoClasses()
        self.allow_claim_loosening = allow_claim_loosening
        self.protected_namespaces = frozenset(protected_namespaces)
        self.max_shapes_per_pod = max_shapes_per_pod
        self.events = events
        self.quotas = quotas or NoQuotas()

    # --- /mutate ------------------------------------------------------------------------------
    def mutate(self, review: Any) -> dict[str, Any]:
        req = _request(review)
        uid = str(req["uid"])
        obj = req.get("object") or {}
        if (req.get("kind") or {}).get("kind") != "Pod" or req.get("operation") != "CREATE":
            return _response(uid, True)
        plan = translate.plan_pod(obj, self.mapping, self.inventory, self.classes.exists)
        if not plan.touches_pod:
            return _response(uid, True)
        pod = _pod_name(req, obj)
        namespace = str(req.get("namespace") or "")
        own = str((obj.get("metadata") or {}).get("namespace") or namespace)
        if not namespace or own != namespace or namespace in self.protected_namespaces:
            # Templates go only where the pod being admitted lives: a review naming another
            # namespace (or none) is not one the API server sends for a pod.
            log.warning("review refused: namespace mismatch", extra={"namespace": namespace, "object_namespace": own,
                                                                     "pod": pod})
            return _response(uid, False, f"pod {own}/{pod}: the AdmissionReview's request.namespace {namespace!r} is"
                                         f" not the pod's namespace {own!r} (or is one the webhook never writes"
                                         f" to: {', '.join(sorted(self.protected_namespaces))}); nothing was created")
        shapes = len(plan.shapes())
        if shapes > self.max_shapes_per_pod:
            log.warning("pod refused: too many shapes", extra={"namespace": namespace, "pod": pod, "shapes": shapes,
                                                               "limit": self.max_shapes_per_pod})
            return _response(uid, False, (
                f"pod {namespace}/{pod}: its containers and init containers ask for {shapes} distinct device requests,"
                f" and each becomes a ResourceClaimTemplate; the webhook creates at most {self.max_shapes_per_pod} per"
                f" pod (dra webhook run --max-shapes-per-pod, chart value webhook.maxShapesPerPod): give containers"
                f" the same requests or split the pod; nothing was created"))
        if plan.problems:
            log.info("pod not converted: impossible request", extra={"namespace": namespace, "pod": pod, "problems": plan.problems})
            return _response(uid, True, warnings=["not converted to DRA claims: the request is impossible (the "
                                                  "validating webhook says why)"])
        dry_run = bool(req.get("dryRun"))
        names: dict[Share, str] = {}
        bodies: list[dict[str, Any]] = []
        for cs in plan.shares:
            if cs.share in names or cs.uses is not None:
                continue
            body = translate.template_object(cs.share, namespace, self.inventory)
            names[cs.share] = body["metadata"]["name"]
            bodies.append(body)
        # The validating webhook judges each template as it is created; judged here first, a pod
        # whose template it would refuse (a config the installed driver does not take) is refused
        # before anything is created, naming why.
        problems = [p for body in bodies for p in checks.check_claim(
            body, "ResourceClaimTemplate", self.mapping, self.drivers, self.inventory, self.classes,
            self.allow_claim_loosening)]
        if problems:
            log.info("pod refused: its templates would be", extra={"namespace": namespace, "pod": pod, "problems": problems})
            return _response(uid, False, f"pod {namespace}/{pod}: the claim it becomes would be refused: {_joined(problems)}")
        for body in bodies:
            if dry_run or self.templates is None:
                continue
            try:
                self.templates.ensure(body)
            except TemplateError as e:
                log.warning("template not created; pod refused", extra={"namespace": namespace, "pod": pod, "error": str(e)})
                return _response(uid, False, f"pod {namespace}/{pod}: {e}")
        patch = translate.pod_patch(obj, plan, {cs.share: names[cs.share] for cs in plan.shares if cs.uses is None})
        log.info("pod converted", extra={"namespace": namespace, "pod": pod, "dry_run": dry_run,
                                         "templates": sorted(set(names.values())),
                                         "containers": [f"{c.container}:{c.share.vendor.name}" for c in plan.shares]})
        warnings = list(plan.warnings)
        warnings += quota_warnings(plan, self.quotas.hard(namespace), [v.resources.count for v in self.mapping.vendors])
        if warnings and self.events is not None and not dry_run:
            self.events.notify(namespace, obj.get("metadata") or {}, warnings)
        return _response(uid, True, patch=patch, warnings=warnings)

    # --- /validate ----------------------------------------------------------------------------
    def validate(self, review: Any) -> dict[str, Any]:
        req = _request(review)
        uid = str(req["uid"])
        if req.get("operation") not in ("CREATE", "UPDATE"):
            return _response(uid, True)
        kind = (req.get("kind") or {}).get("kind")
        obj = req.get("object") or {}
        namespace = str(req.get("namespace") or "")
        if kind == "Pod":
            if req.get("operation") != "CREATE":
                return _response(uid, True)  # a stored pod's later updates are not ours to judge
            plan = translate.plan_pod(obj, self.mapping, self.inventory, self.classes.exists)
            pod = _pod_name(req, obj)
            if plan.problems:
                log.info("pod refused", extra={"namespace": namespace, "pod": pod, "problems": plan.problems})
                return _response(uid, False, f"pod {namespace}/{pod}: {_joined(plan.problems)}")
            if plan.touches_pod:
                left = sorted({r for rs in plan.stripped.values() for r in rs})
                return _response(uid, False, (
                    f"pod {namespace}/{pod} still asks for {', '.join(left)}, which no node advertises under DRA: the "
                    f"mutating webhook did not convert it; check that its MutatingWebhookConfiguration is registered, "
                    f"or label the pod or namespace to opt out"))
            return _response(uid, True)
        if kind in ("ResourceClaim", "ResourceClaimTemplate"):
            problems = checks.check_claim(obj, kind, self.mapping, self.drivers, self.inventory, self.classes,
                                          self.allow_claim_loosening)
            if problems:
                name = (obj.get("metadata") or {}).get("name") or req.get("name") or "?"
                log.info("claim refused", extra={"namespace": namespace, "kind": kind, "object": name, "problems": problems})
                return _response(uid, False, f"{kind} {namespace}/{name}: {_joined(problems)}")
        return _response(uid, True)
