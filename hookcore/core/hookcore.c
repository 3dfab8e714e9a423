/* hookcore.c -- the process-wide facade the shim calls: one config, one ledger, one slot.
 *
 * hk_init() runs once (pthread_once). Its outcome is either HK_OK or the fail-closed state, in
 * which every reservation returns HK_EFAILCLOSED and hk_error_message() says why (the message is
 * also written once to stderr). The hot path (hk_mem_reserve) tests one flag and one pointer
 * before going to the ledger; a forked child finds its slot pointer NULL and re-attaches.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static struct {
  pthread_once_t once;
  _Atomic int xready;          /* 1 once init_once() has finished */
  int status;                  /* HK_OK or HK_EFAILCLOSED */
  char msg[HK_ERR_MAX];
  hk_config cfg;
  hk_ledger *led;
  pthread_mutex_t mu;          /* serialises re-attachment after fork */
} g = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void fail_closed(const char *what) {
  g.status = HK_EFAILCLOSED;
  char line[HK_ERR_MAX + 96];
  int n = snprintf(line, sizeof line, "hookcore: %s; GPU memory allocations will fail (fail closed)\n", what);
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

/* HOOKCORE_LOG=debug: what this process will enforce, for bug reports (stderr). */
static void dump_config(void) {
  char line[HK_ERR_MAX];
  int n = snprintf(line, sizeof line, "hookcore: ledger %s, slot %d, %s, %u configured device(s)\n",
                   g.led->path, g.led->my_index, g.cfg.uuid_keyed ? "keyed by UUID" : "keyed by ordinal",
                   g.cfg.device_count);
  if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) return;
  for (uint32_t i = 0; i < g.cfg.device_count || (i == 0 && g.cfg.device_count == 0); i++) {
    n = snprintf(line, sizeof line, "hookcore: device %u%s%s: memory %llu bytes%s, sm %u%%\n", i,
                 g.cfg.uuid[i][0] ? " " : "", g.cfg.uuid[i], (unsigned long long)g.cfg.mem_limit[i],
                 g.cfg.mem_limit[i] == HK_MEM_UNLIMITED ? " (unlimited)" : "", g.cfg.sm_limit[i]);
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) return;
  }
}

static void init_once(void) {
  g.status = HK_OK;
  g.msg[0] = '\0';
  if (hk_config_from_environ(&g.cfg, g.msg, sizeof g.msg) != HK_OK) {
    fail_closed(g.msg);
  } else {
    const char *path = g.cfg.ledger_path[0] ? g.cfg.ledger_path : NULL;
    if (hk_ledger_open(path, &g.cfg, 0, &g.led, g.msg, sizeof g.msg) != HK_OK) fail_closed(g.msg);
  }
  pthread_atfork(NULL, NULL, atfork_child);
  const char *log = getenv("HOOKCORE_LOG");
  if (g.status == HK_OK && log != NULL && strcmp(log, "debug") == 0) dump_config();
  atomic_store_explicit(&g.xready, 1, memory_order_release);
}

int hk_init(void) {
  pthread_once(&g.once, init_once);
  return g.status;
}

static inline int ready(void) {
  if (hk_unlikely(!atomic_load_explicit(&g.xready, memory_order_acquire))) hk_init();
  return g.status;
}

int hk_status(void) { return ready(); }

const char *hk_error_message(void) {
  ready();
  return g.status == HK_OK ? "" : g.msg;
}

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
  if (dev < 0 || dev >= HK_MAX_DEVICES) return HK_MEM_UNLIMITED;
  return g.led->dev[dev].mem_limit;
}

uint32_t hk_sm_limit(int dev) {
  if (ready() != HK_OK) return 0;
  if (dev < 0 || dev >= HK_MAX_DEVICES) return HK_SM_UNLIMITED;
  return g.led->dev[dev].sm_limit;
}

static __attribute__((noinline)) void lost_slot(void) {
  pthread_mutex_lock(&g.mu);
  if (g.status == HK_OK) {
    snprintf(g.msg, sizeof g.msg, "lost the process slot of ledger %.300s; usage can no longer be "
             "accounted", g.led->path);
    fail_closed(g.msg);
  }
  pthread_mutex_unlock(&g.mu);
}

/* A forked child: take a slot of its own (slow path, once per child). */
static __attribute__((noinline)) int reattach(void) {
  int rc = HK_OK;
  pthread_mutex_lock(&g.mu);
  if (g.status == HK_OK && g.led->me == NULL) {
    rc = hk__ledger_reattach(g.led, g.msg, sizeof g.msg);
    if (rc != HK_OK) fail_closed(g.msg);
  }
  rc = g.status;
  pthread_mutex_unlock(&g.mu);
  return rc;
}

int hk_mem_reserve(int dev, uint64_t bytes) {
  if (hk_unlikely(ready() != HK_OK)) return HK_EFAILCLOSED;
  if (hk_unlikely(dev < 0 || dev >= HK_MAX_DEVICES)) return HK_EINVAL;
  if (hk_unlikely(g.led->me == NULL) && reattach() != HK_OK) return HK_EFAILCLOSED;
  int rc = hk_ledger_reserve(g.led, dev, bytes);
  if (hk_unlikely(rc == HK_EFAILCLOSED)) lost_slot();
  return rc;
}

void hk_mem_release(int dev, uint64_t bytes) {
  if (ready() != HK_OK) return;
  hk_ledger_release(g.led, dev, bytes);   /* no slot (child before reattach): nothing to give back */
}

uint64_t hk_mem_used(int dev) {
  if (ready() != HK_OK) return 0;
  return hk_ledger_used(g.led, dev);
}

int hk_reclaim(void) {
  if (ready() != HK_OK) return 0;
  return hk_ledger_reclaim(g.led);
}

uint64_t hk_mem_used_self(int dev) {
  if (ready() != HK_OK || dev < 0 || dev >= HK_MAX_DEVICES || g.led->me == NULL) return 0;
  return atomic_load_explicit(&g.led->me->xused[dev], memory_order_relaxed);
}

void *hk_limiter_area(int dev) {
  if (ready() != HK_OK) return NULL;
  return hk_ledger_limiter_area(g.led, dev);
}
