"""The driver's opaque config (a claim's or DeviceClass's ``config[].opaque.parameters``):

    apiVersion: hami-core-gpu.project-hami.io/v1alpha1
    kind: GpuConfig
    preload: env          # how hookcore is loaded: file (/etc/ld.so.preload, the default) or env
    computeLimit: false   # no compute share: the claim's processes time-slice the GPU freely

Decoded strictly by the framework (`dra.decode_config`): unknown fields, wrong types or a
wrong apiVersion/kind fail the claim (and, with the webhook, the `kubectl apply`) with a message
naming the field. The memory quota is always enforced; it is what the scheduler accounted.
"""

from __future__ import annotations

import dataclasses

import dra

API_VERSION = "hami-core-gpu.project-hami.io/v1alpha1"


@dataclasses.dataclass(frozen=True)
class GpuConfig(dra.ShareConfig):
    """A GPU claim's config: `dra.ShareConfig`'s ``preload`` and ``computeLimit`` (``false`` is HAMi's
    ``CUDA_DISABLE_CONTROL`` for compute)."""
