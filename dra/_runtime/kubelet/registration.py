"""The plugin registration service (``pluginregistration.Registration``) kubelet dials first."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import grpc

from dra._runtime.kubelet._proto import pluginregistration_v1_pb2 as regpb
from dra._runtime.kubelet._proto import pluginregistration_v1_pb2_grpc as reggrpc

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
"""`PluginInfo.type` of DRA drivers."""

DRA_V1 = "v1.DRAPlugin"
DRA_V1BETA1 = "v1beta1.DRAPlugin"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
HEALTH_V1 = "v1.DRAResourceHealth"


def supported_versions(health: bool) -> list[str]:
    """The services advertised in GetInfo, v1 first (kubelet takes the first one it knows)."""
    versions = [DRA_V1, DRA_V1BETA1]
    if health:
        versions += [HEALTH_V1ALPHA1, HEALTH_V1]
    return versions


class RegistrationServicer(reggrpc.RegistrationServicer):
    """Answers GetInfo and records kubelet's NotifyRegistrationStatus verdicts."""

    def __init__(self, driver_name: str, endpoint: str, versions: Sequence[str]) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.versions = list(versions)
        self._cond = threading.Condition()
        self._registered = False
        self._error = ""
        self._notifications = 0

    def GetInfo(self, request: regpb.InfoRequest, context: grpc.ServicerContext) -> regpb.PluginInfo:
        log.debug("kubelet GetInfo", extra={"driver": self.driver_name})
        return regpb.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=self.endpoint,
            supported_versions=self.versions,
        )

    def NotifyRegistrationStatus(
        self, request: regpb.RegistrationStatus, context: grpc.ServicerContext
    ) -> regpb.RegistrationStatusResponse:
        # Always answered successfully: since 1.36 kubelet deregisters a plugin whose answer fails.
        with self._cond:
            self._registered = request.plugin_registered
            self._error = request.error
            self._notifications += 1
            self._cond.notify_all()
        if request.plugin_registered:
            log.info("registered with kubelet", extra={"driver": self.driver_name, "endpoint": self.endpoint})
        else:
            log.error(
                "kubelet rejected the plugin registration",
                extra={"driver": self.driver_name, "endpoint": self.endpoint, "error": request.error},
            )
        return regpb.RegistrationStatusResponse()

    @property
    def registered(self) -> bool:
        """True once kubelet's last NotifyRegistrationStatus said registered."""
        with self._cond:
            return self._registered

    @property
    def error(self) -> str:
        """The error of kubelet's last NotifyRegistrationStatus ("" when none)."""
        with self._cond:
            return self._error

    def wait_registered(self, timeout: float | None = None) -> bool:
        """Block until kubelet reports the plugin registered; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._registered, timeout)

    def mark_unregistered(self) -> None:
        with self._cond:
            self._registered = False
            self._cond.notify_all()
