"""ResourceSlice publishing: the driver's devices as this node's pool, kept in sync with the API server.

`desired` computes slices (pure, validated); `sync.Publisher` writes them and keeps them there.
"""

from dra._runtime.publish.desired import DesiredPool, DeviceValidationError, desired_pool
from dra._runtime.publish.layout import SliceLayout, layout_for, needs_fence, parse_server_version
from dra._runtime.publish.sync import Publisher, PublishSettings, SyncResult
from dra._runtime.publish.timing import Backoff, Clock, SystemClock

__all__ = [
    "Backoff",
    "Clock",
    "DesiredPool",
    "DeviceValidationError",
    "PublishSettings",
    "Publisher",
    "SliceLayout",
    "SyncResult",
    "SystemClock",
    "desired_pool",
    "layout_for",
    "needs_fence",
    "parse_server_version",
]
