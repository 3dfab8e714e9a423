"""hookcore: the quota library preloaded into GPU workloads, seen from Python.

The C core (``hookcore/core``) parses the hook environment and keeps the per-claim ledger; this
package wraps it (``hookcore._hookcore``, Cython) for the DRA driver, metrics and
``dra hook inspect``:

- :func:`parse_config` validates a configuration (a config file's text or an environment) exactly
  as the preloaded library will (same C parser), raising :class:`HookConfigError` with the
  library's one-line message;
- :func:`claim_config` is what a DRA driver writes for a claim, from one quota per device in
  `dra.Quota`'s names: the neutral keys, the ``config`` file the library reads in the container
  (``/run/hookcore/<stem>/config``, authoritative over the environment), parsed once by the
  library's parser and checked to say what was asked; :func:`create_ledger` makes the claim's
  ledger from that parse (:func:`claim_env` and :func:`config_file_text` are its two halves, each
  validated on its own, for tools and tests);
- :class:`Ledger` opens a ledger file read-only and reports quota and usage per device and per
  process; :class:`LedgerError` carries the C message when the file is missing or foreign;
  :func:`read_ledger` is the reader for a file a tenant can write (the node daemon's metrics):
  a private copy, no link followed, nothing but a regular file opened, a deadline;
- :func:`library_path` / :func:`stub_dir` locate the built ``libvgpu.so`` and stub drivers.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from hookcore import _hookcore as _ext
    from hookcore._hookcore import (
        CONFIG_ROOT,
        DEFAULT_LEDGER,
        LIMITER_BURST_NS,
        LIMITER_WAKE_NS,
        MAX_DEVICES,
        MEM_UNLIMITED,
        SM_PPM_FULL,
        HookConfigError,
        LedgerError,
    )

__all__ = [
    "CONFIG_ROOT",
    "DEFAULT_LEDGER",
    "LIMITER_BURST_NS",
    "LIMITER_WAKE_NS",
    "MAX_DEVICES",
    "MEM_UNLIMITED",
    "SM_PPM_FULL",
    "ClaimConfig",
    "Config",
    "DeviceQuota",
    "DeviceUsage",
    "HookConfigError",
    "Ledger",
    "LedgerError",
    "LedgerSnapshot",
    "LedgerTimeout",
    "LimiterUsage",
    "ProcessUsage",
    "QuotaLike",
    "claim_config",
    "claim_env",
    "config_file_text",
    "container_config_path",
    "create_ledger",
    "elasticity_text",
    "is_elasticity",
    "library_path",
    "library_stem",
    "parse_config",
    "parse_count",
    "parse_memory",
    "parse_sm",
    "read_ledger",
    "stub_dir",
    "stub_library",
]

_HERE = Path(__file__).resolve().parent
BUILD_DIR = _HERE / "build"
_STEM = re.compile(r"lib([a-z0-9_-]{1,32})\.so(\..*)?")  # preload/self.c's hk_preload_stem_of, the same rule


if not TYPE_CHECKING:
    class _Extension:
        """`hookcore._hookcore` (typed by its stub, _hookcore.pyi), imported on first use so that
        `library_path()` works before the extension is built (setup.py or build_ext --inplace)."""

        def __getattr__(self, name: str) -> Any:
            from hookcore import _hookcore

            return getattr(_hookcore, name)

    _ext = _Extension()


def __getattr__(name: str) -> Any:
    # The exceptions live in the extension so the C messages cross unchanged; import lazily so
    # `library_path()` works before the extension is built.
    if name in ("HookConfigError", "LedgerError", "MEM_UNLIMITED", "MAX_DEVICES", "DEFAULT_LEDGER", "CONFIG_ROOT",
                "LIMITER_BURST_NS", "LIMITER_WAKE_NS", "SM_PPM_FULL"):
        return getattr(_ext, name)
    raise AttributeError(f"module 'hookcore' has no attribute {name!r}")


def library_path() -> Path:
    """Path of the built ``libvgpu.so`` (``make -C hookcore`` or the package build creates it)."""
    return BUILD_DIR / "libvgpu.so"


def stub_dir() -> Path:
    """Directory holding the stub ``libcuda.so.1`` and ``libnvidia-ml.so.1`` used by CPU tests."""
    return BUILD_DIR / "stub"


def stub_library(name: str) -> Path:
    """The built stub vendor library `name` (e.g. ``libdcmi.so``): the one lookup every fake
    backend uses, so the NPU fake does not need the GPU hook library to find its own stub."""
    path = stub_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"the stub library {path} is not built: run `make -C hookcore` (or reinstall the package)")
    return path


def parse_memory(value: str, name: str = "HOOKCORE_MEMORY_LIMIT") -> int:
    """Bytes of a memory quantity as the hook reads it (``3000m``, ``10Gi``, ``1G`` = 10^9)."""
    return int(_ext.parse_memory(value, name))


def parse_sm(value: str, name: str = "HOOKCORE_COMPUTE_LIMIT") -> int:
    """Percent (1..100) of an SM limit as the hook reads it; 0 is rejected."""
    return int(_ext.parse_sm(value, name))


def is_elasticity(value: object) -> bool:
    """Whether `value` is a clock elasticity the hook's parser takes: a number from 0 to 1 with at
    most 3 decimals (``HOOKCORE_COMPUTE_ELASTICITY_<i>`` is written x1000 exactly, never rounded)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        return False  # NaN fails the comparison too
    return abs(value * 1000 - round(value * 1000)) < 1e-9


def elasticity_text(value: float) -> str:
    """`value` as ``HOOKCORE_COMPUTE_ELASTICITY_<i>`` spells it: ``0.45``, ``1``, ``0``, ``0.005`` (the
    parser takes a leading 0 or 1, a point and up to 3 digits; no exponent). Raises HookConfigError
    for a value it would not take (`is_elasticity`)."""
    if not is_elasticity(value):
        raise _ext.HookConfigError(f"clock elasticity {value!r}: expected a number from 0 to 1 with at most 3"
                                   " decimals (0.45)")
    whole, milli = divmod(round(value * 1000), 1000)
    return f"{whole}.{milli:03d}".rstrip("0") if milli else str(whole)


class QuotaLike(Protocol):
    """The quota of one device as a claim asks for it, in `dra.Quota`'s names (`dra.Quota` is one,
    so is `DeviceQuota`): what :func:`claim_config` and :func:`claim_env` take."""

    @property
    def uuid(self) -> str | None: ...
    @property
    def memory(self) -> int | None: ...
    @property
    def cores(self) -> int: ...
    @property
    def strict(self) -> bool: ...
    @property
    def full_load_mhz(self) -> int | None: ...
    @property
    def clock_elasticity(self) -> float | None: ...
    @property
    def context_memory(self) -> int | None: ...
    @property
    def device_sms(self) -> int | None: ...
    @property
    def priority(self) -> str | None: ...


@dataclass(frozen=True)
class DeviceQuota:
    """The quota of one device index of a claim, in `dra.Quota`'s names (see there; the C struct
    calls them ``mem_limit``, ``sm_limit``, ``compute_mode``, ``ref_mhz``, ``elasticity_milli``,
    ``ctx_bytes``)."""

    index: int
    memory: int | None = None  # bytes; None = no memory quota
    cores: int = 100  # percent, 100 = no compute limit
    uuid: str | None = None  # the physical device's key when the claim is UUID-keyed
    strict: bool = False  # cores of full-load throughput (a strict cap), not of device time
    full_load_mhz: int | None = None  # strict: the device's SM clock under full load (None: the library's default)
    clock_elasticity: float | None = None  # strict: the elasticity charged before evidence (None: the prior, 1)
    context_memory: int | None = None  # bytes a context takes on this device, charged per context (None: 0)
    device_sms: int | None = None  # the device's SM count as the daemon read it (None: the hook asks CUDA)
    priority: str | None = None  # "high" | "normal": the device's part in priorities (None: not set)

    @classmethod
    def of(cls, index: int, quota: QuotaLike) -> DeviceQuota:
        """`quota` at `index`, as the library's parser reads it back from what :func:`claim_env` writes
        (an empty UUID and a context charge of 0 are not written: None; an elasticity is read back
        x1000 / 1000)."""
        elasticity = None if quota.clock_elasticity is None else round(quota.clock_elasticity * 1000) / 1000
        return cls(index, quota.memory, quota.cores, quota.uuid or None, quota.strict, quota.full_load_mhz,
                   elasticity, quota.context_memory or None, quota.device_sms, quota.priority)


def library_stem(library: str | os.PathLike[str]) -> str:
    """The stem of a hook library's file name (``libvgpu.so`` -> ``vgpu``), as the library itself
    derives it: it names the config directory ``/run/hookcore/<stem>/`` and the default ledger.
    The one implementation of the rule in Python: the framework's hook dir uses it too."""
    name = PurePosixPath(os.fspath(library)).name
    m = _STEM.fullmatch(name)
    if m is None:
        raise _ext.HookConfigError(
            f"{name!r} is not a hook library name: expected lib<stem>.so with a stem of 1 to 32 "
            "characters of [a-z0-9_-]"
        )
    return m.group(1)


def container_config_path(library: str | os.PathLike[str]) -> PurePosixPath:
    """The config file the library reads inside a container (``/run/hookcore/vgpu/config``).
    The framework mounts the claim's directory (``config`` + ``ledger``) at its parent."""
    return PurePosixPath(_ext.config_file_path(library_stem(library)))


@dataclass(frozen=True)
class Config:
    """A parsed configuration (what the preloaded library will enforce)."""

    devices: tuple[DeviceQuota, ...]  # all HK_MAX_DEVICES indices
    device_count: int  # 1 + highest index named by a per-device key (0 = defaults only)
    uuid_keyed: bool
    ledger_path: str | None  # None: no limit set, no ledger needed
    origin: str = "env"  # "file", "env" or "none" (no key at all: the library stays dormant)
    board_dir: str | None = None  # HOOKCORE_PRIORITY_BOARD: the devices' priority boards (None: no priorities)
    parsed: _ext.ParsedConfig | None = field(default=None, repr=False, compare=False)
    """The C parser's own result, from which :func:`create_ledger` makes a ledger without parsing again."""

    def configured(self) -> tuple[DeviceQuota, ...]:
        """The devices a claim names (or device 0 when only defaults are set)."""
        return self.devices[: max(self.device_count, 1)]


def parse_config(
    env: Mapping[str, str] | None = None,
    *,
    file_text: str | None = None,
    file_path: str | None = None,
    stem: str = "vgpu",
) -> Config:
    """Validate a configuration with the library's own parser.

    With `file_text` (a config file's contents) the environment is ignored, as the library ignores
    it when the file exists; `file_path` names the file in messages and its directory holds the
    default ledger. Otherwise `env` (default ``os.environ``) is parsed with the neutral keys and
    the legacy names of library `stem` (HAMi's ``CUDA_DEVICE_*`` for ``vgpu``).
    """
    parsed = _ext.parse_config(dict(os.environ if env is None else env), file_text, file_path, stem)
    raw = parsed.values()
    devices = tuple(DeviceQuota(**d) for d in raw["devices"])
    return Config(devices, raw["device_count"], raw["uuid_keyed"], raw["ledger_path"], raw["origin"],
                  raw["board_dir"], parsed)


def parse_count() -> int:
    """How many configurations the C parser has read in this process (tests count a claim's parses)."""
    return _ext.parse_count()


@dataclass(frozen=True)
class ClaimConfig:
    """A claim's configuration as the framework writes it, parsed once by the library's parser."""

    settings: Mapping[str, str]  # the KEY=VALUE settings (:func:`claim_env`'s)
    text: str  # the config file, exactly as the library will read it
    config: Config  # `text` parsed (origin "file"): what the library will enforce


def claim_config(quotas: Sequence[QuotaLike], ledger_path: str, *, file_path: str | None = None,
                 stem: str = "vgpu", board_dir: str | None = None) -> ClaimConfig:
    """The configuration of a claim's devices (index = position in `quotas`) with one parse: the
    settings (:func:`claim_env`), the file (:func:`config_file_text`), parsed by library `stem`'s
    own parser as the file at `file_path` (the path the library reads it from, for messages), and
    checked to enforce exactly `quotas` (their priorities too; `board_dir` as for :func:`claim_env`).
    Raises HookConfigError naming what the library rejects."""
    settings = _settings(quotas, ledger_path, board_dir)
    text = _file_text(settings)
    config = parse_config({}, file_text=text, file_path=file_path, stem=stem)
    for i, q in enumerate(quotas):
        want, got = DeviceQuota.of(i, q), config.devices[i]
        if got != want:
            raise _ext.HookConfigError(f"quota {i} (device {q.uuid}) would be enforced as {got}, not {want}")
    if config.board_dir != (settings.get("HOOKCORE_PRIORITY_BOARD") or None):
        raise _ext.HookConfigError(f"the priority boards would be read from {config.board_dir!r}, not {board_dir!r}")
    return ClaimConfig(settings, text, config)


def _settings(quotas: Sequence[QuotaLike], ledger_path: str, board_dir: str | None = None) -> dict[str, str]:
    env: dict[str, str] = {"HOOKCORE_LEDGER": ledger_path}
    for i, q in enumerate(quotas):
        if q.memory is not None:
            env[f"HOOKCORE_MEMORY_LIMIT_{i}"] = str(q.memory)
        if q.cores != 100:
            env[f"HOOKCORE_COMPUTE_LIMIT_{i}"] = str(q.cores)
        if q.uuid:
            env[f"HOOKCORE_DEVICE_UUID_{i}"] = q.uuid
        if q.strict:
            env[f"HOOKCORE_COMPUTE_MODE_{i}"] = "strict"
        if q.full_load_mhz is not None:
            env[f"HOOKCORE_COMPUTE_REF_MHZ_{i}"] = str(q.full_load_mhz)
        if q.clock_elasticity is not None:
            env[f"HOOKCORE_COMPUTE_ELASTICITY_{i}"] = elasticity_text(q.clock_elasticity)
        if q.context_memory:
            env[f"HOOKCORE_CONTEXT_MEMORY_{i}"] = str(q.context_memory)
        if q.device_sms is not None:
            env[f"HOOKCORE_DEVICE_SMS_{i}"] = str(q.device_sms)
        if q.priority is not None:
            env[f"HOOKCORE_PRIORITY_{i}"] = q.priority
    if any(q.priority is not None for q in quotas):
        if not board_dir:
            raise _ext.HookConfigError("claim_env: a device's priority needs the board directory (board_dir)")
        env["HOOKCORE_PRIORITY_BOARD"] = board_dir
    if any(q.uuid for q in quotas) and not all(q.uuid for q in quotas):
        raise _ext.HookConfigError("claim_env: either every device has a UUID or none has")
    return env


def _file_text(env: Mapping[str, str]) -> str:
    for k, v in env.items():
        if any(c in k + v for c in "\n\r\0"):
            raise _ext.HookConfigError(f"{k}={v!r}: line breaks and NUL cannot be written to a config file")
    lines = ["# hookcore claim configuration, written by the DRA driver; authoritative over the environment"]
    lines += [f"{k}={env[k]}" for k in sorted(env)]
    return "\n".join(lines) + "\n"


def claim_env(quotas: Sequence[QuotaLike], ledger_path: str, board_dir: str | None = None) -> dict[str, str]:
    """The configuration of a claim's devices (index = position in `quotas`), validated.

    Vendor-neutral keys: ``HOOKCORE_MEMORY_LIMIT_<i>`` in plain bytes, ``HOOKCORE_COMPUTE_LIMIT_<i>``
    only below 100, ``HOOKCORE_COMPUTE_MODE_<i>`` / ``HOOKCORE_COMPUTE_REF_MHZ_<i>`` /
    ``HOOKCORE_COMPUTE_ELASTICITY_<i>`` (:func:`elasticity_text`) for a strict cap,
    ``HOOKCORE_CONTEXT_MEMORY_<i>`` when a context size is given, ``HOOKCORE_DEVICE_SMS_<i>`` when
    the device's SM count is known (the whole the hook measures a context's SM fraction against;
    CUDA inside an MPS client answers the client's part), ``HOOKCORE_DEVICE_UUID_<i>``
    when given (then the claim is UUID-keyed and every device must have one), ``HOOKCORE_LEDGER`` =
    `ledger_path` as the container sees it; ``HOOKCORE_PRIORITY_<i>`` when a device's priority is
    set and ``HOOKCORE_PRIORITY_BOARD`` = `board_dir` (where the daemon mounts the devices' priority
    boards; required with a priority). Raises HookConfigError if the library would reject the result.
    Write it with :func:`config_file_text` (:func:`claim_config` does both with one parse).
    """
    env = _settings(quotas, ledger_path, board_dir)
    parse_config(env)
    return env


def config_file_text(env: Mapping[str, str]) -> str:
    """The ``config`` file for a claim's configuration (from :func:`claim_env`): sorted
    ``KEY=VALUE`` lines under a comment. Raises HookConfigError when the library would reject the
    file: a legacy name (the file takes neutral keys only), a line break in a value, a bad value."""
    text = _file_text(env)
    parse_config(file_text=text)
    return text


def create_ledger(
    path: str | os.PathLike[str], config: Config | Mapping[str, str], mode: int = 0o660, stem: str = "vgpu"
) -> None:
    """Create the ledger file of a claim ahead of its processes (e.g. in NodePrepareResources), for
    `config` (a parsed one, e.g. :func:`claim_config`'s, is used as it is; an environment is parsed
    with library `stem`'s names).

    Validates an existing file instead (a stale file from an earlier run is adopted when no
    process uses it). `mode` is applied with chmod, so containers running as other users of the
    claim can open it read-write. Delete the file when the claim is unprepared.
    """
    parsed = config if isinstance(config, Config) else parse_config(config, stem=stem)
    if parsed.parsed is None:
        raise ValueError("create_ledger: the Config was not made by parse_config")
    _ext.create_ledger(os.fspath(path), parsed.parsed)
    os.chmod(path, mode)


@dataclass(frozen=True)
class DeviceUsage:
    """Quota and claim-wide usage of one device index, as recorded in a ledger."""

    index: int
    uuid: str | None
    memory_limit: int | None
    sm_limit: int
    used: int  # bytes charged by live processes (dead ones until reclaimed)
    peak: int  # highest admitted claim-wide usage
    live_processes: int

    @property
    def free(self) -> int | None:
        return None if self.memory_limit is None else max(self.memory_limit - self.used, 0)


@dataclass(frozen=True)
class LimiterUsage:
    """The compute limiter of one device index of a claim: device time granted, charged and waited.

    The bucket's own books: ``granted_ns`` is the credit its refills added (share x time, less what
    the burst cap dropped while the claim was idle), ``charged_ns`` the device time the claim's
    work took; ``charged_ns - granted_ns`` is the debt the limiter let the claim run into, which is
    at most the work in flight when it was last admitted (and ``-tokens_ns`` unless the ledger was
    written to). Tests assert on these instead of on rates measured on the host's clock.

    ``device_ns`` is the device time of the charged work before its SM fraction and clock ratio, and
    ``sm_ppm`` the fraction of the device's SMs (millionths) the last batch was charged at: a batch
    costs device time x the SM fraction its context may use (``charged_ns / device_ns`` on a claim
    without a strict cap). Both read 0 in a ledger whose limiter was set up by an older library.

    Under a strict cap ``factor_milli`` is what the last batch was charged per ns of device time for
    the clock (x1000), from the clock elasticity ``elastic_milli`` the hook learned from the claim's
    own batches (``elastic_fit``; before any evidence the prior, 1000: compute-bound). ``yielded_ns``:
    time its threads waited while a high-priority claim had work on the device (a normal claim)."""

    index: int
    active: bool  # a process of the claim has set up a compute limit on this device
    share: int  # percent
    charged_ns: int  # device time charged since the ledger was created
    throttled_ns: int  # time the claim's submitting threads waited for their share
    tokens_ns: int  # current balance (negative = in debt)
    granted_ns: int  # credit given by the refills since the ledger was created
    device_ns: int = 0  # device time of the charged work, before its SM fraction and clock ratio
    sm_ppm: int = 0  # SM fraction (millionths of the device's SMs) of the last charged batch; 0 = none
    factor_milli: int = 0  # strict cap: the clock factor the last batch was charged at, x1000; 0 = none
    elastic_milli: int = 0  # strict cap: the clock elasticity in use (hookcore/core/elastic.h), x1000
    elastic_fit: bool = False  # strict cap: the elasticity was learned from the claim's batches (else the prior)
    yielded_ns: int = 0  # time the claim's threads waited for a higher-priority claim's work
    elapsed_ns: int = 0  # the charged batches' windows as timed, before the contention estimate
    throttles: int = 0  # how many times the claim's submitting threads waited for their share


@dataclass(frozen=True)
class ProcessUsage:
    """One process slot of a ledger."""

    slot: int
    pid: int  # in the owner's PID namespace
    state: str  # "live", "dead" (reclaimable), "claiming"
    start_time: int  # /proc/<pid>/stat field 22
    used: dict[int, int] = field(default_factory=dict)  # device index -> bytes, non-zero only

    @property
    def total(self) -> int:
        return sum(self.used.values())


class Ledger:
    """A ledger file opened read-only (never modifies it, never claims a slot). With `snapshot`,
    a private copy read without trusting the file (see :func:`read_ledger`)."""

    def __init__(self, path: str | os.PathLike[str], snapshot: bool = False) -> None:
        self.path = str(path)
        self._view = _ext.LedgerView(self.path, snapshot)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._view.close()

    @property
    def version(self) -> int:
        return int(self._view.version)

    @property
    def device_count(self) -> int:
        return int(self._view.device_count)

    def device(self, index: int) -> DeviceUsage:
        return DeviceUsage(**self._view.device(index))

    def devices(self) -> list[DeviceUsage]:
        """Devices the claim configures, plus any other index with usage recorded."""
        out = []
        for i in range(_ext.MAX_DEVICES):
            d = self.device(i)
            if i < max(self.device_count, 1) or d.used > 0 or d.peak > 0:
                out.append(d)
        return out

    def limiter(self, index: int) -> LimiterUsage:
        return LimiterUsage(index, **self._view.limiter(index))

    def processes(self, include_free: bool = False) -> list[ProcessUsage]:
        """Process slots in use (live, dead-but-not-reclaimed, claiming)."""
        out = []
        for slot in range(int(self._view.slot_hwm)):
            p = self._view.process(slot)
            if p["state"] == "free" and not include_free:
                continue
            used = {i: v for i, v in enumerate(p["used"]) if v}
            out.append(ProcessUsage(slot, p["pid"], p["state"], p["start_time"], used))
        return out


class LedgerTimeout(TimeoutError):
    """A ledger read that did not finish within its deadline (an OSError, like LedgerError)."""


@dataclass(frozen=True)
class LedgerSnapshot:
    """What one read of a claim's ledger found."""

    devices: list[DeviceUsage]
    processes: list[ProcessUsage]  # live ones
    limiters: dict[int, LimiterUsage]


_hung: dict[str, threading.Thread] = {}   # reads past their deadline, by path, until they return
_hung_lock = threading.Lock()
MAX_HUNG_READS = 16


def read_ledger(path: str | os.PathLike[str], timeout: float = 1.0) -> LedgerSnapshot:
    """Read a ledger that a tenant can write, for a reader that must survive it (the daemon).

    The C reader never follows a symlink, opens nothing but a regular file of the ledger's size (a
    FIFO, a directory or a 10 GiB sparse file are refused without being read), copies the file
    into private memory (no mapping: a file truncated meanwhile cannot fault the process) and
    releases the GIL while doing so. The read runs on a thread of its own and is given up after
    `timeout` seconds (LedgerTimeout); while it stays stuck, later reads of the same path fail at
    once, and at most MAX_HUNG_READS are left behind in all. Raises LedgerError (an OSError) for a
    file that is not a ledger.
    """
    key = os.fspath(path)
    with _hung_lock:
        for p in [p for p, t in _hung.items() if not t.is_alive()]:
            del _hung[p]
        if key in _hung:
            raise LedgerTimeout(f"ledger {key}: an earlier read has not returned yet")
        if len(_hung) >= MAX_HUNG_READS:
            raise LedgerTimeout(f"ledger {key}: {len(_hung)} ledger reads are stuck, not starting another")
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with Ledger(key, snapshot=True) as ledger:
                devices = ledger.devices()
                live = [p for p in ledger.processes() if p.state == "live"]
                box["ok"] = LedgerSnapshot(devices, live, {d.index: ledger.limiter(d.index) for d in devices})
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work, name=f"ledger-read {os.path.basename(os.path.dirname(key))}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        with _hung_lock:
            _hung[key] = t
        raise LedgerTimeout(f"ledger {key}: no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    result: LedgerSnapshot = box["ok"]
    return result
