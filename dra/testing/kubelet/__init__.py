"""A kubelet stand-in that speaks the kubelet plugin gRPC APIs over real unix sockets.

It does what kubelet's plugin manager and DRA manager do, in the same order and with the same
timeouts, so a test exercises exactly the code paths kubelet does:

1. discovery: scan the registration dir (recursively) for unix sockets, skipping names that
   start with ``.``; a new socket (or a socket file replaced by a new one) is registered, a
   removed one deregistered (`scan()` once, or `watch()` in a background thread);
2. registration: dial the socket, ``GetInfo`` with a 1 s timeout, check ``type == "DRAPlugin"``
   and a non-empty name, reject an endpoint another socket already registered, pick the first
   entry of the PLUGIN's ``supported_versions`` that this kubelet knows (``v1.DRAPlugin``,
   ``v1beta1.DRAPlugin``; or `force_service`), then ``NotifyRegistrationStatus`` with a 5 s
   timeout (``plugin_registered=False`` and the reason on any failure, which is recorded in
   `failures` and retried on the next scan);
3. calls: one insecure channel per instance to ``unix:<endpoint>`` (an empty endpoint means
   the registration socket), connected right after registration; each call goes to the most
   recently registered instance of the driver whose channel is READY, else the most recent one;
   prepare/unprepare get a 45 s timeout and are checked as kubelet checks them (an entry for a
   claim not asked for, or a missing entry, is a `KubeletCallError`).

Results are plain dataclasses (`results`); discovery and registration are `registration`, the
calls `harness`, the health stream `health`, and `doubles` has a recording `ClaimHandler` and a
short temporary dir for sockets. Example::

    with KubeletHarness(registrar_dir) as kubelet:
        plugin = kubelet.wait_for_plugin("gpu.example.com")
        res = kubelet.prepare([ClaimRef(uid, "default", "claim")])           # service chosen
        res = kubelet.prepare([ClaimRef(uid, "default", "claim")], version="v1beta1")
        errors = kubelet.unprepare([ClaimRef(uid, "default", "claim")])
        with kubelet.watch_health() as watch:
            devices = watch.next(timeout=5)
"""

from dra.testing.kubelet.doubles import RecordingHandler, short_tmpdir
from dra.testing.kubelet.harness import CALL_TIMEOUT_S, KubeletHarness
from dra.testing.kubelet.health import HealthWatch
from dra.testing.kubelet.registration import (
    DIAL_TIMEOUT_S,
    GET_INFO_TIMEOUT_S,
    KUBELET_DRA_SERVICES,
    NOTIFY_TIMEOUT_S,
    Registrar,
)
from dra.testing.kubelet.results import (
    DeviceHealth,
    KubeletCallError,
    PreparedClaim,
    PreparedDevice,
    RegisteredPlugin,
    RegistrationFailure,
)

__all__ = [
    "CALL_TIMEOUT_S",
    "DIAL_TIMEOUT_S",
    "GET_INFO_TIMEOUT_S",
    "KUBELET_DRA_SERVICES",
    "NOTIFY_TIMEOUT_S",
    "DeviceHealth",
    "HealthWatch",
    "KubeletCallError",
    "KubeletHarness",
    "PreparedClaim",
    "PreparedDevice",
    "RecordingHandler",
    "RegisteredPlugin",
    "Registrar",
    "RegistrationFailure",
    "short_tmpdir",
]
