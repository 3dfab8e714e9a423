"""The DRA node service, v1 and v1beta1, as thin adapters over one version-free `ClaimHandler`.

Both adapters translate wire `Claim`s to `ClaimRef`s, call the handler and translate its
`ClaimOutcome`s back. Wire-level rules live here, not in the handler:
- an empty NodePrepareResources request is a probe (liveness checks send one): it is answered
  with an empty map and the handler is not called;
- every requested claim UID gets an entry in both responses; a UID the handler left out gets an
  error entry (kubelet then retries) rather than a silent success;
- a handler exception fails each claim of the call with a per-claim error (logged with its
  traceback) instead of failing the RPC;
- request names are reduced to main request names (``main/sub`` -> ``main``), as kubelet
  matches them against the container's ``resources.claims[].request``;
- ``share_id`` is set in v1 only (the v1beta1 `Device` has no such field).
"""

from __future__ import annotations

import logging
import time
import types
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from dra._runtime.kubelet._proto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from dra._runtime.kubelet.handler import ClaimHandler, ClaimOutcome, PreparedResult
from dra.driver import ClaimRef, main_request

log = logging.getLogger(__name__)


def main_request_names(names: Sequence[str]) -> list[str]:
    """``["gpu/small", "gpu/big", "nic"]`` -> ``["gpu", "nic"]`` (order kept, no duplicates)."""
    out: list[str] = []
    for name in names:
        main = main_request(name)
        if main not in out:
            out.append(main)
    return out


class _NodeService:
    """Version-independent body of both servicers; `pb` is the version's message module."""

    def __init__(self, handler: ClaimHandler, pb: types.ModuleType, version: str) -> None:
        self.handler = handler
        self.pb = pb
        self.version = version

    def _claims(self, wire: Sequence[Any]) -> list[ClaimRef]:
        return [ClaimRef(uid=c.uid, namespace=c.namespace, name=c.name) for c in wire]

    def _device(self, d: PreparedResult) -> Any:
        msg = self.pb.Device(
            request_names=main_request_names(d.request_names),
            pool_name=d.pool,
            device_name=d.device,
            cdi_device_ids=list(d.cdi_device_ids),
        )
        if d.share_id and self.version == "v1":
            msg.share_id = d.share_id
        return msg

    def prepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self.pb.NodePrepareResourcesResponse()
        if not request.claims:
            log.debug("NodePrepareResources probe", extra={"api": self.version})
            return response
        claims = self._claims(request.claims)
        call = _Call("NodePrepareResources", self.version, claims)
        try:
            outcomes: Mapping[str, ClaimOutcome] = self.handler.prepare_claims(claims)
        except Exception as exc:
            log.exception("prepare handler failed", extra=call.fields())
            outcomes = {c.uid: ClaimOutcome(error=f"prepare failed: {exc}") for c in claims}
        for claim in claims:
            outcome = outcomes.get(claim.uid)
            entry = response.claims[claim.uid]
            if outcome is None:
                entry.error = f"internal error: the driver returned no result for claim {claim.uid}"
                log.error("prepare handler left a claim out", extra={**call.fields(), "claim": claim.uid})
            elif outcome.error:
                entry.error = outcome.error
            else:
                entry.devices.extend(self._device(d) for d in outcome.devices)
        call.done({uid: r.error for uid, r in response.claims.items()})
        return response

    def unprepare(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = self.pb.NodeUnprepareResourcesResponse()
        if not request.claims:
            return response
        claims = self._claims(request.claims)
        call = _Call("NodeUnprepareResources", self.version, claims)
        try:
            errors: Mapping[str, str] = self.handler.unprepare_claims(claims)
        except Exception as exc:
            log.exception("unprepare handler failed", extra=call.fields())
            errors = {c.uid: f"unprepare failed: {exc}" for c in claims}
        for claim in claims:
            err = errors.get(claim.uid)
            if err is None:
                err = f"internal error: the driver returned no result for claim {claim.uid}"
                log.error("unprepare handler left a claim out", extra={**call.fields(), "claim": claim.uid})
            response.claims[claim.uid].error = err
        call.done({uid: r.error for uid, r in response.claims.items()})
        return response


class _Call:
    """Per-call request ID, timing and one summary log line."""

    def __init__(self, method: str, version: str, claims: Sequence[ClaimRef]) -> None:
        self.method = method
        self.version = version
        self.claims = claims
        self.request_id = uuid.uuid4().hex[:12]
        self.start = time.monotonic()

    def fields(self) -> dict[str, Any]:
        return {
            "rpc": self.method,
            "api": self.version,
            "request_id": self.request_id,
            "claims": [f"{c.namespace}/{c.name}:{c.uid}" for c in self.claims],
        }

    def done(self, errors: Mapping[str, str]) -> None:
        failed = {uid: e for uid, e in errors.items() if e}
        if not log.isEnabledFor(logging.WARNING if failed else logging.INFO):
            return  # the common case at --log-level warning: build no fields for a line nobody wants
        extra = {**self.fields(), "duration_ms": round((time.monotonic() - self.start) * 1000, 1)}
        if failed:
            log.warning(f"{self.method} done with errors", extra={**extra, "errors": failed})
        else:
            log.info(f"{self.method} done", extra=extra)


class NodeV1Servicer(dra_v1_pb2_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` over a ClaimHandler."""

    def __init__(self, handler: ClaimHandler) -> None:
        self._svc = _NodeService(handler, dra_v1_pb2, "v1")

    def NodePrepareResources(
        self, request: dra_v1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        resp: dra_v1_pb2.NodePrepareResourcesResponse = self._svc.prepare(request, context)
        return resp

    def NodeUnprepareResources(
        self, request: dra_v1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        resp: dra_v1_pb2.NodeUnprepareResourcesResponse = self._svc.unprepare(request, context)
        return resp


class NodeV1beta1Servicer(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`` over the same ClaimHandler (no share_id)."""

    def __init__(self, handler: ClaimHandler) -> None:
        self._svc = _NodeService(handler, dra_v1beta1_pb2, "v1beta1")

    def NodePrepareResources(
        self, request: dra_v1beta1_pb2.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        resp: dra_v1beta1_pb2.NodePrepareResourcesResponse = self._svc.prepare(request, context)
        return resp

    def NodeUnprepareResources(
        self, request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        resp: dra_v1beta1_pb2.NodeUnprepareResourcesResponse = self._svc.unprepare(request, context)
        return resp
