/* ledger_read.c -- read-only views of a ledger: a private snapshot of the file (what a tool or the
 * node daemon reads), and the per-device and per-process readers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

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
    int rc = hk__ledger_check_header(l, err, errlen);
    if (rc != HK_OK) {
        hk_ledger_close(l);
        return rc;
    }
    hk__ledger_set_limits(l, NULL);
    *out = l;
    return HK_OK;
}

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
        if (v > 0 && hk__ledger_slot_alive(l, (int)i) != 0) out->live_processes++;
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
        int alive = hk__ledger_slot_alive(l, slot);
        if (alive == 0) st = HK_SLOT_DEAD; /* -1 (cannot tell): report what the word says */
    }
    out->state = st;
    return HK_OK;
}

void *hk_ledger_limiter_area(hk_ledger *l, int dev) {
    if (l == NULL || dev < 0 || dev >= HK_MAX_DEVICES) return NULL;
    return l->dev[dev].limiter;
}
