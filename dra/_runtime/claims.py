"""Typed, frozen views of the parts of a resource.k8s.io/v1 ResourceClaim the node side reads.

The views are built from the claim's wire form (camelCase JSON), which is what the API server
sends and what `kubernetes.client.ApiClient.sanitize_for_serialization` produces from the
official client's models, so both paths meet here. Quantities are converted with
`dra._runtime.client.quantity_to_int` (the client's parser).

`ClaimSource` is the one thing the prepare path needs from the API server: a claim by
namespace and name. `ApiClaimSource` implements it with `ResourceV1Api`; tests of logic may
implement it over the same API server or over recorded claims.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dra._runtime.client import ApiClient, get_json, quantity_to_int
from dra.driver import AllocatedDevice, Keyed, main_request

HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The well-known node label kubelet sets to the node's hostname."""

NODE_NAME_FIELD = "metadata.name"
"""The only node field a NodeSelector's matchFields may name."""


@dataclasses.dataclass(frozen=True)
class DeviceResult(Keyed):
    """One `status.allocation.devices.results[]` entry."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None = None
    consumed_capacity: Mapping[str, int] = dataclasses.field(default_factory=dict)
    admin_access: bool = False

    @property
    def main_request(self) -> str:
        """The request name kubelet matches containers by: ``main`` for a subrequest ``main/sub``."""
        return main_request(self.request)

    def allocated(self, config: Any = None) -> AllocatedDevice:
        """The driver's view of this result, with its decoded opaque `config`."""
        return AllocatedDevice.of(self, config)


@dataclasses.dataclass(frozen=True)
class OpaqueConfig:
    """One `status.allocation.devices.config[]` entry that carries opaque parameters."""

    source: str  # "FromClass" or "FromClaim"
    requests: tuple[str, ...]
    driver: str
    parameters: Any  # the decoded JSON of the RawExtension
    index: int = 0  # position in the allocation's config list, for error messages

    def applies_to(self, request: str) -> bool:
        """Empty `requests` means all; ``main`` also covers its subrequests ``main/sub``."""
        if not self.requests:
            return True
        return request in self.requests or main_request(request) in self.requests


@dataclasses.dataclass(frozen=True)
class SelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class SelectorTerm:
    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()


@dataclasses.dataclass(frozen=True)
class NodeSelector:
    """A core/v1 NodeSelector: terms are ORed, the requirements of one term are ANDed."""

    terms: tuple[SelectorTerm, ...]

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        return any(_term_matches(t, node_name, labels) for t in self.terms)

    def describe(self) -> str:
        parts = []
        for t in self.terms:
            reqs = [f"field {r.key} {r.operator} {list(r.values)}" for r in t.match_fields]
            reqs += [f"label {r.key} {r.operator} {list(r.values)}" for r in t.match_expressions]
            parts.append(" and ".join(reqs) or "(empty term)")
        return " or ".join(f"({p})" for p in parts) or "(no terms)"


def _requirement_matches(req: SelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: SelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    # Upstream: a term with no requirements matches nothing; only metadata.name is a valid field,
    # and only In/NotIn apply to it.
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_fields:
        if req.key != NODE_NAME_FIELD or req.operator not in ("In", "NotIn"):
            return False
        if not _requirement_matches(req, node_name):
            return False
    return all(_requirement_matches(req, labels.get(req.key)) for req in term.match_expressions)


@dataclasses.dataclass(frozen=True)
class Allocation:
    """`status.allocation`: results, opaque config, and where the allocation is usable."""

    results: tuple[DeviceResult, ...]
    config: tuple[OpaqueConfig, ...] = ()
    node_selector: NodeSelector | None = None  # None: usable on every node


@dataclasses.dataclass(frozen=True)
class ConsumerRef:
    """A `status.reservedFor[]` entry."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclasses.dataclass(frozen=True)
class ResourceClaim:
    """The node-relevant view of a resource.k8s.io/v1 ResourceClaim."""

    uid: str
    namespace: str
    name: str
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> ResourceClaim:
        """Build from the wire form (camelCase JSON as served by the API server)."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        alloc = status.get("allocation")
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            allocation=_allocation(alloc) if alloc else None,
            reserved_for=tuple(
                ConsumerRef(
                    resource=str(r.get("resource", "")),
                    name=str(r.get("name", "")),
                    uid=str(r.get("uid", "")),
                    api_group=str(r.get("apiGroup", "")),
                )
                for r in status.get("reservedFor") or ()
            ),
            deleting=bool(meta.get("deletionTimestamp")),
        )

    @classmethod
    def from_model(cls, model: Any) -> ResourceClaim:
        """Build from a `kubernetes.client.V1ResourceClaim`."""
        return cls.from_dict(ApiClient().sanitize_for_serialization(model))


def _allocation(alloc: Mapping[str, Any]) -> Allocation:
    devices = alloc.get("devices") or {}
    results = tuple(
        DeviceResult(
            request=str(r.get("request", "")),
            driver=str(r.get("driver", "")),
            pool=str(r.get("pool", "")),
            device=str(r.get("device", "")),
            share_id=r.get("shareID") or None,
            consumed_capacity={k: quantity_to_int(v) for k, v in (r.get("consumedCapacity") or {}).items()},
            admin_access=bool(r.get("adminAccess")),
        )
        for r in devices.get("results") or ()
    )
    config = tuple(
        OpaqueConfig(
            source=str(c.get("source", "")),
            requests=tuple(c.get("requests") or ()),
            driver=str(c["opaque"].get("driver", "")),
            parameters=c["opaque"].get("parameters"),
            index=i,
        )
        for i, c in enumerate(devices.get("config") or ())
        if c.get("opaque")
    )
    sel = alloc.get("nodeSelector")
    return Allocation(results=results, config=config, node_selector=_node_selector(sel) if sel else None)


def _requirements(items: Any) -> tuple[SelectorRequirement, ...]:
    return tuple(
        SelectorRequirement(key=str(r.get("key", "")), operator=str(r.get("operator", "")),
                            values=tuple(str(v) for v in r.get("values") or ()))
        for r in items or ()
    )


def _node_selector(sel: Mapping[str, Any]) -> NodeSelector:
    return NodeSelector(terms=tuple(
        SelectorTerm(match_expressions=_requirements(t.get("matchExpressions")),
                     match_fields=_requirements(t.get("matchFields")))
        for t in sel.get("nodeSelectorTerms") or ()
    ))


class ClaimSource(Protocol):
    """Where the prepare path gets claims from; thread-safe."""

    def get_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        """The claim, or None when it does not exist; other failures raise."""
        ...


class ApiClaimSource:
    """`ClaimSource` over the API server.

    The body is read as JSON without building the client's model objects: same data, a
    fraction of the CPU per GET, which matters for prepare latency under concurrency.
    """

    PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        self._api = api_client
        self._timeout = timeout_s

    def get_claim(self, namespace: str, name: str) -> ResourceClaim | None:
        doc = get_json(self._api, self.PATH, {"namespace": namespace, "name": name}, self._timeout)
        return None if doc is None else ResourceClaim.from_dict(doc)


def node_labels_reader(api_client: Any, node_name: str, timeout_s: float = 10.0) -> Callable[[], dict[str, str]]:
    """A function that reads the labels of Node `node_name` (for `ClaimPreparer(node_labels=...)`;
    needs RBAC ``get`` on ``nodes``)."""

    def read() -> dict[str, str]:
        doc = get_json(api_client, "/api/v1/nodes/{name}", {"name": node_name}, timeout_s)
        if doc is None:
            raise LookupError(f"Node {node_name} does not exist")
        labels = doc.get("metadata", {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    return read
