# cython: language_level=3, boundscheck=False
"""Thin binding of the hookcore C core: config parsing and read-only ledger access.

The typed Python API lives in `hookcore/__init__.py`; this module returns plain values and raises
`HookConfigError` / `LedgerError` carrying the C library's one-line message.
"""

from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

MAX_DEVICES = HK_MAX_DEVICES
MAX_SLOTS = HK_MAX_SLOTS
MEM_UNLIMITED = HK_MEM_UNLIMITED
MEM_MAX = HK_MEM_MAX
SM_UNLIMITED = HK_SM_UNLIMITED
LEDGER_VERSION = HK_LEDGER_VERSION
DEFAULT_LEDGER = HK_DEFAULT_LEDGER.decode()
_STATES = {HK_SLOT_FREE: "free", HK_SLOT_CLAIMING: "claiming", HK_SLOT_LIVE: "live",
           HK_SLOT_DEAD: "dead"}


class HookConfigError(ValueError):
    """A hook environment value was rejected; the message names the variable and the value."""


class LedgerError(OSError):
    """A ledger file could not be opened or is not a ledger this library understands."""


cdef bytes _b(object s, str what):
    cdef bytes b = s.encode("utf-8", "surrogateescape")
    if b"\0" in b:
        raise HookConfigError(f"{what}: NUL character in {s!r}")
    return b


def parse_memory(value, name="CUDA_DEVICE_MEMORY_LIMIT"):
    """Bytes of a memory quantity (`3000m`, `10Gi`, `1e9`, ...) or HookConfigError."""
    cdef char err[512]
    cdef uint64_t out = 0
    cdef bytes bn = _b(name, name), bv = _b(value, name)
    if hk_parse_mem(bn, bv, &out, err, sizeof(err)) != HK_OK:
        raise HookConfigError(err.decode("utf-8", "replace"))
    return out


def parse_sm(value, name="CUDA_DEVICE_SM_LIMIT"):
    """Percent 1..100 of an SM limit or HookConfigError."""
    cdef char err[512]
    cdef uint32_t out = 0
    cdef bytes bn = _b(name, name), bv = _b(value, name)
    if hk_parse_sm(bn, bv, &out, err, sizeof(err)) != HK_OK:
        raise HookConfigError(err.decode("utf-8", "replace"))
    return out


def uuid_equal(a, b):
    """True if two UUID strings name the same GPU (case and `GPU-` prefix ignored)."""
    return bool(hk_uuid_equal(_b(a, "uuid"), _b(b, "uuid")))


def parse_config(env):
    """Parse a mapping of environment variables; returns a dict, raises HookConfigError."""
    cdef list entries = []
    for k, v in env.items():
        entries.append(_b(k, k) + b"=" + _b(v, k))
    cdef Py_ssize_t n = len(entries)
    cdef const char **envp = <const char **>malloc((n + 1) * sizeof(char *))
    cdef hk_config *cfg = <hk_config *>malloc(sizeof(hk_config))
    cdef char err[512]
    cdef int rc
    if envp == NULL or cfg == NULL:
        free(envp)
        free(cfg)
        raise MemoryError()
    try:
        for i in range(n):
            envp[i] = <bytes>entries[i]
        envp[n] = NULL
        rc = hk_config_parse(envp, cfg, err, sizeof(err))
        if rc != HK_OK:
            raise HookConfigError(err.decode("utf-8", "replace"))
        devices = []
        for i in range(HK_MAX_DEVICES):
            devices.append({
                "index": i,
                "memory_limit": None if cfg.mem_limit[i] == HK_MEM_UNLIMITED else cfg.mem_limit[i],
                "sm_limit": cfg.sm_limit[i],
                "uuid": cfg.uuid[i].decode("utf-8", "replace") or None,
                "explicit": bool(cfg.flags[i] & (HK_CFG_MEM_SET | HK_CFG_SM_SET | HK_CFG_UUID_SET)),
            })
        return {
            "device_count": cfg.device_count,
            "uuid_keyed": bool(cfg.uuid_keyed),
            "ledger_path": cfg.ledger_path.decode("utf-8", "surrogateescape") or None,
            "devices": devices,
        }
    finally:
        free(envp)
        free(cfg)


def create_ledger(path, env):
    """Create (or validate) the ledger at `path` for the configuration in `env`, claiming no slot.

    Raises HookConfigError for a bad environment and LedgerError when the file exists with another
    layout, or with another configuration while processes use it.
    """
    cdef list entries = []
    for k, v in env.items():
        entries.append(_b(k, k) + b"=" + _b(v, k))
    cdef Py_ssize_t n = len(entries)
    cdef const char **envp = <const char **>malloc((n + 1) * sizeof(char *))
    cdef hk_config *cfg = <hk_config *>malloc(sizeof(hk_config))
    cdef hk_ledger *l = NULL
    cdef char err[512]
    cdef bytes bp = _b(str(path), "ledger path")
    if envp == NULL or cfg == NULL:
        free(envp)
        free(cfg)
        raise MemoryError()
    try:
        for i in range(n):
            envp[i] = <bytes>entries[i]
        envp[n] = NULL
        if hk_config_parse(envp, cfg, err, sizeof(err)) != HK_OK:
            raise HookConfigError(err.decode("utf-8", "replace"))
        if hk_ledger_open(bp, cfg, HK_OPEN_NOCLAIM, &l, err, sizeof(err)) != HK_OK:
            raise LedgerError(err.decode("utf-8", "replace"))
        hk_ledger_close(l)
    finally:
        free(envp)
        free(cfg)


def proc_start_time(int pid):
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), 0 if unknown."""
    return hk_proc_start_time(pid)


cdef class LedgerView:
    """A read-only mapping of a ledger file. Liveness is checked with the slots' OFD locks."""

    cdef hk_ledger *_l
    cdef readonly str path

    def __cinit__(self, path):
        cdef char err[512]
        cdef bytes bp = _b(str(path), "ledger path")
        self._l = NULL
        self.path = str(path)
        rc = hk_ledger_open(bp, NULL, HK_OPEN_READONLY, &self._l, err, sizeof(err))
        if rc != HK_OK:
            raise LedgerError(err.decode("utf-8", "replace"))

    def __dealloc__(self):
        if self._l != NULL:
            hk_ledger_close(self._l)
            self._l = NULL

    def close(self):
        if self._l != NULL:
            hk_ledger_close(self._l)
            self._l = NULL

    cdef hk_ledger *_open(self) except NULL:
        if self._l == NULL:
            raise LedgerError(f"ledger {self.path} is closed")
        return self._l

    @property
    def version(self):
        return hk_ledger_version(self._open())

    @property
    def device_count(self):
        return hk_ledger_device_count(self._open())

    @property
    def slot_hwm(self):
        return hk_ledger_slot_hwm(self._open())

    def device(self, int index):
        cdef hk_device_info d
        if hk_ledger_device(self._open(), index, &d) != HK_OK:
            raise IndexError(f"device index {index} out of range 0..{HK_MAX_DEVICES - 1}")
        return {
            "index": index,
            "uuid": d.uuid.decode("utf-8", "replace") or None,
            "memory_limit": None if d.mem_limit == HK_MEM_UNLIMITED else d.mem_limit,
            "sm_limit": d.sm_limit,
            "used": d.used,
            "peak": d.peak,
            "live_processes": d.live_processes,
        }

    def process(self, int slot):
        cdef hk_process_info p
        if hk_ledger_process(self._open(), slot, &p) != HK_OK:
            raise IndexError(f"slot {slot} out of range 0..{HK_MAX_SLOTS - 1}")
        return {
            "slot": slot,
            "state": _STATES.get(p.state, "unknown"),
            "pid": p.pid,
            "start_time": p.start_time,
            "nonce": p.nonce,
            "used": [p.used[i] for i in range(HK_MAX_DEVICES)],
        }
