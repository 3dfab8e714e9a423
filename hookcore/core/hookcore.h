/* hookcore.h -- the public API of the hookcore core (pure C, no vendor headers).
 *
 * The core owns three things the CUDA/NVML shim builds on:
 *   1. configuration: HAMi's env names plus Kubernetes quantities, parsed strictly; any bad value
 *      puts the library in the FAIL-CLOSED state (every reservation fails) instead of running
 *      unlimited;
 *   2. the ledger: one mmap'd file per claim (CUDA_DEVICE_MEMORY_SHARED_CACHE) holding per-device
 *      quotas and per-process usage counters, shared by every process of the claim;
 *   3. admission: hk_mem_reserve() charges the quota BEFORE the real allocation and is lock free;
 *      hk_mem_release() gives it back on failure or free.
 *
 * Naming: `hk_` is public; atomic fields carry an `x` prefix; the memory order of every atomic
 * operation is written out in the code. Return codes: HK_OK (0) or a negative HK_E* value.
 *
 * Threading: every function is thread safe. hk_init() is idempotent (pthread_once). Nothing here
 * calls exit(), installs signal handlers or changes umask; the only process-wide side effect is one
 * pthread_atfork() child handler (a forked child gets its own process slot and no inherited charge).
 *
 * ---------------------------------------------------------------------------------------------
 * Environment (read by hk_init / hk_config_from_environ; parsed by hk_config_parse)
 *
 *   CUDA_DEVICE_MEMORY_LIMIT        default memory quota of every device index
 *   CUDA_DEVICE_MEMORY_LIMIT_<i>    memory quota of device index i (0..HK_MAX_DEVICES-1)
 *   CUDA_DEVICE_SM_LIMIT            default compute share, percent
 *   CUDA_DEVICE_SM_LIMIT_<i>        compute share of device index i, percent
 *   CUDA_DEVICE_MEMORY_SHARED_CACHE ledger path (default HK_DEFAULT_LEDGER when a limit is set)
 *   HOOKCORE_DEVICE_UUID_<i>        physical GPU UUID of device index i ("GPU-xxxxxxxx-...")
 *   HOOKCORE_LOG=debug              hk_init also prints the parsed quotas and the ledger slot
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
 * SM limits: a decimal integer 1..100. 100 means "no compute limit". 0 is REJECTED (HAMi read 0
 *   as unlimited, a loophole): a claim that wants no limit leaves the variable unset or says 100.
 * Index suffixes: decimal 0..HK_MAX_DEVICES-1 without leading zeros; `CUDA_DEVICE_MEMORY_LIMIT_x`,
 *   `_01`, `_16` are rejected (a typo must not silently drop a quota).
 * UUIDs: 1..HK_UUID_MAX-1 characters of [A-Za-z0-9-_/:.]; duplicates rejected. When at least one
 *   HOOKCORE_DEVICE_UUID_<i> is set the claim is UUID-keyed: the shim maps every CUDA ordinal to its
 *   UUID and asks hk_device_resolve(); a GPU whose UUID is not listed is not part of the claim.
 *   Comparison ignores case and an optional "GPU-" prefix.
 * Unset memory limit = unlimited (HK_MEM_UNLIMITED); unset SM limit = 100.
 * Error messages are one line: `hookcore: CUDA_DEVICE_MEMORY_LIMIT_1="12x": unknown unit "x" ...`
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

/* Mark a symbol that libvgpu.so must export (interposers). Everything else is hidden. */
#define HK_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------------------------- */
/* Limits and constants                                                                         */

#define HK_MAX_DEVICES      16                  /* device indices 0..15 */
#define HK_MAX_SLOTS        1024                /* processes per ledger */
#define HK_UUID_MAX         64                  /* bytes incl. NUL */
#define HK_PATH_MAX         4096                /* ledger path bytes incl. NUL */
#define HK_ERR_MAX          512                 /* recommended error buffer size */
#define HK_LIMITER_BYTES    256                 /* per-device area reserved for the compute limiter */
#define HK_MEM_UNLIMITED    UINT64_MAX          /* mem limit of a device without a quota */
#define HK_MEM_MAX          ((uint64_t)1 << 62) /* largest accepted quota (4 EiB) */
#define HK_SM_UNLIMITED     100u                /* sm limit meaning "no compute limit" */
#define HK_DEFAULT_LEDGER   "/tmp/hookcore.ledger"

#define HK_LEDGER_MAGIC     0x52454744454c4b48ULL   /* "HKLEDGER" little endian */
#define HK_LEDGER_VERSION   1u                      /* bumped on every incompatible change */

/* Return codes (0 or negative). */
#define HK_OK               0
#define HK_ENOMEM           (-1)   /* quota exhausted: the shim returns CUDA_ERROR_OUT_OF_MEMORY */
#define HK_EFAILCLOSED      (-2)   /* bad config or ledger: the shim returns an error, see hk_error_message() */
#define HK_EINVAL           (-3)   /* bad argument (device index out of range, NULL, ...) */
#define HK_ENODEV           (-4)   /* device not part of the claim (UUID-keyed claim) */
#define HK_ENOENT           (-5)   /* hk_track_free: pointer not tracked */
#define HK_EEXIST           (-6)   /* hk_track_alloc: pointer already tracked */
#define HK_ENOSPC           (-7)   /* no free process slot / tracking node */
#define HK_EIO              (-8)   /* I/O or OS error (message says which) */

/* Human-readable name of a return code ("out of memory quota", ...). Never NULL. */
const char *hk_strerror(int code);

/* ------------------------------------------------------------------------------------------- */
/* Configuration                                                                                */

#define HK_CFG_MEM_SET      0x1u    /* hk_config.flags[i]: a memory limit was given for index i */
#define HK_CFG_SM_SET       0x2u    /* an SM limit was given for index i */
#define HK_CFG_UUID_SET     0x4u    /* HOOKCORE_DEVICE_UUID_<i> was given */

typedef struct hk_config {
  uint32_t device_count;                    /* 1 + highest index named by a _<i> variable; 0 = defaults only */
  uint32_t uuid_keyed;                      /* 1 if any HOOKCORE_DEVICE_UUID_<i> is set */
  uint64_t mem_limit[HK_MAX_DEVICES];       /* bytes, or HK_MEM_UNLIMITED */
  uint32_t sm_limit[HK_MAX_DEVICES];        /* percent 1..100 (100 = unlimited) */
  uint32_t flags[HK_MAX_DEVICES];           /* HK_CFG_* */
  char uuid[HK_MAX_DEVICES][HK_UUID_MAX];   /* "" when not given */
  char ledger_path[HK_PATH_MAX];            /* "" when no ledger is needed (no limit set, no path) */
} hk_config;

/* Parse an environ-style array (NULL-terminated "NAME=VALUE" strings; NULL envp = empty).
   Pure: touches no global state, allocates nothing. On error returns HK_EFAILCLOSED and writes a
   one-line message into err (if errlen > 0); *out is then zeroed. */
int hk_config_parse(const char *const *envp, hk_config *out, char *err, size_t errlen);

/* hk_config_parse(environ, ...). */
int hk_config_from_environ(hk_config *out, char *err, size_t errlen);

/* Parse one memory quantity / SM percentage (the building blocks above; exposed for tests).
   `name` is used in the message only. Return HK_OK or HK_EFAILCLOSED. */
int hk_parse_mem(const char *name, const char *value, uint64_t *bytes, char *err, size_t errlen);
int hk_parse_sm(const char *name, const char *value, uint32_t *percent, char *err, size_t errlen);

/* Format a raw 16-byte UUID (cuDeviceGetUuid) as "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void hk_uuid_format(const unsigned char raw[16], char out[HK_UUID_MAX]);

/* 1 if two UUID strings name the same device (case-insensitive, optional "GPU-" prefix). */
int hk_uuid_equal(const char *a, const char *b);

/* ------------------------------------------------------------------------------------------- */
/* Process-wide API used by the shim                                                            */

/* Initialise once (env, ledger, process slot). Idempotent and thread safe; cheap after the first
   call. Waits at most 10 s for the ledger's creation lock (held for microseconds by each opener). Returns HK_OK or HK_EFAILCLOSED (message in hk_error_message(), also printed once to
   stderr as "hookcore: ..."). */
int hk_init(void);

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

/* Charge `bytes` to device `dev` before allocating. HK_OK, HK_ENOMEM (would exceed the quota),
   HK_EFAILCLOSED, HK_EINVAL. Devices without a quota always admit (usage is still counted).
   Lock free: one fetch_add plus one scan of the live slots' counters. */
int hk_mem_reserve(int dev, uint64_t bytes);

/* Give back a charge (allocation failed or freed). Saturates at 0, never underflows. */
void hk_mem_release(int dev, uint64_t bytes);

/* Claim-wide usage of `dev` (sum over live processes) / this process's usage. */
uint64_t hk_mem_used(int dev);
uint64_t hk_mem_used_self(int dev);

/* Free the slots (and charges) of processes that died. Admission does this by itself when a
   reservation would fail, and every process does it once at start; call it before reporting
   usage after a long quiet period (e.g. in cuMemGetInfo). One fcntl per used slot; returns the
   number of slots freed. */
int hk_reclaim(void);

/* The compute limiter's shared area of device `dev`: HK_LIMITER_BYTES bytes, 64-byte aligned,
   in the ledger (so shared by every process of the claim), zero when the ledger is created.
   Layout is owned by the shim: put a version word at offset 0 and use only lock-free atomics.
   NULL when failed closed or dev is invalid. Stays valid for the process lifetime. */
void *hk_limiter_area(int dev);

/* ------------------------------------------------------------------------------------------- */
/* Allocation tracking (process-local): pointer -> (device, size), so frees know what to release.
   `kind` separates key spaces (device pointers vs VMM handles vs arrays ...), chosen by the shim.
   A short per-bucket spinlock; cleared in a forked child. */

#define HK_KIND_PTR     0u   /* cuMemAlloc*, managed, pitch */
#define HK_KIND_VMM     1u   /* cuMemCreate handle */
#define HK_KIND_ASYNC   2u   /* stream-ordered allocations */
#define HK_KIND_ARRAY   3u   /* CUarray / mipmapped arrays */

int hk_track_alloc(uint64_t key, uint32_t kind, int dev, uint64_t size);   /* HK_OK/HK_EEXIST/HK_ENOSPC */
int hk_track_free(uint64_t key, uint32_t kind, int *dev, uint64_t *size);  /* HK_OK/HK_ENOENT; removes */
int hk_track_lookup(uint64_t key, uint32_t kind, int *dev, uint64_t *size);/* HK_OK/HK_ENOENT; keeps */

/* ------------------------------------------------------------------------------------------- */
/* Ledger handles (used by the Python wrapper, tests and metrics; independent of hk_init)       */

typedef struct hk_ledger hk_ledger;

#define HK_OPEN_READONLY  0x1u   /* map read only; no slot; cfg may be NULL */
#define HK_OPEN_NOCLAIM   0x2u   /* read-write, validate/create, but do not claim a slot */

/* Open (and, read-write, create or validate against cfg) a ledger file; read-write opens claim a
   process slot unless HK_OPEN_NOCLAIM. Returns HK_OK or HK_EFAILCLOSED/HK_EIO/HK_ENOSPC with a
   message in err. path NULL: a private in-memory ledger (single process, for tests). */
int hk_ledger_open(const char *path, const hk_config *cfg, unsigned flags, hk_ledger **out,
                   char *err, size_t errlen);
void hk_ledger_close(hk_ledger *l);   /* releases the slot lock (the slot is reclaimed lazily) */

int hk_ledger_reserve(hk_ledger *l, int dev, uint64_t bytes);   /* as hk_mem_reserve */
void hk_ledger_release(hk_ledger *l, int dev, uint64_t bytes);  /* as hk_mem_release */
uint64_t hk_ledger_used(const hk_ledger *l, int dev);            /* claim-wide */
int hk_ledger_slot_index(const hk_ledger *l);                     /* my slot, or -1 */
int hk_ledger_reclaim(hk_ledger *l);  /* free slots of dead processes; returns how many (or <0) */

typedef struct hk_device_info {
  char uuid[HK_UUID_MAX];
  uint64_t mem_limit;        /* HK_MEM_UNLIMITED when none */
  uint32_t sm_limit;         /* 1..100 */
  uint32_t live_processes;   /* live slots with used > 0 on this device */
  uint64_t used;             /* sum over live slots */
  uint64_t peak;             /* highest admitted claim-wide usage seen */
} hk_device_info;

#define HK_SLOT_FREE      0u
#define HK_SLOT_CLAIMING  1u   /* a process is taking the slot (or died doing so) */
#define HK_SLOT_LIVE      2u   /* owner holds the slot lock */
#define HK_SLOT_DEAD      3u   /* marked live but nobody holds the lock: reclaimable */

typedef struct hk_process_info {
  uint32_t state;                    /* HK_SLOT_* (liveness checked with the slot lock) */
  int32_t pid;                       /* in the owner's PID namespace */
  uint64_t start_time;               /* /proc/<pid>/stat field 22, clock ticks since boot */
  uint64_t nonce;                    /* random per claim */
  uint64_t used[HK_MAX_DEVICES];     /* bytes charged per device */
} hk_process_info;

uint32_t hk_ledger_device_count(const hk_ledger *l);  /* header's device count (0 = defaults only) */
uint32_t hk_ledger_slot_hwm(const hk_ledger *l);      /* slots ever used: scan [0, hwm) */
uint32_t hk_ledger_version(const hk_ledger *l);
int hk_ledger_device(const hk_ledger *l, int dev, hk_device_info *out);        /* HK_OK/HK_EINVAL */
int hk_ledger_process(const hk_ledger *l, int slot, hk_process_info *out);     /* HK_OK/HK_EINVAL */
void *hk_ledger_limiter_area(hk_ledger *l, int dev);

/* The process start time of `pid` (field 22 of /proc/<pid>/stat), 0 if unknown. */
uint64_t hk_proc_start_time(int pid);

#ifdef __cplusplus
}
#endif
#endif /* HOOKCORE_H */
