/* hookcore.c -- the process-wide facade the shim calls: one config, one ledger, one slot.
 *
 * hk_init_with() runs once (pthread_once). It reads the library's config file (authoritative) or
 * else the environment. Its outcome is HK_OK (possibly dormant: no configuration at all), or the
 * fail-closed state, in which every reservation returns HK_EFAILCLOSED and hk_error_message() says
 * why (the message is also written once to stderr). The hot path (hk_mem_reserve) tests one flag
 * and one pointer before going to the ledger; a forked child finds its slot pointer NULL and
 * re-attaches.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static struct {
    pthread_once_t once;
    _Atomic int xready;  /* 1 once init_once() has finished */
    _Atomic int xstatus; /* HK_OK or HK_EFAILCLOSED; msg is written before FAILCLOSED is published */
    int dormant;         /* no configuration: admit everything, account nothing (set once) */
    char msg[HK_ERR_MAX];
    hk_config cfg;
    hk_ledger *led;
    pthread_mutex_t mu;      /* serialises re-attachment after fork and the lost-slot transition */
    pthread_mutex_t opts_mu; /* the first hk_init_with() decides the options */
    int opts_set;
    char stem[40];
    const hk_env_alias *aliases;
} g = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .opts_mu = PTHREAD_MUTEX_INITIALIZER};

static inline int status(void) { return hk_atomic_load_acquire(&g.xstatus); }

/* g.msg holds the reason; publish the state (release) so readers that see it see the message. */
static void fail_closed(void) {
    char line[HK_ERR_MAX + 96];
    int n = snprintf(line, sizeof line,
                     "hookcore: %s; device memory allocations and launches will fail (fail closed)\n", g.msg);
    hk_atomic_store_release(&g.xstatus, HK_EFAILCLOSED);
    if (n > 0) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)w;
    }
}

static void atfork_child(void) {
    pthread_mutex_init(&g.mu, NULL);
    hk__ledger_atfork_child(g.led);
    hk__track_atfork_child();
}

static const char *origin_name(uint32_t o) {
    return o == HK_ORIGIN_FILE ? "config file" : o == HK_ORIGIN_ENV ? "environment" : "no configuration";
}

/* HOOKCORE_LOG=debug: what this process will enforce, for bug reports (stderr). */
static void dump_config(const char *file) {
    char line[HK_ERR_MAX];
    int n;
    if (g.dormant) {
        n = snprintf(line, sizeof line,
                     "hookcore: %s: no configuration (%s absent, no key in the environment): "
                     "dormant\n",
                     g.stem[0] ? g.stem : "core", file[0] ? file : "no config file");
        if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) return;
        return;
    }
    n = snprintf(line, sizeof line,
                 "hookcore: %s: configured from the %s%s%s, ledger %s, slot %d, %s, %u "
                 "configured device(s)\n",
                 g.stem[0] ? g.stem : "core", origin_name(g.cfg.origin), g.cfg.origin == HK_ORIGIN_FILE ? " " : "",
                 g.cfg.origin == HK_ORIGIN_FILE ? file : "", g.led->path, g.led->my_index,
                 g.cfg.uuid_keyed ? "keyed by UUID" : "keyed by ordinal", g.cfg.device_count);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) return;
    for (uint32_t i = 0; i < g.cfg.device_count || (i == 0 && g.cfg.device_count == 0); i++) {
        n = snprintf(line, sizeof line, "hookcore: device %u%s%s: memory %llu bytes%s, compute %u%%%s\n", i,
                     g.cfg.uuid[i][0] ? " " : "", g.cfg.uuid[i], (unsigned long long)g.cfg.mem_limit[i],
                     g.cfg.mem_limit[i] == HK_MEM_UNLIMITED ? " (unlimited)" : "", g.cfg.sm_limit[i],
                     g.cfg.compute_mode[i] == HK_COMPUTE_STRICT ? " (strict cap)" : "");
        if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) return;
    }
}

extern char **environ;

/* The config file's path for this library ("" when no stem is known). */
static void config_file(char *path, size_t n) {
    path[0] = '\0';
    if (!g.stem[0]) return;
#ifdef HK_TESTING
    const char *root = getenv("HOOKCORE_TESTING_CONFIG_ROOT");
    if (root != NULL && root[0] == '/') {
        if (snprintf(path, n, "%s/%s/config", root, g.stem) >= (int)n) path[0] = '\0';
        return;
    }
#endif
    if (hk_config_file_path(g.stem, path, n) != HK_OK) path[0] = '\0';
}

/* No config file: fine only when the claim directory (the file's parent) is absent too. A claim
   directory that exists without its config means the config was removed or never mounted: fail
   closed rather than run unlimited (the environment cannot stand in for a claim's config). */
static int claim_dir_absent(const char *file) {
    char dir[HK_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir) return HK_OK;
    *slash = '\0';
    struct stat st;
    if (lstat(dir, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) return HK_OK;
    hk__errf(g.msg, sizeof g.msg,
             "claim directory %.200s exists but has no config file (%.200s): the claim "
             "cannot be enforced; the node daemon writes and mounts it, re-create the pod",
             dir, file);
    return HK_EFAILCLOSED;
}

static void init_once(void) {
    char file[HK_PATH_MAX];
    char *text = NULL;
    int rc = HK_OK;
    g.msg[0] = '\0';
    config_file(file, sizeof file);
    if (file[0]) {
        rc = hk_config_read_file(file, &text, g.msg, sizeof g.msg);
        if (rc == HK_ENOENT) rc = claim_dir_absent(file);
    }
    if (rc == HK_OK) {
        hk_config_source src = {.envp = (const char *const *)environ,
                                .aliases = g.aliases,
                                .file_text = text,
                                .file_path = file,
                                .stem = g.stem[0] ? g.stem : NULL};
        rc = hk_config_parse_source(&src, &g.cfg, g.msg, sizeof g.msg);
    }
    free(text);
    if (rc == HK_OK && g.cfg.origin == HK_ORIGIN_NONE) {
        g.dormant = 1;
    } else if (rc == HK_OK) {
        const char *path = g.cfg.ledger_path[0] ? g.cfg.ledger_path : NULL;
        rc = hk_ledger_open(path, &g.cfg, 0, &g.led, g.msg, sizeof g.msg);
    }
    if (rc != HK_OK)
        fail_closed();
    else if (!g.dormant)
        pthread_atfork(NULL, NULL, atfork_child);
    const char *log = getenv("HOOKCORE_LOG");
    if (rc == HK_OK && log != NULL && strcmp(log, "debug") == 0) dump_config(file);
    hk_atomic_store_release(&g.xready, 1);
}

int hk_init_with(const hk_options *opts) {
    if (!hk_atomic_load_acquire(&g.xready)) {
        pthread_mutex_lock(&g.opts_mu);
        if (!g.opts_set) {
            g.opts_set = 1;
            if (opts != NULL && opts->stem != NULL) snprintf(g.stem, sizeof g.stem, "%s", opts->stem);
            if (opts != NULL) g.aliases = opts->aliases;
        }
        pthread_mutex_unlock(&g.opts_mu);
    }
    pthread_once(&g.once, init_once);
    return status();
}

int hk_init(void) { return hk_init_with(NULL); }

static inline int ready(void) {
    if (hk_unlikely(!hk_atomic_load_acquire(&g.xready))) hk_init();
    return status();
}

int hk_dormant(void) {
    ready();
    return g.dormant;
}

uint32_t hk_config_origin(void) {
    ready();
    return g.cfg.origin;
}

int hk_status(void) { return ready(); }

const char *hk_error_message(void) { return ready() == HK_OK ? "" : g.msg; }

int hk_device_index_for_uuid(const char *uuid) {
    ready();
    if (!g.cfg.uuid_keyed || uuid == NULL) return HK_ENODEV;
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
        if ((g.cfg.flags[i] & HK_CFG_UUID_SET) && hk_uuid_equal(g.cfg.uuid[i], uuid)) return i;
    }
    return HK_ENODEV;
}

int hk_device_resolve(int ordinal, const char *uuid) {
    ready();
    if (g.cfg.uuid_keyed) return hk_device_index_for_uuid(uuid);
    return (ordinal >= 0 && ordinal < HK_MAX_DEVICES) ? ordinal : HK_ENODEV;
}

uint64_t hk_mem_limit(int dev) {
    if (ready() != HK_OK) return 0;
    if (g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return HK_MEM_UNLIMITED;
    return g.cfg.mem_limit[dev]; /* the process's own parsed config: never the writable ledger */
}

uint32_t hk_sm_limit(int dev) {
    if (ready() != HK_OK) return 0;
    if (g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return HK_SM_UNLIMITED;
    return g.cfg.sm_limit[dev];
}

int hk_compute_strict(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return g.cfg.compute_mode[dev] == HK_COMPUTE_STRICT;
}

uint32_t hk_compute_ref_mhz(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return g.cfg.ref_mhz[dev];
}

uint32_t hk_compute_elasticity_milli(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return 1000;
    if (!(g.cfg.flags[dev] & HK_CFG_ELASTICITY_SET) || g.cfg.elasticity_milli[dev] > 1000) return 1000;
    return g.cfg.elasticity_milli[dev];
}

int hk_compute_elasticity_given(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return (g.cfg.flags[dev] & HK_CFG_ELASTICITY_SET) && g.cfg.elasticity_milli[dev] <= 1000;
}

uint32_t hk_device_sms(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return g.cfg.device_sms[dev]; /* the process's own parsed config */
}

uint32_t hk_priority(int dev, char *path, size_t n) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES || !g.cfg.board_dir[0])
        return HK_PRIORITY_UNSET;
    int w = g.cfg.uuid[dev][0] ? snprintf(path, n, "%s/%s", g.cfg.board_dir, g.cfg.uuid[dev])
                               : snprintf(path, n, "%s/%d", g.cfg.board_dir, dev);
    if (w < 0 || (size_t)w >= n) return HK_PRIORITY_UNSET;
    return g.cfg.priority[dev] == HK_PRIORITY_HIGH ? HK_PRIORITY_HIGH : HK_PRIORITY_NORMAL; /* its own config */
}

uint64_t hk_context_bytes(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return g.cfg.ctx_bytes[dev];
}

const char *hk_device_uuid(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES) return "";
    return g.cfg.uuid[dev];
}

static __attribute__((noinline)) void lost_slot(void) {
    pthread_mutex_lock(&g.mu);
    if (status() == HK_OK) { /* readers look at msg only after seeing FAILCLOSED, published last */
        snprintf(g.msg, sizeof g.msg,
                 "lost the process slot of ledger %.300s; usage can no longer be "
                 "accounted",
                 g.led->path);
        fail_closed();
    }
    pthread_mutex_unlock(&g.mu);
}

/* A forked child: take a slot of its own (slow path, once per child). */
static __attribute__((noinline)) int reattach(void) {
    int rc = HK_OK;
    pthread_mutex_lock(&g.mu);
    if (status() == HK_OK && g.led->me == NULL) {
        char msg[HK_ERR_MAX];
        rc = hk__ledger_reattach(g.led, msg, sizeof msg);
        if (rc != HK_OK) {
            memcpy(g.msg, msg, sizeof g.msg);
            fail_closed();
        }
    }
    rc = status();
    pthread_mutex_unlock(&g.mu);
    return rc;
}

int hk_mem_reserve(int dev, uint64_t bytes) {
    if (hk_unlikely(ready() != HK_OK)) return HK_EFAILCLOSED;
    if (hk_unlikely(dev < 0 || dev >= HK_MAX_DEVICES)) return HK_EINVAL;
    if (hk_unlikely(g.dormant)) return HK_OK;
    if (hk_unlikely(g.led->me == NULL) && reattach() != HK_OK) return HK_EFAILCLOSED;
    int rc = hk_ledger_reserve(g.led, dev, bytes);
    if (hk_unlikely(rc == HK_EFAILCLOSED)) lost_slot();
    return rc;
}

void hk_mem_release(int dev, uint64_t bytes) {
    if (ready() != HK_OK || g.dormant) return;
    hk_ledger_release(g.led, dev, bytes); /* no slot (child before reattach): nothing to give back */
}

uint64_t hk_mem_used(int dev) {
    if (ready() != HK_OK || g.dormant) return 0;
    return hk_ledger_used(g.led, dev);
}

uint64_t hk_ledger_repairs(void) {
    if (ready() != HK_OK || g.dormant) return 0;
    return hk__ledger_repairs(g.led);
}

int hk_reclaim(void) {
    if (ready() != HK_OK || g.dormant) return 0;
    return hk_ledger_reclaim(g.led);
}

uint64_t hk_mem_used_self(int dev) {
    if (ready() != HK_OK || g.dormant || dev < 0 || dev >= HK_MAX_DEVICES || g.led->me == NULL) return 0;
    return hk_atomic_load_relaxed(&g.led->xmine[dev]); /* my own count, not the editable slot */
}

void *hk_limiter_area(int dev) {
    if (ready() != HK_OK || g.dormant) return NULL;
    return hk_ledger_limiter_area(g.led, dev);
}
