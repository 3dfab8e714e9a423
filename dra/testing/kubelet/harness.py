"""`KubeletHarness`: the kubelet stand-in's DRA calls (prepare, unprepare, probe, health) on top
of its registration (`registration.Registrar`), checked as kubelet checks them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from dra._runtime.kubelet._proto import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
)
from dra.driver import ClaimRef
from dra.testing.kubelet.health import HealthWatch
from dra.testing.kubelet.registration import (
    DIAL_TIMEOUT_S,
    KUBELET_DRA_SERVICES,
    Instance,
    Registrar,
    service_name,
)
from dra.testing.kubelet.results import KubeletCallError, PreparedClaim, PreparedDevice

CALL_TIMEOUT_S = 45.0



class KubeletHarness(Registrar):
    """Plays kubelet for DRA plugins whose registration sockets appear in `registrar_dir`."""

    def __init__(
        self,
        registrar_dir: Path | str,
        *,
        services: Sequence[str] = KUBELET_DRA_SERVICES,
        force_service: str | None = None,
        call_timeout: float = CALL_TIMEOUT_S,
        dial_timeout: float = DIAL_TIMEOUT_S,
        retry_delay: float = 0.5,
    ) -> None:
        super().__init__(registrar_dir, services=services, force_service=force_service, dial_timeout=dial_timeout,
                         retry_delay=retry_delay)
        self.call_timeout = call_timeout

    def _pick(self, driver: str | None, endpoint: str | None) -> Instance:
        with self._lock:
            cands = [
                i
                for i in self._instances.values()
                if (driver is None or i.plugin.name == driver)
                and (endpoint is None or i.plugin.endpoint == str(endpoint))
            ]
        if not cands:
            raise KubeletCallError(f"no registered plugin for driver {driver or '(any)'} endpoint {endpoint}")
        if driver is None and len({i.plugin.name for i in cands}) > 1:
            raise KubeletCallError("several drivers registered; pass driver=")
        cands.sort(key=lambda i: i.plugin.registered_at, reverse=True)
        ready = [i for i in cands if i.state == grpc.ChannelConnectivity.READY]
        return (ready or cands)[0]

    def _node_stub(self, inst: Instance, version: str | None) -> tuple[Any, Any, str]:
        service = service_name(version) if version else inst.plugin.service
        if service == "v1.DRAPlugin":
            return dra_v1_pb2_grpc.DRAPluginStub(inst.channel), dra_v1_pb2, "v1"
        if service == "v1beta1.DRAPlugin":
            return dra_v1beta1_pb2_grpc.DRAPluginStub(inst.channel), dra_v1beta1_pb2, "v1beta1"
        raise ValueError(f"unknown DRA service {service!r}")

    def _node_call(
        self,
        method: str,
        claims: Iterable[ClaimRef],
        driver: str | None,
        version: str | None,
        endpoint: str | None,
        timeout: float | None,
    ) -> tuple[Any, str]:
        """One Node{Prepare,Unprepare}Resources call for `claims`, its answer checked to name exactly them."""
        stub, pb, api = self._node_stub(self._pick(driver, endpoint), version)
        claims = list(claims)
        request = getattr(pb, f"{method}Request")(
            claims=[pb.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]
        )
        resp = getattr(stub, method)(request, timeout=timeout or self.call_timeout)
        self._check(method, claims, resp.claims.keys())
        return resp, api

    def prepare(
        self,
        claims: Iterable[ClaimRef],
        *,
        driver: str | None = None,
        version: str | None = None,
        endpoint: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, PreparedClaim]:
        """NodePrepareResources; `version` "v1"/"v1beta1" overrides the registered service."""
        resp, api = self._node_call("NodePrepareResources", claims, driver, version, endpoint, timeout)
        out: dict[str, PreparedClaim] = {}
        for uid, r in resp.claims.items():
            devices = tuple(
                PreparedDevice(
                    request_names=tuple(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=tuple(d.cdi_device_ids),
                    share_id=d.share_id if api == "v1" and d.HasField("share_id") else None,
                )
                for d in r.devices
            )
            out[uid] = PreparedClaim(devices=devices, error=r.error)
        return out

    def unprepare(
        self,
        claims: Iterable[ClaimRef],
        *,
        driver: str | None = None,
        version: str | None = None,
        endpoint: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, str]:
        """NodeUnprepareResources: claim UID -> error ("" on success)."""
        resp, _ = self._node_call("NodeUnprepareResources", claims, driver, version, endpoint, timeout)
        return {uid: r.error for uid, r in resp.claims.items()}

    def probe(
        self, *, driver: str | None = None, version: str | None = None, endpoint: str | None = None
    ) -> dict[str, PreparedClaim]:
        """An empty NodePrepareResources request, as liveness probes send; returns the (empty) map."""
        inst = self._pick(driver, endpoint)
        stub, pb, _ = self._node_stub(inst, version)
        resp = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(), timeout=self.call_timeout)
        return {uid: PreparedClaim(devices=(), error=r.error) for uid, r in resp.claims.items()}

    @staticmethod
    def _check(method: str, claims: Sequence[ClaimRef], got: Iterable[str]) -> None:
        asked = {c.uid for c in claims}
        got = set(got)
        unexpected = got - asked
        if unexpected:
            raise KubeletCallError(f"{method} returned result for unknown claim UID(s) {sorted(unexpected)}")
        missing = asked - got
        if missing:
            raise KubeletCallError(f"{method} skipped {len(missing)} ResourceClaims: {sorted(missing)}")

    def watch_health(
        self, *, driver: str | None = None, version: str = "v1", endpoint: str | None = None
    ) -> HealthWatch:
        """Open NodeWatchResources (``v1`` or ``v1alpha1`` DRAResourceHealth) on the DRA socket."""
        inst = self._pick(driver, endpoint)
        if version == "v1":
            stub: Any = dra_health_v1_pb2_grpc.DRAResourceHealthStub(inst.channel)
            request: Any = dra_health_v1_pb2.NodeWatchResourcesRequest()
        elif version == "v1alpha1":
            stub = dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub(inst.channel)
            request = dra_health_v1alpha1_pb2.NodeWatchResourcesRequest()
        else:
            raise ValueError(f"unknown health API version {version!r}")
        return HealthWatch(stub.NodeWatchResources(request))

    def __enter__(self) -> KubeletHarness:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
