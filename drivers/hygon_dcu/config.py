"""The driver's opaque config (a claim's or DeviceClass's ``config[].opaque.parameters``):

    apiVersion: hygon-dcu.project-hami.io/v1alpha1
    kind: DcuConfig
    preload: env          # how hookcore's libvhip.so is loaded: file (/etc/ld.so.preload, the default) or env
    computeLimit: false   # no compute share: the claim's processes time-slice the DCU freely

Decoded strictly by the framework (`dra.decode_config`): unknown fields, wrong types or a wrong
apiVersion/kind fail the claim (and, with the webhook, the ``kubectl apply``) with a message
naming the field. The memory quota is always enforced; it is what the scheduler accounted.
"""

from __future__ import annotations

import dataclasses

import dra

API_VERSION = "hygon-dcu.project-hami.io/v1alpha1"


@dataclasses.dataclass(frozen=True)
class DcuConfig(dra.ShareConfig):
    """A DCU claim's config: `dra.ShareConfig`'s ``preload`` and ``computeLimit``, nothing more."""
