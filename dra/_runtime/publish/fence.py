"""Whether the admission fence of kubernetes#133705 guards this driver's devices (1.34 only).

With the per-device layout (dra._runtime.publish.layout) a request of `count` > 1 makes kube-scheduler
1.34 panic. The charts install ValidatingAdmissionPolicies that refuse such requests, labelled
`FENCE_LABEL` and annotated with the driver's name. A daemon started without them (a hand-made
deployment, `dra run` on a test rig, a policy deleted) logs one warning, so the risk is visible
where the operator looks first; it publishes the sharing layout all the same, since without it
only a node's first device is shareable.
"""

from __future__ import annotations

import logging
from typing import Any

from dra._runtime.client import ApiException, get_json

log = logging.getLogger("dra._runtime.publish")

FENCE_LABEL = "dra.project-hami.io/fence"
FENCE_VALUE = "kubernetes-133705"
DRIVER_ANNOTATION = "dra.project-hami.io/driver"
_POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"


def fence_policies(api_client: Any, driver: str, timeout: float = 10.0) -> list[str]:
    """Names of the fence policies for `driver` (raises ApiException, e.g. 403 without RBAC)."""
    listing = get_json(api_client, _POLICIES, {}, timeout, [("labelSelector", f"{FENCE_LABEL}={FENCE_VALUE}")]) or {}
    items = listing.get("items") or []
    return sorted(
        p["metadata"]["name"] for p in items
        if ((p.get("metadata") or {}).get("annotations") or {}).get(DRIVER_ANNOTATION) == driver
    )


def warn_if_unfenced(api_client: Any, driver: str, version: tuple[int, int]) -> bool:
    """Log one warning when no fence policy for `driver` is found; True when one is."""
    why = (
        f"Kubernetes {version[0]}.{version[1]}: devices are published one per ResourceSlice so that"
        " kube-scheduler shares every device (kubernetes#133705), and a request for more than one"
        " device (count > 1, allocationMode: All) then crashes kube-scheduler"
    )
    try:
        found = fence_policies(api_client, driver)
    except ApiException as exc:
        log.warning(
            "%s; could not check for the admission fence that refuses such requests (HTTP %s listing"
            " ValidatingAdmissionPolicies); install the driver's chart, which renders it for Kubernetes < 1.35",
            why, exc.status, extra={"driver": driver},
        )
        return False
    except Exception as exc:  # an outage at start: say so, the daemon carries on
        log.warning("%s; could not check for the admission fence (%s)", why, exc, extra={"driver": driver})
        return False
    if found:
        log.info("admission fence of kubernetes#133705 found", extra={"driver": driver, "policies": found})
        return True
    log.warning(
        "%s; no ValidatingAdmissionPolicy labelled %s=%s for this driver refuses them: install the"
        " driver's chart (it renders the fence for Kubernetes < 1.35) or apply its fence policies",
        why, FENCE_LABEL, FENCE_VALUE, extra={"driver": driver},
    )
    return False
