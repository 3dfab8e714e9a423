/* internal.h -- declarations shared by the core's .c files (hidden, `hk__` prefix). */
#ifndef HOOKCORE_INTERNAL_H
#define HOOKCORE_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "atomic.h"
#include "hookcore.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "hookcore needs lock-free 64-bit atomics");

#define hk_likely(x)   __builtin_expect(!!(x), 1)
#define hk_unlikely(x) __builtin_expect(!!(x), 0)
#define HK_CACHE_LINE  64

/* --- file layout (HK_LEDGER_VERSION 2) -------------------------------------------------------
   [0, 4096)            hk__hdr (256 bytes used), OFD lock on byte 0 = creation lock
   [4096, 12288)        hk__dev[16], 512 bytes each
   [12288, 274432)      hk__slot[1024], 256 bytes each; OFD lock on a slot's first byte =
                        "this slot's owner is alive"                                            */
#define HK_OFF_DEVICES 4096u
#define HK_OFF_SLOTS   12288u
#define HK_LEDGER_SIZE (HK_OFF_SLOTS + HK_MAX_SLOTS * 256u)

typedef struct hk__hdr {
    _Atomic uint64_t xmagic;    /* HK_LEDGER_MAGIC, stored last (release) when created */
    uint32_t version;           /* HK_LEDGER_VERSION */
    uint32_t header_size;       /* sizeof(hk__hdr) */
    uint32_t device_size;       /* sizeof(hk__dev) */
    uint32_t slot_size;         /* sizeof(hk__slot) */
    uint32_t max_devices;       /* HK_MAX_DEVICES */
    uint32_t max_slots;         /* HK_MAX_SLOTS */
    uint64_t file_size;         /* HK_LEDGER_SIZE */
    uint32_t device_count;      /* hk_config.device_count */
    uint32_t uuid_keyed;        /* hk_config.uuid_keyed */
    uint64_t created_ns;        /* CLOCK_REALTIME at creation */
    uint64_t epoch;             /* random per creation */
    _Atomic uint32_t xslot_hwm; /* 1 + highest slot index ever claimed (only grows) */
    uint32_t _pad0;
    uint8_t reserved[184]; /* zero; future fields */
} hk__hdr;

typedef struct hk__dev {
    char uuid[HK_UUID_MAX]; /* "" when not UUID-keyed */
    uint64_t mem_limit;     /* bytes or HK_MEM_UNLIMITED */
    uint32_t sm_limit;      /* 1..100 */
    uint32_t flags;         /* HK_CFG_* */
    _Atomic uint64_t xpeak; /* highest admitted claim-wide usage (CAS-max) */
    uint32_t compute_mode;  /* HK_COMPUTE_* */
    uint32_t ref_mhz;       /* strict cap: full-load clock, MHz (0 = the shim's estimate) */
    uint8_t reserved[152];  /* zero; future fields */
    _Alignas(HK_CACHE_LINE) uint8_t limiter[HK_LIMITER_BYTES]; /* owned by the compute limiter */
} hk__dev;

/* Slot owner word: bits 0-1 state (HK_SLOT_FREE/CLAIMING/LIVE), bits 2-63 generation. Only the
   holder of the slot's OFD lock writes it; the hot path reads it to skip free slots. */
typedef struct hk__slot {
    _Atomic uint64_t xowner;
    int32_t pid; /* owner's pid in its own namespace (display only) */
    uint32_t _pad0;
    uint64_t start_time; /* /proc/<pid>/stat field 22 (display only) */
    uint64_t nonce;      /* random per claim */
    uint8_t reserved0[32];
    _Alignas(HK_CACHE_LINE) _Atomic uint64_t xused[HK_MAX_DEVICES]; /* HK_USED_*: owner tag + bytes */
    uint8_t reserved1[64];
} hk__slot;

_Static_assert(sizeof(hk__hdr) == 256, "header layout");
_Static_assert(sizeof(hk__dev) == 512, "device layout");
_Static_assert(sizeof(hk__slot) == 256, "slot layout");
_Static_assert(HK_OFF_DEVICES + HK_MAX_DEVICES * sizeof(hk__dev) == HK_OFF_SLOTS, "layout");

/* A usage counter carries the low 16 bits of its owner's generation above 48 bits of bytes, and
   is changed only by a CAS that finds the owner's tag: a process that lost its slot (its lock was
   taken because its descriptor was closed behind its back) can then never add to, or subtract
   from, the charges of the slot's next owner. Readers mask the tag off. */
#define HK_USED_BITS             48
#define HK_USED_MASK             ((UINT64_C(1) << HK_USED_BITS) - 1)
#define HK_USED_BYTES(v)         ((v) & HK_USED_MASK)
#define HK_USED_TAG(v)           ((v) >> HK_USED_BITS)
#define HK_USED_MAKE(gen, bytes) ((((uint64_t)(gen) & 0xffffu) << HK_USED_BITS) | ((bytes) & HK_USED_MASK))

#define HK_OWNER_STATE(w)      ((uint32_t)((w) & 3u))
#define HK_OWNER_GEN(w)        ((w) >> 2)
#define HK_OWNER_MAKE(gen, st) (((uint64_t)(gen) << 2) | (uint64_t)(st))

struct hk_ledger {
    int fd;          /* -1 for a private ledger or after fork */
    unsigned flags;  /* HK_OPEN_* */
    int private_mem; /* 1: anonymous memory, no file, no locks */
    int snapshot;    /* 1: a private copy read from the file (hk_ledger_open_snapshot) */
    int lost;        /* 1: my slot was taken from me (descriptor closed behind my back) */
    size_t size;
    unsigned char *base;
    hk__hdr *hdr;
    hk__dev *dev;
    hk__slot *slots;
    hk__slot *me; /* my slot, NULL if none */
    int my_index;
    uint64_t my_owner; /* owner word I published; anything else there = slot lost */
    /* Process-local truth, which no write to the shared file can change: the quotas admission
     enforces (from the process's own config at open), and what this process holds per device.
     Admission checks both "mine <= quota" and "others' slots + mine <= quota", and every reserve
     and release rewrites my slot from `xmine`, so a slot edited behind my back is repaired. */
    uint64_t lim[HK_MAX_DEVICES];
    _Atomic uint64_t xmine[HK_MAX_DEVICES];
    _Atomic uint64_t xrepairs;  /* times my slot was found edited by someone else and rewritten */
    _Atomic uint32_t xhwm_seen; /* highest slot high-water mark this handle has read: a mark
                                    lowered in the file cannot hide slots it already knows of */
    dev_t st_dev;
    ino_t st_ino;
    char path[HK_PATH_MAX];
};

/* message helpers (config_value.c) */
void hk__errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void hk__quote(char *dst, size_t dstlen, const char *value);
/* `name="value": why` (value quoted) into err; returns HK_EFAILCLOSED. */
int hk__reject(const char *name, const char *value, char *err, size_t errlen, const char *why);
static inline int hk__is_digit(char c) { return c >= '0' && c <= '9'; }

/* ledger.c */
extern long hk__create_wait_ms; /* bound on waiting for the creation lock (tests shorten it) */
int hk__ledger_claim_locked(hk_ledger *l, char *err, size_t errlen);
int hk__ledger_reattach(hk_ledger *l, char *err, size_t errlen); /* after fork: new fd + slot */
void hk__ledger_atfork_child(hk_ledger *l);
int hk__ledger_check_header(const hk_ledger *l, char *err, size_t errlen); /* magic and layout */
void hk__ledger_set_limits(hk_ledger *l, const hk_config *cfg);            /* the quotas this handle enforces */
int hk__ledger_slot_alive(const hk_ledger *l, int i);                      /* 1 alive, 0 dead, -1 cannot tell */
/* ledger_admit.c */
uint64_t hk__ledger_sum(const hk_ledger *l, int dev);
uint64_t hk__ledger_repairs(const hk_ledger *l);

/* track.c */
void hk__track_atfork_child(void);

/* misc */
uint64_t hk__random64(void);

#endif /* HOOKCORE_INTERNAL_H */
