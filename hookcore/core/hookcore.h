/* hookcore.h -- the public API of the hookcore core (pure C, no vendor headers).
 *
 * The core owns what every hook library of the project shares, whatever the vendor:
 *   1. configuration: the claim's config file or the environment, parsed strictly; any bad value
 *      puts the library in the FAIL-CLOSED state (every reservation fails) instead of running
 *      unlimited; no configuration at all leaves it DORMANT (every call passes through);
 *   2. the ledger: one mmap'd file per claim holding per-device quotas and per-process usage
 *      counters, shared by every process of the claim;
 *   3. admission: hk_mem_reserve() charges the quota BEFORE the real allocation and is lock free;
 *      hk_mem_release() gives it back on failure or free;
 *   4. the compute limiter (limiter.h), whose shared state lives in the ledger.
 * Nothing here names a vendor: shims pass their legacy environment names in (hk_env_alias).
 *
 * Naming: `hk_` is public; atomic fields carry an `x` prefix; every atomic operation goes through
 * atomic.h, whose names carry the memory order. Return codes: HK_OK (0) or a negative HK_E* value.
 *
 * Threading: every function is thread safe. hk_init() is idempotent (pthread_once). Nothing here
 * calls exit(), installs signal handlers or changes umask; the only process-wide side effect is one
 * pthread_atfork() child handler (a forked child gets its own process slot and no inherited charge).
 *
 * ---------------------------------------------------------------------------------------------
 * Where the configuration comes from (hk_init_with)
 *
 *   1. The config file HK_CONFIG_ROOT/<stem>/config (/run/hookcore/vgpu/config for libvgpu.so),
 *      when it exists. It is AUTHORITATIVE: the environment's quota variables are then ignored, so
 *      a child started with a clean environment (su, ssh, env -i) or a tenant setting its own
 *      limits still gets the claim's. A file that exists but cannot be read fails closed.
 *   2. Otherwise the environment: the neutral keys below, plus the shim's aliases.
 *   3. Neither: dormant. hk_dormant() is 1 and the shim passes every call on untouched.
 *
 * Keys (file and environment):
 *   HOOKCORE_MEMORY_LIMIT_<i>    memory quota of device index i (0..HK_MAX_DEVICES-1)
 *   HOOKCORE_MEMORY_LIMIT        default memory quota of every device index
 *   HOOKCORE_COMPUTE_LIMIT_<i>   compute share of device index i, percent
 *   HOOKCORE_COMPUTE_LIMIT       default compute share, percent
 *   HOOKCORE_COMPUTE_MODE_<i>    share (default): the limit is a share of device time; strict: the
 *   HOOKCORE_COMPUTE_MODE        limit is a share of full-load throughput (limiter.h, meter.h)
 *   HOOKCORE_COMPUTE_REF_MHZ_<i> strict only: the device's clock under full load, MHz (default: the
 *                                shim's own estimate, see the shim's README)
 *   HOOKCORE_COMPUTE_ELASTICITY_<i> strict only: how a batch's time follows the SM clock before the
 *                                claim's own batches show it (elastic.h), a decimal 0..1 with at most 3
 *                                decimals; measured per GPU model for a power-bound matmul (the bench);
 *                                held as given (not learned over); default 1: the whole boost is
 *                                charged, then learned
 *   HOOKCORE_DEVICE_UUID_<i>     device UUID of index i ("KIND-xxxxxxxx-..."): the claim is UUID-keyed
 *   HOOKCORE_CONTEXT_MEMORY_<i>  device memory a context takes on index i (a quantity, 0 allowed);
 *   HOOKCORE_CONTEXT_MEMORY      charged to the quota once per process and device when the process
 *                                first uses the device, and once per extra context it creates
 *                                (default 0: contexts not charged)
 *   HOOKCORE_DEVICE_SMS_<i>      the SM count of device index i, 1..HK_SMS_MAX, as the daemon read it
 *                                from the vendor's management library (not the compute API, which
 *                                answers a sharing client's own part): the whole the compute limiter
 *                                measures a context's SM fraction against (default: the shim asks
 *                                the compute API; see the shim's README)
 *   HOOKCORE_PRIORITY_<i>        high or normal (default normal): on a device where a high-priority
 *   HOOKCORE_PRIORITY            claim has work, normal claims wait (priority.h); needs the board:
 *   HOOKCORE_PRIORITY_BOARD      the directory of the devices' priority boards (one file per device,
 *                                named by its UUID, else its index), which the daemon mounts: writable
 *                                for a high claim, read-only for a normal one. Without it no device
 *                                takes part in priorities.
 *   HOOKCORE_LEDGER              ledger path. Default: <config dir>/ledger for a file config;
 *                                /tmp/hookcore-<stem>.ledger for an environment config with a limit
 * Aliases map a legacy name onto a key, suffix and all: {"OLD_MEM_LIMIT", "HOOKCORE_MEMORY_LIMIT"}
 *   makes OLD_MEM_LIMIT_3 mean HOOKCORE_MEMORY_LIMIT_3 (a shim maps its legacy names). They are
 *   read from the environment only. A repeated name: first wins (like getenv); an alias and its
 *   key that disagree fail closed.
 * File grammar: one KEY=VALUE per line, no spaces around '=', the value is the rest of the line;
 *   blank lines and lines starting with '#' are skipped; '\r\n' line ends are accepted. Unknown
 *   keys, repeated keys, lines without '=' and NUL bytes fail closed ("config file PATH line N: ...").
 * Environment-only switches (not quota, never in the file): HOOKCORE_LOG=debug (hk_init also prints
 *   the parsed quotas and the ledger slot).
 * Config root: HK_CONFIG_ROOT, "/run/hookcore" unless the build defines it. A test build
 *   (-DHK_TESTING, `make testing`) also honours HOOKCORE_TESTING_CONFIG_ROOT; production builds
 *   contain no such knob, so a tenant cannot point the library at a config of its own.
 *
 * Memory quantities (whole bytes, > 0, at most HK_MEM_MAX):
 *   plain bytes              1073741824, +1073741824, 1e9, 1.5e3
 *   Kubernetes binary        Ki Mi Gi Ti Pi Ei       (2^10 .. 2^60)          e.g. 10Gi, 1.5Gi
 *   Kubernetes decimal       M G T P E               (10^6 .. 10^18)         e.g. 1G = 10^9
 *   HAMi (lower case, and K) k/K m g                 (KiB, MiB, GiB)         e.g. 3000m, 2g
 *   Lower-case k/m/g follow HAMi (binary): in Kubernetes `m` would be milli-bytes and `g` does not
 *   exist, so there is no clash. Upper-case M and G follow Kubernetes (decimal): note that HAMi
 *   read `2G` as 2 GiB; HAMi's device plugin only ever writes lower-case `m`.
 *   A fraction must give a whole number of bytes (1.5Gi ok, 1.3k rejected). Rejected: empty,
 *   spaces, sign '-', hex/octal prefixes, trailing junk (1gb, 1Gi!), 0, overflow (> HK_MEM_MAX).
 * Compute limits: a decimal integer 1..100. 100 means "no compute limit". 0 is REJECTED (HAMi read 0
 *   as unlimited, a loophole): a claim that wants no limit leaves the variable unset or says 100.
 * Index suffixes: decimal 0..HK_MAX_DEVICES-1 without leading zeros; `HOOKCORE_MEMORY_LIMIT_x`,
 *   `_01`, `_16` are rejected (a typo must not silently drop a quota).
 * UUIDs: 1..HK_UUID_MAX-1 characters of [A-Za-z0-9-_/:.]; duplicates rejected. When at least one
 *   HOOKCORE_DEVICE_UUID_<i> is set the claim is UUID-keyed: the shim maps every device ordinal to
 *   its UUID and asks hk_device_resolve(); a device whose UUID is not listed is not in the claim.
 *   Comparison ignores case and an optional device-kind word before the UUID ("KIND-...": 1..8
 *   letters, one outside a-f, then '-'), as a vendor's API may or may not print it.
 * Unset memory limit = unlimited (HK_MEM_UNLIMITED); unset compute limit = 100.
 * Error messages are one line: `hookcore: HOOKCORE_MEMORY_LIMIT_1="12x": unknown unit "x" ...`
 * (non-printable characters of the value are escaped, long values truncated).
 *
 * ---------------------------------------------------------------------------------------------
 * Ledger (file layout HK_LEDGER_VERSION; readable by other processes via hk_ledger_open)
 *
 *   header (4 KiB)            magic "HKLEDGER", version, sizes, device count, slot high-water mark
 *   device[HK_MAX_DEVICES]    uuid, mem limit, sm limit, peak, limiter area (256 bytes)
 *   slot[HK_MAX_SLOTS]        owner word, pid, start time, nonce, used[HK_MAX_DEVICES]
 * (exact layout: core/internal.h; 268 KiB in all)
 *
 * Admission: add `size` to my slot's used[dev] (seq_cst), then sum used[dev] over live slots; if
 * the sum exceeds the limit, subtract it again and fail (after one reclaim pass and a short retry).
 * Two racers may both fail but can never both succeed past the limit. No lock on this path.
 * Liveness: each live process holds an OFD byte-range lock (fcntl F_OFD_SETLK) on its slot. The
 * lock belongs to the process's open file description of the ledger, which its descriptor and its
 * mapping keep alive; the kernel drops it when the process dies (however it dies) or execs, so a
 * dead slot is detected by being able to take its lock -- robust against kill -9 at any
 * instruction, PID reuse and PID namespaces (the lock lives on the shared inode), and unaffected
 * by an application closing our descriptor (the mapping still holds the description). A forked
 * child re-opens and re-maps the file at once (atfork handler) so it never pins its parent's lock,
 * and claims its own slot on first use. pid + start time (/proc/<pid>/stat field 22) + a random
 * nonce are recorded for display only. Reclaiming a slot happens while holding its lock.
 * Creation: O_CREAT + an OFD lock on byte 0 held only while the file is created/validated and a
 * slot is claimed (once per process, never on the hot path). A ledger whose magic, version or
 * sizes differ, or whose limits differ from this process's config while other processes are live,
 * puts the library in the fail-closed state with a message saying so.
 */
#ifndef HOOKCORE_H
#define HOOKCORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------- */
/* Limits and constants                                                                         */

#define HK_MAX_DEVICES    16                     /* device indices 0..15 */
#define HK_MAX_SLOTS      1024                   /* processes per ledger */
#define HK_UUID_MAX       64                     /* bytes incl. NUL */
#define HK_PATH_MAX       4096                   /* ledger path bytes incl. NUL */
#define HK_ERR_MAX        512                    /* recommended error buffer size */
#define HK_LIMITER_BYTES  256                    /* per-device area reserved for the compute limiter */
#define HK_MEM_UNLIMITED  UINT64_MAX             /* mem limit of a device without a quota */
#define HK_MEM_MAX        ((uint64_t)1 << 62)    /* largest accepted quota (4 EiB) */
#define HK_SM_UNLIMITED   100u                   /* sm limit meaning "no compute limit" */
#define HK_SMS_MAX        4096u                  /* largest HOOKCORE_DEVICE_SMS_<i> accepted */
#define HK_DEFAULT_LEDGER "/tmp/hookcore.ledger" /* environment config, no stem known */
#ifndef HK_CONFIG_ROOT
#define HK_CONFIG_ROOT "/run/hookcore" /* config files: HK_CONFIG_ROOT/<stem>/config */
#endif
#define HK_CONFIG_MAX 65536 /* larger config files are rejected */

#define HK_LEDGER_MAGIC   0x52454744454c4b48ULL /* "HKLEDGER" little endian */
#define HK_LEDGER_VERSION 2u                    /* bumped on every incompatible change (2: tagged usage counters) */

/* Return codes (0 or negative). */
#define HK_OK          0
#define HK_ENOMEM      (-1) /* quota exhausted: the shim returns its out-of-memory error */
#define HK_EFAILCLOSED (-2) /* bad config or ledger: the shim returns an error, see hk_error_message() */
#define HK_EINVAL      (-3) /* bad argument (device index out of range, NULL, ...) */
#define HK_ENODEV      (-4) /* device not part of the claim (UUID-keyed claim) */
#define HK_ENOENT      (-5) /* hk_track_free: pointer not tracked */
#define HK_EEXIST      (-6) /* hk_track_alloc: pointer already tracked */
#define HK_ENOSPC      (-7) /* no free process slot / tracking node */
#define HK_EIO         (-8) /* I/O or OS error (message says which) */

/* Human-readable name of a return code ("out of memory quota", ...). Never NULL. */
const char *hk_strerror(int code);

/* ------------------------------------------------------------------------------------------- */
/* Configuration                                                                                */

#define HK_CFG_MEM_SET        0x1u /* hk_config.flags[i]: a memory limit was given for index i */
#define HK_CFG_SM_SET         0x2u /* an SM limit was given for index i */
#define HK_CFG_UUID_SET       0x4u /* HOOKCORE_DEVICE_UUID_<i> was given */
#define HK_CFG_ELASTICITY_SET 0x8u /* HOOKCORE_COMPUTE_ELASTICITY_<i> was given (elasticity_milli[i] holds it) */

#define HK_PRIORITY_UNSET  0u /* hk_config.priority: not configured (normal where a board is) */
#define HK_PRIORITY_NORMAL 1u
#define HK_PRIORITY_HIGH   2u

#define HK_COMPUTE_SHARE  0u /* hk_config.compute_mode: share of device time */
#define HK_COMPUTE_STRICT 1u /* share of full-load throughput */

#define HK_ORIGIN_NONE 0u /* hk_config.origin: no configuration (dormant) */
#define HK_ORIGIN_ENV  1u /* from the environment */
#define HK_ORIGIN_FILE 2u /* from the config file */

typedef struct hk_config {
    uint32_t origin;                           /* HK_ORIGIN_* */
    uint32_t device_count;                     /* 1 + highest index named by a _<i> variable; 0 = defaults only */
    uint32_t uuid_keyed;                       /* 1 if any HOOKCORE_DEVICE_UUID_<i> is set */
    uint64_t mem_limit[HK_MAX_DEVICES];        /* bytes, or HK_MEM_UNLIMITED */
    uint32_t sm_limit[HK_MAX_DEVICES];         /* percent 1..100 (100 = unlimited) */
    uint32_t flags[HK_MAX_DEVICES];            /* HK_CFG_* */
    uint32_t compute_mode[HK_MAX_DEVICES];     /* HK_COMPUTE_* */
    uint32_t ref_mhz[HK_MAX_DEVICES];          /* strict: full-load clock in MHz, 0 = not given */
    uint32_t elasticity_milli[HK_MAX_DEVICES]; /* strict: the clock elasticity charged (held), x1000
                                                  (0..1000), read only where flags has HK_CFG_ELASTICITY_SET */
    char uuid[HK_MAX_DEVICES][HK_UUID_MAX];    /* "" when not given */
    uint64_t ctx_bytes[HK_MAX_DEVICES];        /* device memory charged per context (0 = none) */
    uint32_t device_sms[HK_MAX_DEVICES];       /* the device's SM count as the daemon read it, 0 = not given */
    char ledger_path[HK_PATH_MAX];             /* "" when no ledger is needed (no limit set, no path) */
    uint32_t priority[HK_MAX_DEVICES];         /* HK_PRIORITY_* */
    char board_dir[HK_PATH_MAX];               /* HOOKCORE_PRIORITY_BOARD; "" = no priorities */
} hk_config;

/* A legacy environment name and the neutral key it stands for (prefix mapping, see above). */
typedef struct hk_env_alias {
    const char *name; /* e.g. "OLD_SM_LIMIT" */
    const char *key;  /* e.g. "HOOKCORE_COMPUTE_LIMIT" */
} hk_env_alias;

/* What to parse. With file_text set the environment is not looked at. */
typedef struct hk_config_source {
    const char *const *envp;     /* NULL-terminated "NAME=VALUE" strings; NULL = empty */
    const hk_env_alias *aliases; /* environment only; ends with {NULL, NULL}; NULL = none */
    const char *file_text;       /* the config file's contents (NUL-terminated); NULL = no file */
    const char *file_path;       /* for messages; its directory holds the default ledger */
    const char *stem;            /* library stem for the default ledger name; NULL = none */
} hk_config_source;

/* Parse a configuration. Pure: touches no global state, reads no file. On error returns
   HK_EFAILCLOSED and writes a one-line message into err (if errlen > 0); *out is then zeroed. */
int hk_config_parse_source(const hk_config_source *src, hk_config *out, char *err, size_t errlen);

/* hk_config_parse_source with an environment only (neutral keys, no aliases). */
int hk_config_parse(const char *const *envp, hk_config *out, char *err, size_t errlen);

/* hk_config_parse(environ, ...). */
int hk_config_from_environ(hk_config *out, char *err, size_t errlen);

/* The config file of library stem `stem`: HK_CONFIG_ROOT/<stem>/config. HK_OK, or HK_EINVAL for
   a stem outside [a-z0-9_-]{1,32} or a path longer than n. */
int hk_config_file_path(const char *stem, char *out, size_t n);

/* Read a config file into a NUL-terminated heap buffer (*text, free() it). HK_OK; HK_ENOENT when
   it does not exist (nor its directory); HK_EFAILCLOSED with a message when it exists but cannot
   be read, is not a regular file, holds a NUL byte or exceeds HK_CONFIG_MAX. */
int hk_config_read_file(const char *path, char **text, char *err, size_t errlen);

/* Parse one memory quantity / SM percentage (the building blocks above; exposed for tests).
   `name` is used in the message only. Return HK_OK or HK_EFAILCLOSED. */
int hk_parse_mem(const char *name, const char *value, uint64_t *bytes, char *err, size_t errlen);
int hk_parse_sm(const char *name, const char *value, uint32_t *percent, char *err, size_t errlen);

/* 1 if two UUID strings name the same device (case-insensitive, optional device-kind word). */
int hk_uuid_equal(const char *a, const char *b);

/* ------------------------------------------------------------------------------------------- */
/* Process-wide API used by the shim                                                            */

/* How a hook library identifies itself to the core. */
typedef struct hk_options {
    const char *stem;            /* "vgpu" for libvgpu.so: picks the config file; NULL = none */
    const hk_env_alias *aliases; /* the shim's legacy environment names; NULL = none */
} hk_options;

/* The legacy environment names of hook library `stem`: its shims' env_aliases.def in SHIMS_<stem>
   order, or NULL when it has none. Not the core's: the Makefile generates it for every library it
   builds (build/gen/env_aliases.c), for callers outside a hook library (the Python wrapper) that
   parse a configuration as library `stem` will. */
const hk_env_alias *hk_env_aliases_for(const char *stem);

/* Initialise once (config file or environment, ledger, process slot). The first call decides
   (later options are ignored); idempotent and thread safe; cheap after the first call. Waits at
   most 10 s for the ledger's creation lock (held for microseconds by each opener). Returns HK_OK
   (also when dormant) or HK_EFAILCLOSED (message in hk_error_message(), also printed once to
   stderr as "hookcore: ..."). hk_init() is hk_init_with(NULL). */
int hk_init_with(const hk_options *opts);
int hk_init(void);

/* 1 when there is no configuration at all (no config file, no key in the environment): the core
   admits everything without accounting and the shim should pass every call straight on. */
int hk_dormant(void);

/* Where the configuration came from: HK_ORIGIN_*. */
uint32_t hk_config_origin(void);

/* HK_OK, or HK_EFAILCLOSED when the library refuses to admit anything. Calls hk_init(). */
int hk_status(void);

/* The fail-closed reason (one line), or "" when the status is HK_OK. Never NULL. */
const char *hk_error_message(void);

/* Map a device to its ledger index. UUID-keyed claim: the index whose HOOKCORE_DEVICE_UUID_<i>
   equals `uuid` (the ordinal is ignored), HK_ENODEV if none. Otherwise: `ordinal` itself when
   0 <= ordinal < HK_MAX_DEVICES (HAMi compatibility), else HK_ENODEV. */
int hk_device_resolve(int ordinal, const char *uuid);

/* Index for a UUID, or HK_ENODEV (also when the claim is not UUID-keyed). */
int hk_device_index_for_uuid(const char *uuid);

/* Quotas of ledger index `dev`: HK_MEM_UNLIMITED / HK_SM_UNLIMITED when the device has none or
   dev is out of range; 0 for both when the library failed closed (check hk_status() first). */
uint64_t hk_mem_limit(int dev);
uint32_t hk_sm_limit(int dev);

/* Compute mode of ledger index `dev` (1 = strict) and its configured full-load clock (MHz, 0 =
   not configured). 0 when dormant, failed closed or out of range. */
int hk_compute_strict(int dev);
uint32_t hk_compute_ref_mhz(int dev);

/* The clock elasticity a strict cap charges for ledger index `dev` (HOOKCORE_COMPUTE_ELASTICITY_<i>,
   x1000, core/elastic.h): the given value, held as given; else 1000 (the whole boost is charged:
   never less than without it) until the claim's own batches show another. 1000 when dormant, failed
   closed or out of range. hk_compute_elasticity_given says whether a value was given. */
uint32_t hk_compute_elasticity_milli(int dev);
int hk_compute_elasticity_given(int dev);

/* The SM count the claim's config gives ledger index `dev` (HOOKCORE_DEVICE_SMS_<i>, the daemon's
   reading of the device); 0 when not given, dormant, failed closed or out of range. */
uint32_t hk_device_sms(int dev);

/* The priority of ledger index `dev` (HK_PRIORITY_HIGH or _NORMAL) when the claim takes part in
   priorities (its config names the board directory), else HK_PRIORITY_UNSET; with it the path of the
   device's board in `path` (`n` bytes): <board dir>/<UUID>, or <board dir>/<index> without UUIDs. */
uint32_t hk_priority(int dev, char *path, size_t n);

/* Device memory charged per context on ledger index `dev` (HOOKCORE_CONTEXT_MEMORY_<i>); 0 when
   none, dormant or failed closed. */
uint64_t hk_context_bytes(int dev);

/* The UUID the claim gives ledger index `dev` ("" when none, dormant, failed closed). */
const char *hk_device_uuid(int dev);

/* Charge `bytes` to device `dev` before allocating. HK_OK, HK_ENOMEM (would exceed the quota),
   HK_EFAILCLOSED, HK_EINVAL. Devices without a quota always admit (usage is still counted).
   Lock free: one fetch_add plus one scan of the live slots' counters. */
int hk_mem_reserve(int dev, uint64_t bytes);

/* Give back a charge (allocation failed or freed). Saturates at 0, never underflows. */
void hk_mem_release(int dev, uint64_t bytes);

/* Claim-wide usage of `dev` (sum over live processes) / this process's usage. */
uint64_t hk_mem_used(int dev);
uint64_t hk_mem_used_self(int dev);

/* How often this process found its own slot of the ledger edited by someone else (and rewrote it
   from its own count). */
uint64_t hk_ledger_repairs(void);

/* Free the slots (and charges) of processes that died. Admission does this by itself when a
   reservation would fail, and every process does it once at start; call it before reporting
   usage after a long quiet period (e.g. in cuMemGetInfo). One fcntl per used slot; returns the
   number of slots freed. */
int hk_reclaim(void);

/* The compute limiter's shared area of device `dev`: HK_LIMITER_BYTES bytes, 64-byte aligned,
   in the ledger (so shared by every process of the claim), zero when the ledger is created.
   Layout: core/limiter.h (a version word at offset 0, lock-free atomics only).
   NULL when failed closed or dev is invalid. Stays valid for the process lifetime. */
void *hk_limiter_area(int dev);

/* ------------------------------------------------------------------------------------------- */
/* Allocation tracking (process-local): pointer -> (device, size), so frees know what to release.
   `kind` separates key spaces (device pointers vs VMM handles vs arrays ...), chosen by the shim.
   A short per-bucket spinlock; cleared in a forked child. */

#define HK_KIND_PTR   0u /* cuMemAlloc*, managed, pitch */
#define HK_KIND_VMM   1u /* cuMemCreate handle */
#define HK_KIND_ARRAY 3u /* CUarray / mipmapped arrays */

int hk_track_alloc(uint64_t key, uint32_t kind, int dev, uint64_t size);    /* HK_OK/HK_EEXIST/HK_ENOSPC */
int hk_track_free(uint64_t key, uint32_t kind, int *dev, uint64_t *size);   /* HK_OK/HK_ENOENT; removes */
int hk_track_lookup(uint64_t key, uint32_t kind, int *dev, uint64_t *size); /* HK_OK/HK_ENOENT; keeps */
/* The same as hk_track_alloc, for an allocation that dies with `owner` (a context: nonzero). */
int hk_track_alloc_owned(uint64_t key, uint32_t kind, int dev, uint64_t size, uint64_t owner);
/* `owner` went (its allocations with it): forget every entry of `kind` it owned, calling `each`
   with its device and size (outside the table's locks). Returns how many. */
unsigned hk_track_drop_owner(uint64_t owner, uint32_t kind, void (*each)(int dev, uint64_t size));

/* ------------------------------------------------------------------------------------------- */
/* Ledger handles (used by the Python wrapper, tests and metrics; independent of hk_init)       */

typedef struct hk_ledger hk_ledger;

#define HK_OPEN_READONLY 0x1u /* map read only; no slot; cfg may be NULL */
#define HK_OPEN_NOCLAIM  0x2u /* read-write, validate/create, but do not claim a slot */

/* Open (and, read-write, create or validate against cfg) a ledger file; read-write opens claim a
   process slot unless HK_OPEN_NOCLAIM. Returns HK_OK or HK_EFAILCLOSED/HK_EIO/HK_ENOSPC with a
   message in err. path NULL: a private in-memory ledger (single process, for tests). */
int hk_ledger_open(const char *path, const hk_config *cfg, unsigned flags, hk_ledger **out, char *err, size_t errlen);
void hk_ledger_close(hk_ledger *l); /* releases the slot lock (the slot is reclaimed lazily) */

/* Read a ledger the caller must not trust (the node daemon reading a tenant-writable file): the
   path's last component is never followed (O_PATH|O_NOFOLLOW: a symlink is looked at, refused), nothing but a regular file of
   exactly the ledger's size is opened at all (a FIFO, device, directory, or a file grown or
   shrunk is refused without being opened for reading: it is looked at through an O_PATH
   descriptor first), and its bytes are copied into private memory with pread, so a file that
   shrinks later cannot fault the reader (no mapping). The handle answers hk_ledger_device /
   _process / _limiter_area from that copy; liveness is still asked of the file's slot locks.
   Blocking: one open, fstat, pread of 268 KiB; no lock is waited for. HK_OK or HK_EFAILCLOSED /
   HK_EIO with a message. */
int hk_ledger_open_snapshot(const char *path, hk_ledger **out, char *err, size_t errlen);

int hk_ledger_reserve(hk_ledger *l, int dev, uint64_t bytes);  /* as hk_mem_reserve */
void hk_ledger_release(hk_ledger *l, int dev, uint64_t bytes); /* as hk_mem_release */
uint64_t hk_ledger_used(const hk_ledger *l, int dev);          /* claim-wide */
int hk_ledger_slot_index(const hk_ledger *l);                  /* my slot, or -1 */
int hk_ledger_reclaim(hk_ledger *l); /* free slots of dead processes; returns how many (or <0) */

typedef struct hk_device_info {
    char uuid[HK_UUID_MAX];
    uint64_t mem_limit;      /* HK_MEM_UNLIMITED when none */
    uint32_t sm_limit;       /* 1..100 */
    uint32_t live_processes; /* live slots with used > 0 on this device */
    uint64_t used;           /* sum over live slots */
    uint64_t peak;           /* highest admitted claim-wide usage seen */
} hk_device_info;

#define HK_SLOT_FREE     0u
#define HK_SLOT_CLAIMING 1u /* a process is taking the slot (or died doing so) */
#define HK_SLOT_LIVE     2u /* owner holds the slot lock */
#define HK_SLOT_DEAD     3u /* marked live but nobody holds the lock: reclaimable */

typedef struct hk_process_info {
    uint32_t state;                /* HK_SLOT_* (liveness checked with the slot lock) */
    int32_t pid;                   /* in the owner's PID namespace */
    uint64_t start_time;           /* /proc/<pid>/stat field 22, clock ticks since boot */
    uint64_t nonce;                /* random per claim */
    uint64_t used[HK_MAX_DEVICES]; /* bytes charged per device */
} hk_process_info;

uint32_t hk_ledger_device_count(const hk_ledger *l); /* header's device count (0 = defaults only) */
uint32_t hk_ledger_slot_hwm(const hk_ledger *l);     /* slots ever used: scan [0, hwm) */
uint32_t hk_ledger_version(const hk_ledger *l);
int hk_ledger_device(const hk_ledger *l, int dev, hk_device_info *out);    /* HK_OK/HK_EINVAL */
int hk_ledger_process(const hk_ledger *l, int slot, hk_process_info *out); /* HK_OK/HK_EINVAL */
void *hk_ledger_limiter_area(hk_ledger *l, int dev);

/* The process start time of `pid` (field 22 of /proc/<pid>/stat), 0 if unknown. */
uint64_t hk_proc_start_time(int pid);

#ifdef __cplusplus
}
#endif
#endif /* HOOKCORE_H */
