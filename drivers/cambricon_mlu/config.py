"""The driver's opaque config (a claim's or DeviceClass's ``config[].opaque.parameters``):

    apiVersion: cambricon-mlu.project-hami.io/v1alpha1
    kind: MluConfig
    computeLimit: false   # the sMLU instance gets no compute cap (mluQuota 100): memory only

Decoded strictly by the framework (`dra.decode_config`): unknown fields, wrong types or a wrong
apiVersion/kind fail the claim (and, with the webhook, the ``kubectl apply``) with a message
naming the field. The fields are `dra.ShareConfig`'s; ``preload`` names how to load a hook and is
refused (the MLU's shares are held by the vendor's sMLU, no hook is loaded); ``watchdogAction``
is the action on the claim's verdicts (its processes are known by the claim's marker mount: past
its memory, or on an MLU the claim was not given).
The memory of the instance is always what the scheduler reserved.
"""

from __future__ import annotations

import dataclasses

import dra

API_VERSION = "cambricon-mlu.project-hami.io/v1alpha1"


@dataclasses.dataclass(frozen=True)
class MluConfig(dra.ShareConfig):
    """An MLU claim's config: `dra.ShareConfig`'s fields, nothing more."""
