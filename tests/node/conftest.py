"""A real node (kubelet + containerd + runc) joined to the session's control plane.

It needs root, runc and the node binaries (`make test` builds them and `make node-deps`
installs runc). Where it cannot start the tests skip with the reason, except under CI, where
they fail: CI must run them.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci_gate import skip_or_fail

from dra_dev.cluster.controlplane import ControlPlane
from dra_dev.node.binaries import build_node, node_binaries
from dra_dev.node.node import RealNode, unavailable_reason


@pytest.fixture(scope="session")
def real_node(cluster: ControlPlane) -> Iterator[RealNode]:
    reason = unavailable_reason()
    skip_or_fail(reason)
    if not node_binaries(cluster.k8s_version).complete():
        build_node(cluster.k8s_version, progress=lambda m: print(m, file=sys.stderr))
    # Short and under /tmp: unix socket paths (containerd, plugins) must fit in 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="dra-node-", dir="/tmp"))
    node = RealNode(directory, f"real-{uuid.uuid4().hex[:6]}", cluster.directory)
    try:
        node.up(progress=lambda m: print(m, file=sys.stderr))
        yield node
    finally:
        node.down(purge=True)
