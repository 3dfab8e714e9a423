"""A claim's share of an MLU as the vendor's sMLU instance: made at prepare, destroyed at
unprepare, and the instances of claims no record names destroyed at start.

This is how the share is held: no hook runs in the container. The vendor's driver partitions the
MLU into sMLU instances, each with a compute quota (``mluQuota``, percent) and a memory size,
and holds a container to the instance whose device node (``/dev/cambricon-caps/cap_dev<N>_mi<M>``)
it was given. Cambricon's device plugin makes one per pod in ``dynamic-smlu`` mode, from the
pod's ``CAMBRICON_DSMLU_PROFILE`` annotation (``<slot>_<vcore>_<vmemory units>``, which HAMi's
scheduler writes); this driver makes one per claim and MLU from the share the scheduler reserved:
``mluQuota`` = the summed ``cores`` of the claim's requests on the MLU (100 where every request
lifts the compute limit), ``memorySize`` = their summed ``memory``.

The instance is named ``dra-<claim UID>`` (unique per MLU: one instance per claim and MLU), so a
prepare repeated after a crash finds the instance it made instead of making a second, and an
unprepare finds it from the claim alone (a record still "preparing" has no state). At start,
every ``dra-`` instance whose claim no checkpoint record names on that MLU is destroyed (a
prepare that crashed before its record, an unprepare that crashed after it); instances with
other names (an admin's, the vendor's device plugin's) are never touched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from dra import ClaimRef, DriverContext, PrepareError
from drivers.cambricon_mlu.cndev import Cndev, CndevError, Mlu, SmluInstance

log = logging.getLogger(__name__)

PREFIX = "dra-"
_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,62}")


def instance_name(claim_uid: str) -> str:
    """The sMLU instance name of a claim (on each of its MLUs)."""
    if not _UID.fullmatch(claim_uid):
        raise PrepareError(f"claim UID {claim_uid!r} cannot name an sMLU instance (letters, digits and '-' only)")
    return PREFIX + claim_uid


def make(cndev: Cndev, claim: ClaimRef, mlu: Mlu, quota: int, memory: int) -> SmluInstance:
    """The claim's instance on `mlu` of `quota` percent and `memory` bytes: the one a repeated
    prepare made before, or a new one (an instance of the claim with another share, left by an
    allocation that changed, is replaced)."""
    name = instance_name(claim.uid)
    try:
        have = next((i for i in cndev.instances(mlu.index, mlu.target) if i.name == name), None)
        if have is not None and (have.quota, have.memory) == (quota, memory):
            log.info("sMLU instance already there (prepare retried)", extra={"claim": claim.uid, "mlu": mlu.index,
                                                                             "instance": have.node})
            return have
        if have is not None:
            log.warning("sMLU instance of the claim has another share; replacing it", extra={
                "claim": claim.uid, "mlu": mlu.index, "had": f"{have.quota}% {have.memory}", "wants": f"{quota}% {memory}"})
            cndev.destroy_instance(mlu.index, name, mlu.target)
        made = cndev.create_instance(mlu.index, name, quota, memory, mlu.target)
    except CndevError as exc:
        raise PrepareError(f"MLU {mlu.index} ({mlu.uuid}): cannot make the claim's sMLU instance of {quota}% and"
                           f" {memory >> 20}Mi: {exc}") from None
    log.info("sMLU instance made", extra={"claim": claim.uid, "mlu": mlu.index, "instance": made.node,
                                          "quota": quota, "memory": memory})
    return made


def remove(cndev: Cndev, claim: ClaimRef, mlu: Mlu) -> None:
    """Destroy the claim's instance on `mlu`; nothing when it is gone already."""
    if cndev.destroy_instance(mlu.index, instance_name(claim.uid), mlu.target):
        log.info("sMLU instance destroyed", extra={"claim": claim.uid, "mlu": mlu.index})


def repair(cndev: Cndev, ctx: DriverContext, shared: Mapping[str, Mlu]) -> list[str]:
    """Destroy the ``dra-`` instances on the `shared` MLUs (by device name) that no checkpoint
    record names (its claim on that MLU); the destroyed instances' names. Nothing outside a
    daemon, or while a record cannot be read (whose an instance is is then unknown)."""
    recorded = ctx.recorded() if ctx.recorded_devices() is not None else None
    if recorded is None:
        if shared:
            log.info("no checkpoint, or one not readable in full: sMLU instances are not repaired at this start")
        return []
    keep: dict[str, set[str]] = {}
    for r in recorded:
        keep.setdefault(r.device, set()).add(PREFIX + r.claim.uid)
    gone = []
    for name, mlu in shared.items():
        for inst in cndev.instances(mlu.index, mlu.target):
            if inst.name.startswith(PREFIX) and inst.name not in keep.get(name, ()):
                cndev.destroy_instance(mlu.index, inst.name, mlu.target)
                log.warning("destroyed an sMLU instance no claim records", extra={"mlu": mlu.index, "instance": inst.name})
                gone.append(inst.name)
    return gone
