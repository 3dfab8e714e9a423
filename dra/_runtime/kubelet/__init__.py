"""Kubelet-facing gRPC servers: plugin registration, DRA v1/v1beta1, DRA health.

The daemon uses `KubeletPlugin`; the prepare path implements `ClaimHandler` and may use
`SerializeLock` (cross-process flock) around shared state.
"""

from dra._runtime.kubelet.handler import ClaimHandler, ClaimOutcome, PreparedResult
from dra._runtime.kubelet.lock import LockTimeout, SerializeLock
from dra._runtime.kubelet.paths import KubeletPaths, PluginPaths
from dra._runtime.kubelet.plugin import KubeletPlugin

__all__ = [
    "ClaimHandler",
    "ClaimOutcome",
    "KubeletPaths",
    "KubeletPlugin",
    "LockTimeout",
    "PluginPaths",
    "PreparedResult",
    "SerializeLock",
]
