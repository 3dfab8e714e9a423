/* cuda_engine.c - the stub libcuda's shared, processor-sharing engine (see cuda_engine.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cuda_engine.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SE_API   __attribute__((visibility("default")))
#define SE_DEVS  4   /* physical devices shared (a test uses the first) */
#define SE_Q     16  /* streams per device */
#define SE_RING  512 /* ops kept per stream (pending and recently done) */
#define SE_MAGIC 0x53454e47u

typedef struct se_op {
    int64_t rem;  /* device time still to run, ns */
    int64_t done; /* completion time once done */
} se_op;

typedef struct se_q {
    int32_t pid; /* 0 = free */
    int32_t pad;
    uint64_t key;    /* the stream, in its process */
    uint64_t head;   /* ops queued (op n is ops[(n - 1) % SE_RING]) */
    uint64_t tail;   /* ops done */
    int64_t busy_ns; /* device time its ops received */
    se_op ops[SE_RING];
} se_q;

typedef struct se_dev {
    int64_t t;          /* worked out up to here */
    int64_t idle_ns;    /* time no stream had work */
    int64_t slice_left; /* of the running stream's time slice */
    int32_t cur;        /* the stream running (-1: none) */
    int32_t switches;   /* time slices handed to another stream */
    se_q q[SE_Q];
} se_dev;

typedef struct se_file {
    uint32_t magic;
    uint32_t pad;
    int64_t created_ns;
    se_dev dev[SE_DEVS];
} se_file;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static se_file *g_f;
static int g_fd = -1;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void setup(void) {
    const char *path = getenv("HOOKCORE_STUB_ENGINE_FILE");
    if (!path || !*path) return;
    g_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (g_fd < 0 || flock(g_fd, LOCK_EX) != 0) {
        fprintf(stderr, "stub: HOOKCORE_STUB_ENGINE_FILE %s: %s\n", path, strerror(errno));
        abort();
    }
    off_t size = lseek(g_fd, 0, SEEK_END);
    if (size < (off_t)sizeof(se_file) && ftruncate(g_fd, sizeof(se_file)) != 0) abort();
    void *m = mmap(NULL, sizeof(se_file), PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
    if (m == MAP_FAILED) abort();
    g_f = m;
    if (g_f->magic != SE_MAGIC) {
        memset(g_f, 0, sizeof *g_f);
        int64_t now = now_ns();
        g_f->created_ns = now;
        for (int i = 0; i < SE_DEVS; i++) g_f->dev[i].t = now, g_f->dev[i].cur = -1;
        g_f->magic = SE_MAGIC;
    }
    flock(g_fd, LOCK_UN);
}

int se_on(void) {
    pthread_once(&g_once, setup);
    return g_f != NULL;
}

static se_dev *lock_dev(int dev) {
    if (dev < 0 || dev >= SE_DEVS) {
        fprintf(stderr, "stub: the shared engine models devices 0..%d, not %d\n", SE_DEVS - 1, dev);
        abort();
    }
    pthread_mutex_lock(&g_mu);
    while (flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {}
    return &g_f->dev[dev];
}

static void unlock_dev(void) {
    flock(g_fd, LOCK_UN);
    pthread_mutex_unlock(&g_mu);
}

static se_op *op_at(se_q *q, uint64_t n) { return &q->ops[(n - 1) % SE_RING]; }

/* The time slice (STUB_ENGINE_SLICE_US, default 2000 us; 0: processor sharing, every stream with
   work progressing at 1/k of the speed). */
static int64_t slice_ns(void) {
    static int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("STUB_ENGINE_SLICE_US");
        v = e ? atoll(e) * 1000 : 2000000;
    }
    return v;
}

/* Complete the running stream's leading empty ops at time t. */
static void settle(se_q *q, int64_t t) {
    while (q->tail < q->head && op_at(q, q->tail + 1)->rem <= 0) op_at(q, ++q->tail)->done = t;
}

/* Work the engine out up to `until`, or, with stop_q >= 0, until op stop_op of stream stop_q is done
   (a projection without new arrivals). Time slicing: the running stream keeps the device for its
   slice, then the next stream with work (round robin) gets it, even mid-op (compute preemption). */
static void run(se_dev *d, int64_t until, int stop_q, uint64_t stop_op) {
    int64_t slice = slice_ns();
    for (;;) {
        for (int i = 0; i < SE_Q; i++) settle(&d->q[i], d->t);
        if (stop_q >= 0 && d->q[stop_q].tail >= stop_op) return;
        int k = 0;
        int64_t mn = INT64_MAX;
        for (int i = 0; i < SE_Q; i++) {
            se_q *q = &d->q[i];
            if (q->tail < q->head) {
                k++;
                if (op_at(q, q->tail + 1)->rem < mn) mn = op_at(q, q->tail + 1)->rem;
            }
        }
        if (k == 0) {
            d->cur = -1;
            if (stop_q >= 0) return; /* nothing left: cannot happen for a queued op */
            if (until > d->t) d->idle_ns += until - d->t, d->t = until;
            return;
        }
        if (stop_q < 0 && d->t >= until) return;
        int64_t room = stop_q < 0 ? until - d->t : INT64_MAX;
        if (slice <= 0) { /* processor sharing */
            int64_t need = mn * k;
            int64_t step = need < room ? mn : room / k;
            if (step <= 0) {
                d->t = until;
                return;
            }
            for (int i = 0; i < SE_Q; i++) {
                se_q *q = &d->q[i];
                if (q->tail < q->head) op_at(q, q->tail + 1)->rem -= step, q->busy_ns += step;
            }
            d->t += need < room ? need : room;
            continue;
        }
        se_q *c = d->cur >= 0 ? &d->q[d->cur] : NULL;
        if (!c || c->tail >= c->head || d->slice_left <= 0) { /* hand the device on */
            int start = d->cur < 0 ? 0 : d->cur + 1, next = -1;
            for (int j = 0; j < SE_Q && next < 0; j++) {
                int i = (start + j) % SE_Q;
                if (d->q[i].tail < d->q[i].head) next = i;
            }
            if (next != d->cur) d->switches++;
            d->cur = next;
            d->slice_left = slice;
            c = &d->q[next];
        }
        se_op *o = op_at(c, c->tail + 1);
        int64_t step = o->rem < d->slice_left ? o->rem : d->slice_left;
        if (step > room) step = room;
        o->rem -= step;
        c->busy_ns += step;
        d->slice_left -= step;
        d->t += step;
        if (k == 1 && d->slice_left <= 0) d->slice_left = slice; /* alone: it keeps the device */
        if (step == room && o->rem > 0) return;
    }
}

/* The slot of this process's stream `key`; a new one takes a free slot, else that of an exited
   process (whose statistics then go). */
static int find_q(se_dev *d, uint64_t key, int create) {
    int pid = getpid(), free_q = -1, dead = -1;
    for (int i = 0; i < SE_Q; i++) {
        se_q *q = &d->q[i];
        if (q->pid == pid && q->key == key) return i;
        if (free_q < 0 && q->pid == 0) free_q = i;
        if (dead < 0 && q->pid != 0 && q->tail == q->head && kill(q->pid, 0) != 0 && errno == ESRCH) dead = i;
    }
    if (!create) return -1;
    int slot = free_q >= 0 ? free_q : dead;
    if (slot < 0) {
        fprintf(stderr, "stub: the shared engine has no free stream slot (%d)\n", SE_Q);
        abort();
    }
    se_q *q = &d->q[slot];
    memset(q, 0, sizeof *q);
    q->pid = pid;
    q->key = key;
    return slot;
}

static void sleep_until(int64_t t) {
    int64_t dt = t - now_ns();
    if (dt <= 0) dt = 1000;
    struct timespec ts = {dt / 1000000000LL, dt % 1000000000LL};
    nanosleep(&ts, NULL);
}

void se_wait(int dev, uint64_t key, uint64_t op) {
    static __thread se_dev *copy;
    if (!copy && !(copy = malloc(sizeof *copy))) abort();
    for (;;) {
        se_dev *d = lock_dev(dev);
        run(d, now_ns(), -1, 0);
        int qi = find_q(d, key, 0);
        if (qi < 0 || op == 0 || d->q[qi].tail >= op) {
            unlock_dev();
            return;
        }
        memcpy(copy, d, sizeof *copy);
        unlock_dev();
        run(copy, 0, qi, op); /* when it would be done if nothing else arrived */
        sleep_until(copy->t);
    }
}

uint64_t se_submit(int dev, uint64_t key, int64_t dur_ns) {
    for (;;) {
        se_dev *d = lock_dev(dev);
        run(d, now_ns(), -1, 0);
        se_q *q = &d->q[find_q(d, key, 1)];
        if (q->head - q->tail < SE_RING) {
            se_op *o = op_at(q, ++q->head);
            o->rem = dur_ns > 0 ? dur_ns : 0;
            o->done = -1;
            uint64_t n = q->head;
            unlock_dev();
            return n;
        }
        uint64_t oldest = q->tail + 1;
        unlock_dev();
        se_wait(dev, key, oldest); /* the stream's ring is full of pending work */
    }
}

uint64_t se_last(int dev, uint64_t key) {
    se_dev *d = lock_dev(dev);
    int qi = find_q(d, key, 0);
    uint64_t n = qi < 0 ? 0 : d->q[qi].head;
    unlock_dev();
    return n;
}

int se_done(int dev, uint64_t key, uint64_t op, int64_t *t_ns) {
    *t_ns = -1;
    if (op == 0) return 1;
    se_dev *d = lock_dev(dev);
    run(d, now_ns(), -1, 0);
    int qi = find_q(d, key, 0);
    int done = qi < 0 || d->q[qi].tail >= op;
    if (done && qi >= 0 && op + SE_RING > d->q[qi].head) *t_ns = op_at(&d->q[qi], op)->done;
    unlock_dev();
    return done;
}

void se_wait_all(int dev) {
    for (;;) {
        uint64_t key = 0, op = 0;
        se_dev *d = lock_dev(dev);
        run(d, now_ns(), -1, 0);
        for (int i = 0; i < SE_Q && !op; i++) {
            se_q *q = &d->q[i];
            if (q->pid == getpid() && q->tail < q->head) key = q->key, op = q->head;
        }
        unlock_dev();
        if (!op) return;
        se_wait(dev, key, op);
    }
}

/* Test-only statistics (not CUDA API). */
SE_API int64_t stubEngineBusyNs(int dev, int pid) {
    if (!se_on()) return -1;
    se_dev *d = lock_dev(dev);
    run(d, now_ns(), -1, 0);
    int64_t sum = 0;
    for (int i = 0; i < SE_Q; i++)
        if (pid == 0 || d->q[i].pid == pid) sum += d->q[i].busy_ns;
    unlock_dev();
    return sum;
}

SE_API int64_t stubEngineIdleNs(int dev) {
    if (!se_on()) return -1;
    se_dev *d = lock_dev(dev);
    run(d, now_ns(), -1, 0);
    int64_t idle = d->idle_ns;
    unlock_dev();
    return idle;
}
