/* ledger.c -- the shared per-claim ledger: creation, validation, process slots, admission.
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
#include <sched.h>
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
static int slot_alive(const hk_ledger *l, int i) {
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

static int check_header(const hk_ledger *l, char *err, size_t errlen) {
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
        if (slot_alive(l, (int)i) != 0) live++;
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
static void set_limits(hk_ledger *l, const hk_config *cfg) {
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
    set_limits(l, cfg);
    if (hk_atomic_load_acquire(&l->hdr->xmagic) == 0) {
        init_header(l, cfg); /* nobody can be using it: every user holds the creation lock first */
        return HK_OK;
    }
    rc = check_header(l, err, errlen);
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
    set_limits(l, cfg);
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
        if (rc == HK_OK) rc = check_header(l, err, errlen);
        if (rc == HK_OK) set_limits(l, NULL);
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

int hk_ledger_open_snapshot(const char *path, hk_ledger **out, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (out == NULL || path == NULL) {
        hk__errf(err, errlen, "hk_ledger_open_snapshot: NULL argument");
        return HK_EINVAL;
    }
    *out = NULL;
    if (strlen(path) >= HK_PATH_MAX) {
        hk__errf(err, errlen, "ledger path too long");
        return HK_EINVAL;
    }
    int pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0) {
        hk__errf(err, errlen, "cannot open ledger %s: %s", path, strerror(errno));
        return HK_EIO;
    }
    struct stat st;
    memset(&st, 0, sizeof st);
    if (fstat(pfd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != HK_LEDGER_SIZE) {
        hk__errf(err, errlen, "%s is not a hookcore ledger: %s (size %lld, expected a regular file of %u bytes)", path,
                 S_ISREG(st.st_mode)    ? "wrong size"
                 : S_ISDIR(st.st_mode)  ? "a directory"
                 : S_ISFIFO(st.st_mode) ? "a FIFO"
                 : S_ISLNK(st.st_mode)  ? "a symbolic link, not followed"
                                        : "not a regular file",
                 (long long)st.st_size, HK_LEDGER_SIZE);
        close(pfd);
        return HK_EFAILCLOSED;
    }
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
    int fd = open(self, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK); /* the same inode, now regular */
    close(pfd);
    if (fd < 0) {
        hk__errf(err, errlen, "cannot open ledger %s: %s", path, strerror(errno));
        return HK_EIO;
    }
    hk_ledger *l = calloc(1, sizeof *l);
    unsigned char *buf = malloc(HK_LEDGER_SIZE);
    if (l == NULL || buf == NULL) {
        free(l);
        free(buf);
        close(fd);
        hk__errf(err, errlen, "out of host memory");
        return HK_EIO;
    }
    size_t got = 0;
    while (got < HK_LEDGER_SIZE) {
        ssize_t r = pread(fd, buf + got, HK_LEDGER_SIZE - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got != HK_LEDGER_SIZE) {
        hk__errf(err, errlen, "ledger %s shrank while being read (%zu of %u bytes)", path, got, HK_LEDGER_SIZE);
        free(buf);
        free(l);
        close(fd);
        return HK_EFAILCLOSED;
    }
    l->fd = fd;
    l->my_index = -1;
    l->flags = HK_OPEN_READONLY;
    l->snapshot = 1;
    l->base = buf;
    l->size = HK_LEDGER_SIZE;
    l->hdr = (hk__hdr *)l->base;
    l->dev = (hk__dev *)(l->base + HK_OFF_DEVICES);
    l->slots = (hk__slot *)(l->base + HK_OFF_SLOTS);
    snprintf(l->path, sizeof l->path, "%s", path);
    int rc = check_header(l, err, errlen);
    if (rc != HK_OK) {
        hk_ledger_close(l);
        return rc;
    }
    set_limits(l, NULL);
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
   Admission                                                                                    */

uint64_t hk__ledger_sum(const hk_ledger *l, int dev) {
    uint64_t sum = 0;
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    if (hwm > HK_MAX_SLOTS) hwm = HK_MAX_SLOTS;
    for (uint32_t i = 0; i < hwm; i++) {
        hk__slot *s = &l->slots[i];
        if (HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) != HK_SLOT_LIVE) continue;
        uint64_t v = HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[dev]));
        sum = (sum + v < sum) ? UINT64_MAX : sum + v; /* saturate */
    }
    return sum;
}

static void peak_max(hk__dev *d, uint64_t v) {
    uint64_t p = hk_atomic_load_relaxed(&d->xpeak);
    while (p < v && !hk_atomic_cas_weak_relaxed(&d->xpeak, &p, v)) {}
}

static void backoff(int attempt) {
    if (attempt <= 1) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000L};
    nanosleep(&ts, NULL);
}

/* Change my own count (process memory) by `bytes`: add, or subtract saturating at 0. Returns the
   new value, or UINT64_MAX when an add would overflow the counter (nothing changed). */
static uint64_t change_mine(hk_ledger *l, int dev, uint64_t bytes, int sub) {
    uint64_t v = hk_atomic_load_seq_cst(&l->xmine[dev]), nv;
    do {
        if (sub)
            nv = v > bytes ? v - bytes : 0;
        else if (bytes > HK_USED_MASK - v)
            return UINT64_MAX;
        else
            nv = v + bytes;
    } while (!hk_atomic_cas_weak_seq_cst(&l->xmine[dev], &v, nv));
    return nv;
}

/* Write my own count into my slot, while the slot still carries my tag. The slot is only ever set
   from xmine (never incremented), so whatever was written there behind my back is replaced by the
   truth. Concurrent publishers converge: each re-reads xmine after the slot's current value, so the
   last successful CAS carries the newest count. Returns 0, or -1 when the slot is another owner's. */
static int publish_mine(hk_ledger *l, int dev, uint64_t expect_bytes) {
    _Atomic uint64_t *c = &l->me->xused[dev];
    uint64_t tag = HK_OWNER_GEN(l->my_owner) & 0xffffu;
    uint64_t v = hk_atomic_load_seq_cst(c), nv;
    int checked = 0;
    for (;;) {
        if (HK_USED_TAG(v) != tag) return -1;
        uint64_t mine = hk_atomic_load_seq_cst(&l->xmine[dev]);
        if (!checked) { /* my slot should hold my previous count: anything else was written by someone else */
            checked = 1;
            if (HK_USED_BYTES(v) != expect_bytes && HK_USED_BYTES(v) != mine) hk_atomic_add_relaxed(&l->xrepairs, 1);
        }
        nv = HK_USED_MAKE(tag, mine);
        if (v == nv || hk_atomic_cas_weak_seq_cst(c, &v, nv)) return 0;
    }
}

/* Change my count and publish it. Returns 0, or -1 when the count would overflow or my slot is
   another owner's now (then nothing is published). */
static int add_mine(hk_ledger *l, int dev, uint64_t bytes, int sub) {
    uint64_t before = hk_atomic_load_seq_cst(&l->xmine[dev]);
    uint64_t now = change_mine(l, dev, bytes, sub);
    if (now == UINT64_MAX) return -1;
    if (publish_mine(l, dev, before) != 0) {
        if (!sub) change_mine(l, dev, bytes, 1);
        return -1;
    }
    return 0;
}

/* My slot's owner word changed: someone took my slot's lock, i.e. this process closed (or an
   application closed for it) the ledger descriptor, or the word was overwritten. Charges can no
   longer be counted: stop, and touch the slot no more (its counters may already be another owner's). */
static __attribute__((noinline)) int slot_lost(hk_ledger *l) {
    l->me = NULL;
    l->my_index = -1;
    l->lost = 1;
    return HK_EFAILCLOSED;
}

static inline int owner_changed(const hk_ledger *l) {
    return hk_unlikely(hk_atomic_load_relaxed(&l->me->xowner) != l->my_owner);
}

/* Claim-wide usage as admission sees it: the other live slots as the file says, plus my own count
   from process memory (my slot in the file may have been edited; my count cannot be). */
static uint64_t admitted_sum(hk_ledger *l, int dev) {
    uint64_t sum = hk_atomic_load_seq_cst(&l->xmine[dev]);
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    uint32_t mine = (uint32_t)l->my_index + 1;
    if (hk_unlikely(hwm < mine)) { /* lowered below my own slot: put it back (others must see me) */
        while (hwm < mine && !hk_atomic_cas_weak_seq_cst(&l->hdr->xslot_hwm, &hwm, mine)) {}
        if (hwm < mine) hwm = mine;
    }
    uint32_t seen = hk_atomic_load_relaxed(&l->xhwm_seen);
    while (seen < hwm && !hk_atomic_cas_weak_relaxed(&l->xhwm_seen, &seen, hwm)) {}
    if (seen > hwm) hwm = seen;
    if (hwm > HK_MAX_SLOTS) hwm = HK_MAX_SLOTS;
    for (uint32_t i = 0; i < hwm; i++) {
        if ((int)i == l->my_index) continue;
        hk__slot *s = &l->slots[i];
        if (HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) != HK_SLOT_LIVE) continue;
        uint64_t v = HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[dev]));
        sum = (sum + v < sum) ? UINT64_MAX : sum + v; /* saturate */
    }
    return sum;
}

int hk_ledger_reserve(hk_ledger *l, int dev, uint64_t bytes) {
    if (hk_unlikely(l == NULL || dev < 0 || dev >= HK_MAX_DEVICES)) return HK_EINVAL;
    hk__slot *me = l->me;
    if (hk_unlikely(me == NULL)) return l->lost ? HK_EFAILCLOSED : HK_EINVAL;
    hk__dev *d = &l->dev[dev];
    const uint64_t limit = l->lim[dev]; /* from the process's own config, never from the file */
    if (limit == HK_MEM_UNLIMITED) {
        if (add_mine(l, dev, bytes, 0) != 0) return owner_changed(l) ? slot_lost(l) : HK_ENOMEM;
        return owner_changed(l) ? slot_lost(l) : HK_OK;
    }
    if (bytes > limit) return HK_ENOMEM;
    for (int attempt = 0; attempt < 4; attempt++) {
        if (add_mine(l, dev, bytes, 0) != 0) return owner_changed(l) ? slot_lost(l) : HK_ENOMEM;
        uint64_t sum = admitted_sum(l, dev);
        if (owner_changed(l)) return slot_lost(l);
        if (hk_likely(sum <= limit)) {
            peak_max(d, sum);
            return HK_OK;
        }
        if (add_mine(l, dev, bytes, 1) != 0) return slot_lost(l);
        /* Slow path: maybe dead processes hold quota, maybe a racer will roll back. */
        if (attempt == 0 && hk_ledger_reclaim(l) > 0) continue;
        if (attempt < 3) backoff(attempt);
    }
    return HK_ENOMEM;
}

void hk_ledger_release(hk_ledger *l, int dev, uint64_t bytes) {
    if (l == NULL || l->me == NULL || dev < 0 || dev >= HK_MAX_DEVICES || bytes == 0) return;
    if (owner_changed(l) || add_mine(l, dev, bytes, 1) != 0) slot_lost(l); /* not my counter any more */
}

uint64_t hk_ledger_used(const hk_ledger *l, int dev) {
    if (l == NULL || dev < 0 || dev >= HK_MAX_DEVICES) return 0;
    return hk__ledger_sum(l, dev);
}

int hk_ledger_slot_index(const hk_ledger *l) { return l ? l->my_index : -1; }

uint64_t hk__ledger_repairs(const hk_ledger *l) { return l ? hk_atomic_load_relaxed(&l->xrepairs) : 0; }

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

/* ---------------------------------------------------------------------------------------------
   Readers                                                                                      */

uint32_t hk_ledger_device_count(const hk_ledger *l) { return l ? l->hdr->device_count : 0; }
uint32_t hk_ledger_version(const hk_ledger *l) { return l ? l->hdr->version : 0; }

uint32_t hk_ledger_slot_hwm(const hk_ledger *l) {
    if (l == NULL) return 0;
    uint32_t hwm = hk_atomic_load_seq_cst(&l->hdr->xslot_hwm);
    return hwm > HK_MAX_SLOTS ? HK_MAX_SLOTS : hwm;
}

int hk_ledger_device(const hk_ledger *l, int dev, hk_device_info *out) {
    if (l == NULL || out == NULL || dev < 0 || dev >= HK_MAX_DEVICES) return HK_EINVAL;
    const hk__dev *d = &l->dev[dev];
    memset(out, 0, sizeof *out);
    memcpy(out->uuid, d->uuid, sizeof out->uuid);
    out->uuid[HK_UUID_MAX - 1] = '\0';
    out->mem_limit = d->mem_limit;
    out->sm_limit = d->sm_limit;
    out->peak = hk_atomic_load_relaxed(&d->xpeak);
    uint32_t hwm = hk_ledger_slot_hwm(l);
    for (uint32_t i = 0; i < hwm; i++) {
        hk__slot *s = &l->slots[i];
        if (HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner)) != HK_SLOT_LIVE) continue;
        uint64_t v = HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[dev]));
        out->used = (out->used + v < out->used) ? UINT64_MAX : out->used + v;
        if (v > 0 && slot_alive(l, (int)i) != 0) out->live_processes++;
    }
    return HK_OK;
}

int hk_ledger_process(const hk_ledger *l, int slot, hk_process_info *out) {
    if (l == NULL || out == NULL || slot < 0 || slot >= HK_MAX_SLOTS) return HK_EINVAL;
    hk__slot *s = &l->slots[slot];
    memset(out, 0, sizeof *out);
    uint32_t st = HK_OWNER_STATE(hk_atomic_load_seq_cst(&s->xowner));
    out->pid = s->pid;
    out->start_time = s->start_time;
    out->nonce = s->nonce;
    for (int d = 0; d < HK_MAX_DEVICES; d++) out->used[d] = HK_USED_BYTES(hk_atomic_load_seq_cst(&s->xused[d]));
    if (st == HK_SLOT_LIVE || st == HK_SLOT_CLAIMING) {
        int alive = slot_alive(l, slot);
        if (alive == 0) st = HK_SLOT_DEAD; /* -1 (cannot tell): report what the word says */
    }
    out->state = st;
    return HK_OK;
}

void *hk_ledger_limiter_area(hk_ledger *l, int dev) {
    if (l == NULL || dev < 0 || dev >= HK_MAX_DEVICES) return NULL;
    return l->dev[dev].limiter;
}
