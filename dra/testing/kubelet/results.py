"""What the kubelet stand-in answers with: plain frozen records of registrations, prepared
claims and device health, and the error for a response kubelet would reject."""

from __future__ import annotations

import dataclasses


class KubeletCallError(Exception):
    """A response kubelet would reject (missing or unexpected claim entries)."""


@dataclasses.dataclass(frozen=True)
class RegisteredPlugin:
    """One registered plugin instance."""

    name: str
    endpoint: str
    registration_socket: str
    supported_versions: tuple[str, ...]
    service: str  # the DRA service chosen at registration, e.g. "v1.DRAPlugin"
    registered_at: float  # time.monotonic()


@dataclasses.dataclass(frozen=True)
class RegistrationFailure:
    socket: str
    error: str


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None  # None when unset (always with v1beta1)


@dataclasses.dataclass(frozen=True)
class PreparedClaim:
    """The answer for one claim: devices, or a non-empty error."""

    devices: tuple[PreparedDevice, ...]
    error: str


@dataclasses.dataclass(frozen=True)
class DeviceHealth:
    pool_name: str
    device_name: str
    health: str  # "Healthy", "Unhealthy" or "Unknown"
    last_updated_time: int
    health_check_timeout_seconds: int
    message: str
