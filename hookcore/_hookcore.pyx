# cython: language_level=3, boundscheck=False
"""Thin binding of the hookcore C core: config parsing, ledger creation and read-only access.

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
LIMITER_BURST_NS = HK_LIMITER_BURST_NS  # device time a compute limiter banks at most while idle
LIMITER_WAKE_NS = HK_LIMITER_WAKE_NS  # credit a thread the limiter stopped waits for before it goes on
SM_PPM_FULL = HK_SM_PPM_FULL  # an SM fraction in millionths: all of the device's SMs (LimiterUsage.sm_ppm)
DEFAULT_LEDGER = HK_DEFAULT_LEDGER.decode()
CONFIG_ROOT = HK_CONFIG_ROOT.decode()
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


def parse_memory(value, name="HOOKCORE_MEMORY_LIMIT"):
    """Bytes of a memory quantity (`3000m`, `10Gi`, `1e9`, ...) or HookConfigError."""
    cdef char err[512]
    cdef uint64_t out = 0
    cdef bytes bn = _b(name, name), bv = _b(value, name)
    if hk_parse_mem(bn, bv, &out, err, sizeof(err)) != HK_OK:
        raise HookConfigError(err.decode("utf-8", "replace"))
    return out


def parse_sm(value, name="HOOKCORE_COMPUTE_LIMIT"):
    """Percent 1..100 of an SM limit or HookConfigError."""
    cdef char err[512]
    cdef uint32_t out = 0
    cdef bytes bn = _b(name, name), bv = _b(value, name)
    if hk_parse_sm(bn, bv, &out, err, sizeof(err)) != HK_OK:
        raise HookConfigError(err.decode("utf-8", "replace"))
    return out


def uuid_equal(a, b):
    """True if two UUID strings name the same device (case and a device-kind word before it ignored)."""
    return bool(hk_uuid_equal(_b(a, "uuid"), _b(b, "uuid")))


cdef class _Source:
    """An hk_config_source whose strings live as long as this object."""

    cdef const char **envp
    cdef list _keep
    cdef hk_config_source src

    def __cinit__(self, env, file_text, file_path, stem):
        cdef Py_ssize_t n = len(env)
        cdef bytes b
        self._keep = []
        self.envp = <const char **>malloc((n + 1) * sizeof(char *))
        if self.envp == NULL:
            raise MemoryError()
        memset(&self.src, 0, sizeof(self.src))
        i = 0
        for k, v in env.items():
            b = _b(k, k) + b"=" + _b(v, k)
            self._keep.append(b)
            self.envp[i] = <const char *>b
            i += 1
        self.envp[n] = NULL
        self.src.envp = self.envp
        if file_text is not None:
            b = _b(file_text, str(file_path or "config file"))
            self._keep.append(b)
            self.src.file_text = <const char *>b
        if file_path is not None:
            b = _b(str(file_path), "config file path")
            self._keep.append(b)
            self.src.file_path = <const char *>b
        b = _b(stem, "stem")
        self._keep.append(b)
        self.src.stem = <const char *>b
        # the library's legacy names, from its shims' env_aliases.def (build/gen/env_aliases.c)
        self.src.aliases = hk_env_aliases_for(self.src.stem)

    def __dealloc__(self):
        free(self.envp)


cdef unsigned long long _parses = 0


def parse_count():
    """How many configurations the C parser has read in this process (a test counts a claim's)."""
    return _parses


cdef int _parse(_Source s, hk_config *cfg) except -1:
    global _parses
    cdef char err[512]
    _parses += 1
    if hk_config_parse_source(&s.src, cfg, err, sizeof(err)) != HK_OK:
        raise HookConfigError(err.decode("utf-8", "replace"))
    return 0


_ORIGINS = {HK_ORIGIN_NONE: "none", HK_ORIGIN_ENV: "env", HK_ORIGIN_FILE: "file"}
_PRIORITIES = {1: "normal", 2: "high"}  # HK_PRIORITY_NORMAL, HK_PRIORITY_HIGH (0, unset: None)


cdef class ParsedConfig:
    """A configuration as the C parser left it: the library's own struct, kept so that a ledger is
    created from it without parsing again (`create_ledger`); `values()` gives its plain values."""

    cdef hk_config cfg

    def __copy__(self):
        return self  # never changed after the parse

    def __deepcopy__(self, memo):
        return self

    def values(self):
        """The parsed values, in `dra.Quota`'s names (the struct's `mem_limit` is `memory`, its
        `sm_limit` `cores`, `ref_mhz` `full_load_mhz`, `elasticity_milli` `clock_elasticity`, `ctx_bytes`
        `context_memory`)."""
        devices = []
        for i in range(HK_MAX_DEVICES):
            devices.append({
                "index": i,
                "memory": None if self.cfg.mem_limit[i] == HK_MEM_UNLIMITED else self.cfg.mem_limit[i],
                "cores": self.cfg.sm_limit[i],
                "uuid": self.cfg.uuid[i].decode("utf-8", "replace") or None,
                "strict": self.cfg.compute_mode[i] == HK_COMPUTE_STRICT,
                "full_load_mhz": self.cfg.ref_mhz[i] or None,
                "clock_elasticity": self.cfg.elasticity_milli[i] / 1000
                if self.cfg.flags[i] & HK_CFG_ELASTICITY_SET else None,
                "context_memory": self.cfg.ctx_bytes[i] or None,
                "device_sms": self.cfg.device_sms[i] or None,
                "priority": _PRIORITIES.get(self.cfg.priority[i]),
            })
        return {
            "origin": _ORIGINS.get(self.cfg.origin, "none"),
            "device_count": self.cfg.device_count,
            "uuid_keyed": bool(self.cfg.uuid_keyed),
            "ledger_path": self.cfg.ledger_path.decode("utf-8", "surrogateescape") or None,
            "board_dir": self.cfg.board_dir.decode("utf-8", "surrogateescape") or None,
            "devices": devices,
        }


def parse_config(env, file_text=None, file_path=None, stem="vgpu"):
    """Parse a configuration as library `stem` will: the config file's text when given (then `env`
    is ignored, as the library ignores the environment when the file exists), else the mapping of
    environment variables with the library's legacy aliases. Returns a `ParsedConfig`; raises
    HookConfigError."""
    cdef _Source s = _Source(env, file_text, file_path, stem)
    cdef ParsedConfig parsed = ParsedConfig()
    _parse(s, &parsed.cfg)
    return parsed


def config_file_path(stem):
    """The config file library `stem` reads in a container: HK_CONFIG_ROOT/<stem>/config."""
    cdef char out[4096]
    if hk_config_file_path(_b(stem, "stem"), out, sizeof(out)) != HK_OK:
        raise HookConfigError(f"library stem {stem!r}: expected 1 to 32 characters of [a-z0-9_-]")
    return out.decode()


def create_ledger(path, ParsedConfig config not None):
    """Create (or validate) the ledger at `path` for `config` (from `parse_config`, not parsed
    again), claiming no slot.

    Raises LedgerError when the file exists with another layout, or with another configuration
    while processes use it.
    """
    cdef hk_ledger *l = NULL
    cdef char err[512]
    cdef bytes bp = _b(str(path), "ledger path")
    if hk_ledger_open(bp, &config.cfg, HK_OPEN_NOCLAIM, &l, err, sizeof(err)) != HK_OK:
        raise LedgerError(err.decode("utf-8", "replace"))
    hk_ledger_close(l)


def proc_start_time(int pid):
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), 0 if unknown."""
    return hk_proc_start_time(pid)


cdef class LedgerView:
    """A read-only mapping of a ledger file, or with `snapshot` a private copy of it read without
    trusting the file (no link followed, nothing but a regular file of the right size opened, no
    mapping; the GIL released while the file is opened and read). Liveness is checked with the
    slots' OFD locks."""

    cdef hk_ledger *_l
    cdef readonly str path

    def __cinit__(self, path, snapshot=False):
        cdef char err[512]
        cdef bytes bp = _b(str(path), "ledger path")
        cdef const char *cp = bp
        cdef int rc
        self._l = NULL
        self.path = str(path)
        err[0] = 0
        if snapshot:
            with nogil:
                rc = hk_ledger_open_snapshot(cp, &self._l, err, sizeof(err))
        else:
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

    def limiter(self, int index):
        """The compute limiter's bucket of device `index` (device time charged and granted, time throttled,
        the SM fraction of the last charge)."""
        cdef hk_limiter_stats st
        if index < 0 or index >= HK_MAX_DEVICES:
            raise IndexError(f"device index {index} out of range 0..{HK_MAX_DEVICES - 1}")
        hk_limiter_read(hk_ledger_limiter_area(self._open(), index), &st)
        return {"active": bool(st.active), "share": st.share, "charged_ns": st.charged_ns,
                "throttled_ns": st.throttled_ns, "tokens_ns": st.tokens_ns, "granted_ns": st.granted_ns,
                "device_ns": st.device_ns, "sm_ppm": st.sm_ppm, "factor_milli": st.factor_milli,
                "elastic_milli": st.elastic_milli, "elastic_fit": bool(st.elastic_fit), "yielded_ns": st.yielded_ns,
                "elapsed_ns": st.elapsed_ns, "throttles": st.throttles}

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
