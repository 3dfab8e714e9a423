"""The node's durable record of claims: what was prepared, so it can be answered again and undone.

Layout under the state directory (one file per claim, so claims never wait for each other):

    claims/<claimUID>.json     the record, written atomically (temp file, fsync, rename, fsync dir)
    locks/<claimUID>.lock      a flock per claim, shared by every process on the node

A record file is ``{"apiVersion", "kind", "checksum", "claim": {...}}``; the checksum is the
SHA-256 of the canonical JSON of ``claim``. A claim goes through two phases: ``preparing`` is
durable before the vendor driver is called (so a crash leaves a trace that unprepare can undo),
``prepared`` after its CDI spec is written. Each record carries the node's boot ID: a record
from an earlier boot is prepared again, never returned stale.

A file that cannot be read back (bad JSON, bad checksum, missing fields) is moved aside to
``<name>.corrupt-<unix-ts>`` with an error log, and the claim counts as unknown; it never
crashes the daemon. A record written by a newer schema version is left in place and reported
as `CheckpointError`, so a downgrade does not destroy state it cannot read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from dra._runtime.fsutil import UID_RE, atomic_write, dir_syncer, fsync_dir, lock_file, temp_files, unlock_file
from dra.driver import (
    HOOK_KEY,
    AllocatedDevice,
    ClaimRef,
    ContainerEdits,
    DeviceNode,
    Keyed,
    Mount,
    PreparedDevice,
    RecordedDevice,
)
from dra.errors import DRAError

log = logging.getLogger(__name__)

API_VERSION = "checkpoint.dra.k8s.io/v1"
KIND = "ClaimCheckpoint"
SCHEMA_VERSION = 1
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")

PREPARING: Literal["preparing"] = "preparing"
PREPARED: Literal["prepared"] = "prepared"
Phase = Literal["preparing", "prepared"]

class CheckpointError(DRAError):
    """A record exists but this version cannot use it (e.g. written by a newer version)."""


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        log.warning("cannot read the boot ID; reboots will not be detected", extra={"path": str(path)})
        return "unknown"


@dataclasses.dataclass(frozen=True)
class DeviceRecord(Keyed):
    """One prepared (or being-prepared) device of a claim, of `driver`, known by its `key` (`dra.DeviceKey`)."""

    driver: str
    request: str
    pool: str
    device: str
    share_id: str | None = None
    consumed_capacity: Mapping[str, int] = dataclasses.field(default_factory=dict)
    admin_access: bool = False
    cdi_name: str = ""  # the device name in the claim's CDI spec: <claimUID>-<key>
    cdi_ids: tuple[str, ...] = ()
    edits: ContainerEdits = dataclasses.field(default_factory=ContainerEdits)
    state: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    config: Mapping[str, Any] | None = None  # the decoded opaque config, encoded (dra.config.encode_config)

    @classmethod
    def of(cls, driver: str, device: AllocatedDevice, cdi_name: str, config: Mapping[str, Any] | None) -> DeviceRecord:
        """The record of `device` before the driver prepared it (`prepared` adds what it returned);
        `config` is its opaque config encoded (`dra.config.encode_config`)."""
        return cls(driver, device.request, device.pool, device.device, device.share_id, dict(device.consumed_capacity),
                   device.admin_access, cdi_name, config=config)

    def hook_key(self) -> str | None:
        """The key the claim's hook config names this device by (`dra.HOOK_KEY`; a record made
        before it was kept: its ``uuid``), or None."""
        key = self.state.get(HOOK_KEY) or self.state.get("uuid")
        return str(key) if key else None

    def prepared(self, cdi_id: str, device: PreparedDevice) -> DeviceRecord:
        """This record with what the driver's prepare returned for it and its CDI device ID."""
        return dataclasses.replace(self, cdi_ids=(cdi_id, *device.cdi_devices), edits=device.edits,
                                   state=dict(device.state))

    def recorded(self, claim: ClaimRef, phase: Phase) -> RecordedDevice:
        """The driver's view of this record (`DriverContext.recorded`)."""
        return RecordedDevice(claim, phase, self.pool, self.device, self.share_id, self.admin_access, dict(self.state))


@dataclasses.dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    phase: Phase
    boot_id: str
    devices: tuple[DeviceRecord, ...] = ()
    claim_edits: ContainerEdits = dataclasses.field(default_factory=ContainerEdits)
    created_at: float = 0.0
    updated_at: float = 0.0
    enforcement: Mapping[str, Any] | None = None
    """The claim's hook (dra._runtime.enforcement.ClaimHookPlan.to_json plus "set", the mounted set's path);
    its dir is ``<state-dir>/hooks/<uid>``, removed with the claim whatever this field says."""


# --- (de)serialisation -------------------------------------------------------------------------


def edits_to_json(e: ContainerEdits) -> dict[str, Any]:
    return {
        "env": dict(e.env),
        "mounts": [{"hostPath": m.host_path, "containerPath": m.container_path, "options": list(m.options)}
                   for m in e.mounts],
        "deviceNodes": [{"path": d.path, "hostPath": d.host_path, "permissions": d.permissions}
                        for d in e.device_nodes],
    }


def edits_from_json(d: Mapping[str, Any]) -> ContainerEdits:
    return ContainerEdits(
        env={str(k): str(v) for k, v in (d.get("env") or {}).items()},
        mounts=tuple(Mount(m["hostPath"], m["containerPath"], tuple(m.get("options", ()))) for m in d.get("mounts") or ()),
        device_nodes=tuple(DeviceNode(n["path"], n.get("hostPath"), n.get("permissions"))
                           for n in d.get("deviceNodes") or ()),
    )


def _record_to_json(r: ClaimRecord) -> dict[str, Any]:
    return {
        "uid": r.uid, "namespace": r.namespace, "name": r.name, "phase": r.phase, "bootID": r.boot_id,
        "createdAt": r.created_at, "updatedAt": r.updated_at,
        "claimEdits": edits_to_json(r.claim_edits),
        **({"enforcement": dict(r.enforcement)} if r.enforcement is not None else {}),
        "devices": [{
            "driver": d.driver, "request": d.request, "pool": d.pool, "device": d.device, "shareID": d.share_id,
            "consumedCapacity": dict(d.consumed_capacity), "adminAccess": d.admin_access,
            "cdiName": d.cdi_name, "cdiDeviceIDs": list(d.cdi_ids), "edits": edits_to_json(d.edits),
            "state": dict(d.state), **({"config": dict(d.config)} if d.config is not None else {}),
        } for d in r.devices],
    }


def _record_from_json(c: Mapping[str, Any]) -> ClaimRecord:
    phase = c["phase"]
    if phase not in (PREPARING, PREPARED):
        raise ValueError(f"unknown phase {phase!r}")
    return ClaimRecord(
        uid=c["uid"], namespace=c["namespace"], name=c["name"], phase=phase, boot_id=c["bootID"],
        created_at=float(c.get("createdAt", 0.0)), updated_at=float(c.get("updatedAt", 0.0)),
        claim_edits=edits_from_json(c.get("claimEdits") or {}),
        enforcement=c.get("enforcement"),
        devices=tuple(DeviceRecord(
            driver=d["driver"], request=d["request"], pool=d["pool"], device=d["device"],
            share_id=d.get("shareID"), consumed_capacity={k: int(v) for k, v in (d.get("consumedCapacity") or {}).items()},
            admin_access=bool(d.get("adminAccess")), cdi_name=d.get("cdiName", ""),
            cdi_ids=tuple(d.get("cdiDeviceIDs") or ()), edits=edits_from_json(d.get("edits") or {}),
            state=d.get("state") or {}, config=d.get("config"),
        ) for d in c.get("devices") or ()),
    )


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def checksum(claim: Any) -> str:
    return "sha256:" + hashlib.sha256(_canonical(claim)).hexdigest()


# --- the store ---------------------------------------------------------------------------------


class Checkpoint:
    """Per-claim records under `state_dir`; safe across threads and processes (with `lock`).

    Reads go to disk every time (no cache), so two daemon instances during a rolling update see
    each other's writes. Callers hold `lock(uid)` around read-modify-write of one claim.
    """

    def __init__(self, state_dir: Path, boot_id: str | None = None, boot_id_path: Path = BOOT_ID_PATH) -> None:
        self.state_dir = Path(state_dir)
        self.claims_dir = self.state_dir / "claims"
        self.locks_dir = self.state_dir / "locks"
        self.claims_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.locks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.boot_id = boot_id if boot_id is not None else read_boot_id(boot_id_path)
        # The hot path (a few file operations per claim) joins strings: pathlib objects cost more
        # CPU than the system calls they name.
        self._claims = os.fspath(self.claims_dir)
        self._locks = os.fspath(self.locks_dir)

    # paths
    def path(self, uid: str) -> Path:
        return Path(self._file(uid))

    def _file(self, uid: str) -> str:
        """`path` as a string; validates the UID before it becomes a file name."""
        if not UID_RE.match(uid):
            raise ValueError(f"claim UID {uid!r} is not a valid UID")
        return f"{self._claims}/{uid}.json"

    @contextlib.contextmanager
    def lock(self, uid: str) -> Iterator[None]:
        """Exclusive per-claim flock, across threads and processes.

        The lock file is removed on release when the claim has no record left; a waiter that
        then wakes up on the unlinked file notices (inode changed) and locks the new file.
        """
        record_path = self._file(uid)  # validates the UID before it becomes a file name
        lock_path = f"{self._locks}/{uid}.lock"
        while True:
            fd = lock_file(lock_path)
            try:
                same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            except BaseException:
                unlock_file(fd)
                raise
            if same:
                break
            unlock_file(fd)
        try:
            yield
        finally:
            try:
                if not os.path.exists(record_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock_path)
            finally:
                unlock_file(fd)

    # records
    def get(self, uid: str) -> ClaimRecord | None:
        """The record for `uid`, or None (absent, or corrupt and moved aside)."""
        path = self._file(uid)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        return self._decode(path, raw)

    def _decode(self, path: str, raw: bytes) -> ClaimRecord | None:
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("kind") != KIND:
                raise ValueError(f"kind is {doc.get('kind')!r}, want {KIND!r}")
            version = doc.get("apiVersion")
            if version != API_VERSION:
                if isinstance(version, str) and version.startswith("checkpoint.dra.k8s.io/"):
                    raise CheckpointError(
                        f"checkpoint {path} has apiVersion {version!r}; this version reads only {API_VERSION!r}."
                        " It was probably written by a newer release: upgrade again, or unprepare the claim"
                        " with that release, then remove the file."
                    )
                raise ValueError(f"apiVersion is {version!r}, want {API_VERSION!r}")
            claim = doc["claim"]
            if doc.get("checksum") != checksum(claim):
                raise ValueError("checksum mismatch")
            record = _record_from_json(claim)
            if f"{record.uid}.json" != os.path.basename(path):
                raise ValueError(f"record is for claim {record.uid}, not for the file's name")
            return record
        except CheckpointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self._quarantine(Path(path), str(e))
            return None

    def _quarantine(self, path: Path, why: str) -> None:
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        n = 1
        while aside.exists():  # keep every bad copy for inspection
            n += 1
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}-{n}")
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return
        fsync_dir(path.parent)
        log.error(
            "CORRUPT CHECKPOINT moved aside; the claim is treated as not prepared (kubelet's next"
            " prepare redoes it). Inspect the file, then delete it.",
            extra={"path": str(path), "moved_to": str(aside), "reason": why},
        )

    def put(self, record: ClaimRecord) -> None:
        body = _canonical(_record_to_json(record))  # encoded once: hashed and embedded as is
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        head = json.dumps({"apiVersion": API_VERSION, "checksum": digest})[:-1].encode()
        atomic_write(self._file(record.uid), head + b', "claim": ' + body + b', "kind": "' + KIND.encode() + b'"}')

    def delete(self, uid: str) -> bool:
        path = self._file(uid)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        dir_syncer(self._claims).sync()  # else a power cut could bring the record back
        return True

    def uids(self) -> set[str]:
        """UIDs that have a record file (readable or not; corrupt ones are not checked here). A
        ``*.json`` file whose name is no UID is none of ours: logged and left alone, so it never
        stops the daemon at start."""
        out = set()
        for p in self.claims_dir.glob("*.json"):
            uid = p.name[: -len(".json")]
            if p.name.startswith("."):
                continue
            if not UID_RE.match(uid):
                log.warning("ignoring a file in the checkpoint dir whose name is not a claim UID",
                            extra={"path": str(p)})
                continue
            out.add(uid)
        return out

    def records(self) -> list[ClaimRecord]:
        """Every readable record; corrupt files are moved aside, newer-version files skipped."""
        out = []
        for uid in sorted(self.uids()):
            try:
                rec = self.get(uid)
            except CheckpointError as e:
                log.error("skipping checkpoint record", extra={"claim": uid, "reason": str(e)})
                continue
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise
                continue
            if rec is not None:
                out.append(rec)
        return out

    def temp_files(self) -> list[tuple[Path, str]]:
        """(path, claim UID) of temp files left by interrupted writes of records."""
        return temp_files(self.claims_dir)
