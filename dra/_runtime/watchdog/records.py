"""The claims the watchdog judges against, from the daemon's own checkpoint records (never a
claim's ledger, which its processes can write): `claim_view` reads one record, `ClaimRecords`
keeps them all, re-read only when the checkpoint may have changed."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dra._runtime import claim_marker, procinfo
from dra._runtime.checkpoint import PREPARED, ClaimRecord, DeviceRecord
from dra._runtime.watchdog.model import ACTION_RANK, CONFIG_KEY, ClaimView
from dra.driver import WHOLE_MEMORY

log = logging.getLogger("dra._runtime.watchdog")

RECORDS_MAX_AGE = 5.0  # seconds the cached records are trusted while their stamp holds


def claim_view(record: ClaimRecord, driver: str, hooks_root: Path) -> ClaimView | None:
    """The claim as the watchdog sees it, from its checkpoint record (the daemon's own, never the
    claim's ledger); None when it has no device of `driver` or is not prepared."""
    devices = [d for d in record.devices if d.driver == driver]
    if record.phase != PREPARED or not devices:
        return None
    memory: dict[str, int | None] = {}
    cores: dict[str, int] = {}
    action: str | None = None
    for d in devices:
        memory[d.device] = (memory.get(d.device) or 0) + _memory(d) or None
        cores[d.device] = min(100, cores.get(d.device, 0) + int(d.consumed_capacity.get("cores", 100)))
        configured = (d.config or {}).get(CONFIG_KEY)
        if configured in ACTION_RANK and (action is None or ACTION_RANK[configured] > ACTION_RANK[action]):
            action = configured
    hook: frozenset[tuple[int, int]] = frozenset()
    ledger = None
    config_dir = None
    enforcement = record.enforcement or {}
    if enforcement.get("set") and enforcement.get("stem"):
        found = procinfo.file_id(Path(str(enforcement["set"])) / f"lib{enforcement['stem']}.so")
        hook = frozenset([found]) if found else frozenset()
        _hook_quotas(record, devices, enforcement, memory, cores)
        ledger = _regular_file(hooks_root / record.uid / "ledger")
        config_dir = str(enforcement.get("configDir") or "") or None
    marked = None if enforcement else _regular_file(hooks_root / record.uid / claim_marker.MARKER_FILE) is not None
    return ClaimView(record.uid, record.namespace, record.name, frozenset(memory), memory, cores, hook, action,
                     ledger, config_dir, marked)


def _memory(device: DeviceRecord) -> int:
    """The bytes of `device` its claim may hold: what the allocation consumed, or, for a device
    allocated whole (it consumed no capacity: a device not shared, such as a hardware partition), the memory
    the driver's prepare recorded for it (`dra.WHOLE_MEMORY`, a positive integer; else none)."""
    if device.consumed_capacity:
        return int(device.consumed_capacity.get("memory", 0))
    whole = device.state.get(WHOLE_MEMORY)
    return whole if isinstance(whole, int) and not isinstance(whole, bool) and whole > 0 else 0


def _hook_quotas(record: ClaimRecord, devices: Sequence[Any], enforcement: Mapping[str, Any],
                 memory: dict[str, int | None], cores: dict[str, int]) -> None:
    """The quotas the hook enforces, which win over the allocation's (a claim whose config lifts
    its compute limit has cores 100 there): the settings the daemon wrote into the claim's
    read-only ``config``, parsed from the daemon's own record by the hook's parser."""
    settings = enforcement.get("settings")
    uuids = {key: d.device for d in devices if (key := d.hook_key())}
    if not uuids or not isinstance(settings, Mapping):
        return
    import hookcore

    try:
        config = hookcore.parse_config({str(k): str(v) for k, v in settings.items()},
                                       stem=str(enforcement["stem"]))
    except ValueError as exc:
        log.warning("claim hook settings unreadable in its record; the allocation's quotas are used",
                    extra={"claim": record.uid, "error": str(exc)})
        return
    for dev in config.configured():
        name = uuids.get(dev.uuid or "")
        if name is not None:
            memory[name] = dev.memory
            cores[name] = int(dev.cores)


def _regular_file(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of `path` when it is a regular file (not followed); None otherwise."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


class ClaimRecords:
    """This driver's prepared claims as `ClaimView`s, by UID. `stamp`: a value that changes when
    the records may have (the checkpoint dir's mtime): they are then re-read only on a change, on
    `refresh(force=True)` (a process's mounts name a claim not cached), or every
    `RECORDS_MAX_AGE` seconds; a record whose ``updated_at`` is unchanged keeps its view. The
    claims that ended wait in `take_ended` (their metrics and windows go with them)."""

    def __init__(self, records: Callable[[], Iterable[ClaimRecord]], driver: str, hooks_root: Path,
                 stamp: Callable[[], object] | None = None) -> None:
        self._records = records
        self.driver = driver
        self.hooks_root = hooks_root
        self.stamp = stamp
        self.claims: dict[str, ClaimView] = {}
        self._stamp: object = None
        self._read_at = 0.0
        self._updated: dict[str, float] = {}
        self._ended: list[ClaimView] = []

    def refresh(self, force: bool = False) -> dict[str, ClaimView]:
        """The claims now."""
        if self.stamp is not None and not force:
            try:
                stamp = self.stamp()
            except OSError:
                stamp = None
            if stamp is not None and stamp == self._stamp and time.monotonic() - self._read_at < RECORDS_MAX_AGE:
                return self.claims
            self._stamp = stamp
        self._read_at = time.monotonic()
        out: dict[str, ClaimView] = {}
        for rec in self._records():
            if rec.uid in self.claims and self._updated.get(rec.uid) == rec.updated_at:
                out[rec.uid] = self.claims[rec.uid]
                continue
            view = claim_view(rec, self.driver, self.hooks_root)
            if view is not None:
                out[rec.uid] = view
                self._updated[rec.uid] = rec.updated_at
        for uid, view in self.claims.items():
            if uid not in out:
                self._updated.pop(uid, None)
                self._ended.append(view)
        self.claims = out
        return out

    def take_ended(self) -> list[ClaimView]:
        """The claims that ended since the last call."""
        ended, self._ended = self._ended, []
        return ended
