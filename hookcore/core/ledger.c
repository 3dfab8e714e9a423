/* ledger.c -- the shared per-claim ledger: creation, validation, process slots (claim, fork,
 * reclaim). Admission (reserve/release) is in ledger_admit.c, read-only views in ledger_read.c.
 *
 * Invariants (see hookcore.h for the overview):
 *   - A slot's counters are written by its owner only (atomic add/sub), and by whoever holds the
 *     slot's OFD lock while the slot is not LIVE (claim zeroes them before publishing LIVE).
 *   - The owner word changes only under the slot's OFD lock. Live owners hold that lock for their
 *     lifetime, so "I could take the lock" == "the owner is dead" (the kernel drops OFD locks when
 *     the last descriptor of the open file description goes away, whatever killed the process).
 *   - Admission sums counters of LIVE slots below the high-water mark. Every operation on the
 *     counters, the owner words and the mark is seq_cst, so of two racing reservations the later
 *     fetch_add is ordered before the other's scan or sees it: both may fail, never both pass.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* ---------------------------------------------------------------------------------------------
   Small OS helpers                                                                             */

uint64_t hk__random64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    }
    return v;
}

uint64_t hk_proc_start_time(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (p == NULL) return 0;
    p++;
    for (int field = 3; field <= 22; field++) { /* field 3 follows ") " */
        while (*p == ' ') p++;
        if (*p == '\0') return 0;
        if (field == 22) return strtoull(p, NULL, 10);
        while (*p && *p != ' ') p++;
    }
    return 0;
}

/* Move a descriptor out of the low range, where applications that close "their" descriptors
   by number are most likely to hit it (closing ours would drop the slot lock). */
static int high_fd(int fd) {
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 512);
    if (hi < 0) return fd;
    close(fd);
    return hi;
}

/* OFD byte-range lock on one byte. cmd: F_OFD_SETLK / F_OFD_SETLKW / F_OFD_GETLK.
   Returns 0 on success; for GETLK, 1 if another description holds a conflicting lock. */
static int ofd_lock(int fd, int cmd, short type, off_t off) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = off;
    fl.l_len = 1;
    fl.l_pid = 0;
    int rc;
    do { rc = fcntl(fd, cmd, &fl); } while (rc < 0 && errno == EINTR);
    if (rc < 0) return -1;
    if (cmd == F_OFD_GETLK) return fl.l_type != F_UNLCK;
    return 0;
}

/* The creation lock (byte 0), held for microseconds by each opener. Bounded: a holder stopped
   or hung for hk__create_wait_ms makes the opener fail closed instead of hanging the application. */
long hk__create_wait_ms = 10000;
static int create_lock(int fd) {
    struct timespec start, now, nap = {0, 20000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (ofd_lock(fd, F_OFD_SETLK, F_WRLCK, 0) == 0) return 0;
        if (errno != EAGAIN && errno != EACCES) return -1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        /* in nanoseconds: splitting into ms per field rounds a negative nsec difference toward zero
       and gave up to 1 ms early */
        long long waited_ns = (long long)(now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec);
        if (waited_ns >= (long long)hk__create_wait_ms * 1000000LL) {
            errno = ETIMEDOUT;
            return -1;
        }
        nanosleep(&nap, NULL);
        if (nap.tv_nsec < 5000000) nap.tv_nsec *= 2;
    }
}

static off_t slot_lock_offset(int i) { return (off_t)HK_OFF_SLOTS + (off_t)i * (off_t)sizeof(hk__slot); }

/* 1 if slot i's owner is alive (someone else holds its lock), 0 if not, -1 on error. */
int hk__ledger_slot_alive(const hk_ledger *l, int i) {
    if (l->private_mem) return 1;
    if (i == l->my_index) return 1;
    if (l->fd < 0) return -1;
    return ofd_lock(l->fd, F_OFD_GETLK, F_WRLCK, slot_lock_offset(i));
}

/* ---------------------------------------------------------------------------------------------
   Open / create / validate                                                                     */

static void init_devices(hk_ledger *l, const hk_config *cfg) {
    l->hdr->device_count = cfg ? cfg->device_count : 0;
    l->hdr->uuid_keyed = cfg ? cfg->uuid_keyed : 0;
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
        hk__dev *d = &l->dev[i];
        memset(d->uuid, 0, sizeof d->uuid);
        if (cfg) memcpy(d->uuid, cfg->uuid[i], sizeof d->uuid);
        d->mem_limit = cfg ? cfg->mem_limit[i] : HK_MEM_UNLIMITED;
        d->sm_limit = cfg ? cfg->sm_limit[i] : HK_SM_UNLIMITED;
        d->flags = cfg ? cfg->flags[i] : 0;
        d->compute_mode = cfg ? cfg->compute_mode[i] : HK_COMPUTE_SHARE;
        d->ref_mhz = cfg ? cfg->ref_mhz[i] : 0;
        hk_atomic_store_relaxed(&d->xpeak, 0);
        memset(d->limiter, 0, sizeof d->limiter);
    }
}

static void init_header(hk_ledger *l, const hk_config *cfg) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(l->base, 0, l->size);
    hk__hdr *h = l->hdr;
    h->version = HK_LEDGER_VERSION;
    h->header_size = sizeof(hk__hdr);
    h->device_size = sizeof(hk__dev);
    h->slot_size = sizeof(hk__slot);
    h->max_devices = HK_MAX_DEVICES;
    h->max_slots = HK_MAX_SLOTS;
    h->file_size = HK_LEDGER_SIZE;
    h->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    h->epoch = hk__random64();
    init_devices(l, cfg);
    hk_atomic_store_release(&h->xmagic, HK_LEDGER_MAGIC);
}

int hk__ledger_check_header(const hk_ledger *l, char *err, size_t errlen) {
    const hk__hdr *h = l->hdr;
    uint64_t magic = hk_atomic_load_acquire(&h->xmagic);
    if (magic != HK_LEDGER_MAGIC) {
        hk__errf(err, errlen,
                 "%s is not a hookcore ledger (magic %#llx); remove it or point "
                 "HOOKCORE_LEDGER elsewhere",
                 l->path, (unsigned long long)magic);
        return HK_EFAILCLOSED;
    }
    if (h->version != HK_LEDGER_VERSION || h->header_size != sizeof(hk__hdr) || h->device_size != sizeof(hk__dev) ||
        h->slot_size != sizeof(hk__slot) || h->max_devices != HK_MAX_DEVICES || h->max_slots != HK_MAX_SLOTS ||
        h->file_size != HK_LEDGER_SIZE) {
        hk__errf(err, errlen,
                 "ledger %s has layout version %u (header %u, device %u, slot %u bytes); this "
                 "library uses version %u (%zu, %zu, %zu): all processes of a claim must use one hookcore build",
                 l->path, h->version, h->header_size, h->device_size, h->slot_size, HK_LEDGER_VERSION, sizeof(hk__hdr),
                 sizeof(hk__dev), sizeof(hk__slot));
        return HK_EFAILCLOSED;
    }
    return HK_OK;
}

static void fmt_limit(char *buf, size_t n, uint64_t v) {
    if (v == HK_MEM_UNLIMITED)
        snprintf(buf, n, "unlimited");
    else
        snprintf(buf, n, "%llu bytes", (unsigned long long)v);
}

/* First difference between the ledger's quotas and cfg, as a message; 0 if equal. */
static int config_differs(const hk_ledger *l, const hk_config *cfg, char *msg, size_t n) {
    if (l->hdr->uuid_keyed != cfg->uuid_keyed) {
        snprintf(msg, n, "UUID keying differs (ledger %u, environment %u)", l->hdr->uuid_keyed, cfg->uuid_keyed);
        return 1;
    }
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
        const hk__dev *d = &l->dev[i];
        char a[32], b[32];
        if (d->mem_limit != cfg->mem_limit[i]) {
            fmt_limit(a, sizeof a, d->mem_limit);
            fmt_limit(b, sizeof b, cfg->mem_limit[i]);
            snprintf(msg, n, "device %d memory quota differs (ledger %s, environment %s)", i, a, b);
            return 1;
        }
        if (d->sm_limit != cfg->sm_limit[i]) {
            snprintf(msg, n, "device %d SM limit differs (ledger %u%%, environment %u%%)", i, d->sm_limit,
                     cfg->sm_limit[i]);
            return 1;
        }
        if (d->compute_mode != cfg->compute_mode[i] || d->ref_mhz != cfg->ref_mhz[i]) {
            snprintf(msg, n, "device %d compute mode differs (ledger %s %u MHz, environment %s %u MHz)", i,
                     d->compute_mode == HK_COMPUTE_STRICT ? "strict" : "share", d->ref_mhz,
                     cfg->compute_mode[i] == HK_COMPUTE_STRICT ? "strict" : "share", cfg->ref_mhz[i]);
            return 1;
        }
        if (strncmp(d->uuid, cfg->uuid[i], HK_UUID_MAX) != 0) {
            snprintf(msg, n, "device %d UUID differs (ledger \"%.63s\", environment \"%.63s\")", i, d->uuid,
                     cfg->uuid[i]);
            return 1;
        }
    }
    return 0;
}

/* Number of slots whose owner is alive (other than mine). */
static int count_live(const hk_ledger *l) {
    int live = 0;
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    for (uint32_t i = 0; i < hwm && i < HK_MAX_SLOTS; i++) {
        uint64_t w = hk_atomic_load_seq_cst(&l->slots[i].xowner);
        if (HK_OWNER_STATE(w) == HK_SLOT_FREE || (int)i == l->my_index) continue;
        if (hk__ledger_slot_alive(l, (int)i) != 0) live++;
    }
    return live;
}

static int map_file(hk_ledger *l, int prot, char *err, size_t errlen) {
    void *p = mmap(NULL, HK_LEDGER_SIZE, prot, MAP_SHARED, l->fd, 0);
    if (p == MAP_FAILED) {
        hk__errf(err, errlen, "cannot map ledger %s: %s", l->path, strerror(errno));
        return HK_EIO;
    }
    l->base = p;
    l->size = HK_LEDGER_SIZE;
    l->hdr = (hk__hdr *)l->base;
    l->dev = (hk__dev *)(l->base + HK_OFF_DEVICES);
    l->slots = (hk__slot *)(l->base + HK_OFF_SLOTS);
    return HK_OK;
}

/* The quotas this handle enforces: the caller's config (never re-read from the file); without a
   config (tests, tools), what the file says at open. */
void hk__ledger_set_limits(hk_ledger *l, const hk_config *cfg) {
    for (int i = 0; i < HK_MAX_DEVICES; i++) {
        l->lim[i] = cfg ? cfg->mem_limit[i] : (l->dev[i].mem_limit ? l->dev[i].mem_limit : HK_MEM_UNLIMITED);
        hk_atomic_store_relaxed(&l->xmine[i], 0);
    }
}

/* With the creation lock held: size the file, map it, create or validate it. */
static int open_locked(hk_ledger *l, const hk_config *cfg, char *err, size_t errlen) {
    struct stat st;
    if (fstat(l->fd, &st) < 0) {
        hk__errf(err, errlen, "cannot stat ledger %s: %s", l->path, strerror(errno));
        return HK_EIO;
    }
    l->st_dev = st.st_dev;
    l->st_ino = st.st_ino;
    if ((uint64_t)st.st_size != HK_LEDGER_SIZE) {
        uint64_t magic = 0;
        if (st.st_size >= 8 && pread(l->fd, &magic, sizeof magic, 0) == (ssize_t)sizeof magic && magic != 0) {
            hk__errf(err, errlen,
                     "ledger %s has size %lld, expected %u (magic %#llx): it was written by another "
                     "program or another hookcore version; remove it",
                     l->path, (long long)st.st_size, HK_LEDGER_SIZE, (unsigned long long)magic);
            return HK_EFAILCLOSED;
        }
        if (ftruncate(l->fd, HK_LEDGER_SIZE) < 0) { /* new file, or a creator died before the magic */
            hk__errf(err, errlen, "cannot size ledger %s: %s", l->path, strerror(errno));
            return HK_EIO;
        }
    }
    int rc = map_file(l, PROT_READ | PROT_WRITE, err, errlen);
    if (rc != HK_OK) return rc;
    hk__ledger_set_limits(l, cfg);
    if (hk_atomic_load_acquire(&l->hdr->xmagic) == 0) {
        init_header(l, cfg); /* nobody can be using it: every user holds the creation lock first */
        return HK_OK;
    }
    rc = hk__ledger_check_header(l, err, errlen);
    if (rc != HK_OK || cfg == NULL) return rc;
    char why[256];
    if (config_differs(l, cfg, why, sizeof why)) {
        int live = count_live(l);
        if (live > 0) {
            hk__errf(err, errlen,
                     "ledger %s is in use by %d process(es) with another configuration: %s; all "
                     "processes of a claim must share one configuration",
                     l->path, live, why);
            return HK_EFAILCLOSED;
        }
        hk_ledger_reclaim(l); /* stale file from an earlier run: adopt the new quotas */
        init_devices(l, cfg);
    }
    return HK_OK;
}

/* With the creation lock held: take a slot (lock it, zero it, publish LIVE). */
int hk__ledger_claim_locked(hk_ledger *l, char *err, size_t errlen) {
    int pass;
    for (pass = 0; pass < 2; pass++) { /* pass 0: free slots; pass 1: dead owners */
        for (int i = 0; i < HK_MAX_SLOTS; i++) {
            hk__slot *s = &l->slots[i];
            uint64_t w = hk_atomic_load_seq_cst(&s->xowner);
            if ((HK_OWNER_STATE(w) == HK_SLOT_FREE) != (pass == 0)) continue;
            if (ofd_lock(l->fd, F_OFD_SETLK, F_WRLCK, slot_lock_offset(i)) != 0) {
                if (errno == EAGAIN || errno == EACCES) continue; /* alive owner or another claimer */
                hk__errf(err, errlen,
                         "cannot lock slot %d of ledger %s: %s (the filesystem must support "
                         "OFD locks)",
                         i, l->path, strerror(errno));
                return HK_EIO;
            }
            /* Slot i is ours: nobody alive holds it, nobody else can take it. */
            w = hk_atomic_load_seq_cst(&s->xowner);
            uint64_t gen = HK_OWNER_GEN(w) + 1;
            hk_atomic_store_seq_cst(&s->xowner, HK_OWNER_MAKE(gen, HK_SLOT_CLAIMING));
            for (int d = 0; d < HK_MAX_DEVICES; d++) hk_atomic_store_seq_cst(&s->xused[d], HK_USED_MAKE(gen, 0));
            s->pid = (int32_t)getpid();
            s->start_time = hk_proc_start_time(s->pid);
            s->nonce = hk__random64();
            uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
            while (hwm < (uint32_t)i + 1 && !hk_atomic_cas_weak_seq_cst(&l->hdr->xslot_hwm, &hwm, (uint32_t)i + 1)) {}
            hk_atomic_store_seq_cst(&s->xowner, HK_OWNER_MAKE(gen, HK_SLOT_LIVE));
            l->me = s;
            l->my_index = i;
            l->my_owner = HK_OWNER_MAKE(gen, HK_SLOT_LIVE);
            return HK_OK;
        }
    }
    hk__errf(err, errlen, "ledger %s has no free process slot (%d live processes)", l->path, HK_MAX_SLOTS);
    return HK_ENOSPC;
}

static int open_private(const hk_config *cfg, hk_ledger *l, char *err, size_t errlen) {
    void *p = mmap(NULL, HK_LEDGER_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        hk__errf(err, errlen, "cannot allocate a private ledger: %s", strerror(errno));
        return HK_EIO;
    }
    l->private_mem = 1;
    l->base = p;
    l->size = HK_LEDGER_SIZE;
    l->hdr = (hk__hdr *)l->base;
    l->dev = (hk__dev *)(l->base + HK_OFF_DEVICES);
    l->slots = (hk__slot *)(l->base + HK_OFF_SLOTS);
    snprintf(l->path, sizeof l->path, "(private)");
    init_header(l, cfg);
    hk__ledger_set_limits(l, cfg);
    hk__slot *s = &l->slots[0];
    for (int d = 0; d < HK_MAX_DEVICES; d++) hk_atomic_store_relaxed(&s->xused[d], HK_USED_MAKE(1, 0));
    s->pid = (int32_t)getpid();
    s->start_time = hk_proc_start_time(s->pid);
    s->nonce = hk__random64();
    hk_atomic_store_seq_cst(&l->hdr->xslot_hwm, 1);
    hk_atomic_store_seq_cst(&s->xowner, HK_OWNER_MAKE(1, HK_SLOT_LIVE));
    l->me = s;
    l->my_index = 0;
    l->my_owner = HK_OWNER_MAKE(1, HK_SLOT_LIVE);
    return HK_OK;
}

int hk_ledger_open(const char *path, const hk_config *cfg, unsigned flags, hk_ledger **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (out == NULL) {
        hk__errf(err, errlen, "hk_ledger_open: NULL out");
        return HK_EINVAL;
    }
    *out = NULL;
    hk_ledger *l = calloc(1, sizeof *l);
    if (l == NULL) {
        hk__errf(err, errlen, "out of host memory");
        return HK_EIO;
    }
    l->fd = -1;
    l->my_index = -1;
    l->flags = flags;
    int rc;
    if (path == NULL || *path == '\0') {
        rc = open_private(cfg, l, err, errlen);
        if (rc != HK_OK) {
            free(l);
            return rc;
        }
        *out = l;
        return HK_OK;
    }
    if (strlen(path) >= sizeof l->path) {
        hk__errf(err, errlen, "ledger path too long");
        free(l);
        return HK_EINVAL;
    }
    snprintf(l->path, sizeof l->path, "%s", path);
    if (flags & HK_OPEN_READONLY) {
        struct stat st;
        l->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (l->fd < 0) {
            hk__errf(err, errlen, "cannot open ledger %s: %s", path, strerror(errno));
            free(l);
            return HK_EIO;
        }
        if (fstat(l->fd, &st) < 0 || (uint64_t)st.st_size != HK_LEDGER_SIZE) {
            hk__errf(err, errlen, "%s is not a hookcore ledger of version %u (size %lld, expected %u)", path,
                     HK_LEDGER_VERSION, (long long)st.st_size, HK_LEDGER_SIZE);
            close(l->fd);
            free(l);
            return HK_EFAILCLOSED;
        }
        rc = map_file(l, PROT_READ, err, errlen);
        if (rc == HK_OK) rc = hk__ledger_check_header(l, err, errlen);
        if (rc == HK_OK) hk__ledger_set_limits(l, NULL);
        if (rc != HK_OK) {
            hk_ledger_close(l);
            return rc;
        }
        *out = l;
        return HK_OK;
    }
    l->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
    if (l->fd < 0) {
        hk__errf(err, errlen, "cannot open ledger %s: %s", path, strerror(errno));
        free(l);
        return HK_EIO;
    }
    l->fd = high_fd(l->fd);
    if (create_lock(l->fd) != 0) {
        hk__errf(err, errlen,
                 "cannot lock ledger %s: %s (another process holds its creation lock, or the "
                 "filesystem lacks OFD locks)",
                 path, strerror(errno));
        close(l->fd);
        free(l);
        return HK_EIO;
    }
    rc = open_locked(l, cfg, err, errlen);
    if (rc == HK_OK && !(flags & HK_OPEN_NOCLAIM)) rc = hk__ledger_claim_locked(l, err, errlen);
    ofd_lock(l->fd, F_OFD_SETLK, F_UNLCK, 0);
    if (rc == HK_OK) hk_ledger_reclaim(l); /* drop charges of dead processes before anyone reads usage */
    if (rc != HK_OK) {
        hk_ledger_close(l);
        return rc;
    }
    *out = l;
    return HK_OK;
}

void hk_ledger_close(hk_ledger *l) {
    if (l == NULL) return;
    if (l->snapshot) {
        free(l->base);
        if (l->fd >= 0) close(l->fd);
        free(l);
        return;
    }
    if (l->me != NULL && !l->private_mem && l->fd >= 0) {
        /* Still holding the slot lock: hand the slot back (a kill here just leaves it for reclaim). */
        uint64_t w = hk_atomic_load_seq_cst(&l->me->xowner);
        for (int d = 0; d < HK_MAX_DEVICES; d++)
            hk_atomic_store_seq_cst(&l->me->xused[d], HK_USED_MAKE(HK_OWNER_GEN(w), 0));
        hk_atomic_store_seq_cst(&l->me->xowner, HK_OWNER_MAKE(HK_OWNER_GEN(w), HK_SLOT_FREE));
    }
    if (l->base != NULL) munmap(l->base, l->size);
    if (l->fd >= 0) close(l->fd); /* drops the slot lock */
    free(l);
}

/* After fork, in the child. The inherited descriptor AND mapping both reference the parent's
   open file description, which owns the parent's slot lock: as long as the child keeps either,
   a dead parent would look alive. So the child opens the file again, maps it again at the same
   address (MAP_FIXED: every pointer stays valid) and closes the inherited descriptor. Its own
   slot is claimed lazily (hk__ledger_reattach) on first use. Only async-signal-safe calls here. */
void hk__ledger_atfork_child(hk_ledger *l) {
    if (l == NULL) return;
    for (int d = 0; d < HK_MAX_DEVICES; d++) hk_atomic_store_relaxed(&l->xmine[d], 0); /* nothing of mine yet */
    if (l->private_mem) { /* the child has its own copy: start it from zero */
        if (l->me == NULL) return;
        for (int d = 0; d < HK_MAX_DEVICES; d++)
            hk_atomic_store_relaxed(&l->me->xused[d], HK_USED_MAKE(HK_OWNER_GEN(l->my_owner), 0));
        l->me->pid = (int32_t)getpid();
        return;
    }
    int old = l->fd;
    l->fd = -1;
    l->me = NULL;
    l->my_index = -1;
    l->my_owner = 0;
    int fd = open(l->path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == l->st_dev && st.st_ino == l->st_ino &&
        mmap(l->base, l->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) {
        l->fd = high_fd(fd);
    } else {
        if (fd >= 0) close(fd);
        l->lost = 1; /* cannot detach from the parent's description: this child fails closed */
    }
    if (old >= 0) close(old);
}

int hk__ledger_reattach(hk_ledger *l, char *err, size_t errlen) {
    if (l->private_mem) return HK_OK;
    if (l->fd < 0 || l->lost) {
        hk__errf(err, errlen, "cannot reopen ledger %s in this forked process", l->path);
        return HK_EFAILCLOSED;
    }
    if (create_lock(l->fd) != 0) {
        hk__errf(err, errlen, "cannot lock ledger %s: %s", l->path, strerror(errno));
        return HK_EIO;
    }
    int rc = hk__ledger_claim_locked(l, err, errlen);
    ofd_lock(l->fd, F_OFD_SETLK, F_UNLCK, 0);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
   Dead owners: a slot whose lock is free is freed, its charges stop counting                   */

int hk_ledger_reclaim(hk_ledger *l) {
    if (l == NULL || l->private_mem || l->fd < 0 || (l->flags & HK_OPEN_READONLY)) return 0;
    int freed = 0;
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    for (uint32_t i = 0; i < hwm && i < HK_MAX_SLOTS; i++) {
        hk__slot *s = &l->slots[i];
        if ((int)i == l->my_index) continue;
        if (HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) == HK_SLOT_FREE) continue;
        if (ofd_lock(l->fd, F_OFD_SETLK, F_WRLCK, slot_lock_offset((int)i)) != 0) continue; /* alive */
        uint64_t w = hk_atomic_load_seq_cst(&s->xowner); /* stable now: we hold the lock */
        if (HK_OWNER_STATE(w) != HK_SLOT_FREE) {
            hk_atomic_store_seq_cst(&s->xowner, HK_OWNER_MAKE(HK_OWNER_GEN(w), HK_SLOT_FREE));
            for (int d = 0; d < HK_MAX_DEVICES; d++)
                hk_atomic_store_seq_cst(&s->xused[d], HK_USED_MAKE(HK_OWNER_GEN(w), 0));
            freed++;
        }
        ofd_lock(l->fd, F_OFD_SETLK, F_UNLCK, slot_lock_offset((int)i));
    }
    return freed;
}
