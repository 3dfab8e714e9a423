"""The driver's opaque config (a claim's or DeviceClass's ``config[].opaque.parameters``):

    apiVersion: ascend.project-hami.io/v1alpha1
    kind: NpuConfig
    preload: env          # how hookcore's libvnpu.so is loaded: file (/etc/ld.so.preload, the default) or env
    computeLimit: false   # no compute share: the claim's processes time-slice the NPU freely

Decoded strictly by the framework (`dra.decode_config`): unknown fields, wrong types or a wrong
apiVersion/kind fail the claim (and, with the webhook, the ``kubectl apply``) with a message
naming the field. HAMi's ``NpuConfig`` fields ``sharing`` and ``vnpuSpec`` (hardware vNPU
templates, TimeSlicing/SpacePartitioning strategies) are not supported and are refused by name,
so a claim written for HAMi's traditional mode fails loudly instead of running unshared. The
memory quota is always enforced; it is what the scheduler accounted.
"""

from __future__ import annotations

import dataclasses

import dra

API_VERSION = "ascend.project-hami.io/v1alpha1"


@dataclasses.dataclass(frozen=True)
class NpuConfig(dra.ShareConfig):
    """An NPU claim's config: `dra.ShareConfig`'s ``preload`` and ``computeLimit``, nothing more."""
