/* nvml_stub_mig.c - MIG in the stub libnvidia-ml.so.1: GPU instances, compute instances and MIG
 * device handles of fake GPUs whose `mig=on` (nvml_stub.c owns the GPUs themselves). This file holds
 * the profiles, the state file and GPU instances; nvml_stub_mig_ci.c compute instances and MIG
 * device handles.
 *
 * A fake, for tests and the demo: no GPU is partitioned. It answers the NVML MIG calls the
 * hami-core-gpu driver makes (through nvidia-ml-py), with the real library's ABI and return codes,
 * so the driver's MIG code is what runs against it.
 *
 * State and record: HOOKCORE_STUB_NVML_MIG names a file of lines, appended by every create and
 * destroy (under flock) and replayed by every call, so several processes (a daemon, its restart
 * after kill -9, a test reading what happened) see one partitioning, as they would on a GPU:
 *   gi+ <gpu-uuid> <gi-id> <profile-id> <start> <size>   a GPU instance was created
 *   ci+ <gpu-uuid> <gi-id> <ci-id> <ci-profile-index>    a compute instance in it
 *   ci- <gpu-uuid> <gi-id> <ci-id>                       destroyed
 *   gi- <gpu-uuid> <gi-id>                               destroyed
 * A test (or the fake backend, playing the admin's mig-parted) may write lines itself. Unset:
 * instances live in this process only.
 *
 * Profiles: the H200's, as NVIDIA's MIG User Guide ("Supported MIG Profiles", H100/H200
 * section) tabulates them, in our words: the GPU has 7 compute slices and 8 memory slices;
 *   1g.18gb  1 compute, 1 memory slice, up to 7 instances, placements start 0..6
 *   1g.35gb  1 compute, 2 memory slices, up to 4, starts 0,2,4,6
 *   2g.35gb  2 compute, 2 memory slices, up to 3, starts 0,2,4
 *   3g.71gb  3 compute, 4 memory slices, up to 2, starts 0,4
 *   4g.71gb  4 compute, 4 memory slices, 1, start 0
 *   7g.141gb 7 compute, 8 memory slices, 1, start 0
 * SM counts 16/16/32/60/64/132 and one decoder and JPEG engine per compute slice (the guide's
 * hardware-unit column; the "+me" media-extension profile is left out). NVML profile IDs are
 * those the driver reports for these profiles on Hopper (19, 15, 14, 9, 5, 0). Memory per
 * instance: the fraction of the GPU's framebuffer its memory slices are (the guide gives
 * fractions, not MiB). A GPU of another size keeps this geometry; its profile names follow
 * its memory.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "nvml_stub_mig_state.h"

typedef struct {
    unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
        encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} gi_profile_v1_t;
typedef struct {
    unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount, decoderCount,
        encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[NAME_LEN];
} gi_profile_v2_t;

static const profile_t PROFILES[] = {
    {0x0, 19, 1, 1, 7, 16, 1, 0, {0, 1, 2, 3, 4, 5, 6}, 7, "1g.18gb"},
    {0x9, 15, 1, 2, 4, 16, 1, 0, {0, 2, 4, 6}, 4, "1g.35gb"},
    {0x1, 14, 2, 2, 3, 32, 2, 0, {0, 2, 4}, 3, "2g.35gb"},
    {0x2, 9, 3, 4, 2, 60, 3, 0, {0, 4}, 2, "3g.71gb"},
    {0x3, 5, 4, 4, 1, 64, 4, 0, {0}, 1, "4g.71gb"},
    {0x4, 0, 7, 8, 1, 132, 7, 1, {0}, 1, "7g.141gb"},
};
#define NPROFILES (sizeof PROFILES / sizeof PROFILES[0])

static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
gi_state m_gi[STUB_MAX_DEVICES][MAX_GI];
ci_state m_ci[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
static struct nvmlGpuInstance_st h_gi[STUB_MAX_DEVICES][MAX_GI];
static struct nvmlComputeInstance_st h_ci[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
struct stub_mig_device h_mig[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
static unsigned m_seq;  /* creations replayed (part of each MIG UUID) */
static int m_file = -1; /* the state file, locked during a call */

/* ---------------------------------------------------------------------------------------------
 * Profiles
 * ------------------------------------------------------------------------------------------- */
static const profile_t *profile_by_index(unsigned index) {
    for (unsigned i = 0; i < NPROFILES; i++)
        if (PROFILES[i].index == index) return &PROFILES[i];
    return NULL;
}
const profile_t *profile_by_id(unsigned id) {
    for (unsigned i = 0; i < NPROFILES; i++)
        if (PROFILES[i].id == id) return &PROFILES[i];
    return NULL;
}

unsigned long long profile_mib(const profile_t *p, const stub_gpu_view *g) {
    return (g->total >> 20) * p->memory / MEM_SLICES;
}

static void profile_name(const profile_t *p, const stub_gpu_view *g, char *out, size_t n) {
    unsigned long long gib = g->total >> 30;
    if (gib >= 135 && gib <= 145)
        snprintf(out, n, "MIG %s", p->h200); /* an H200's framebuffer */
    else
        snprintf(out, n, "MIG %ug.%llugb", p->compute, (gib * p->memory + MEM_SLICES / 2) / MEM_SLICES);
}

/* ---------------------------------------------------------------------------------------------
 * State: replay the file (lock held)
 * ------------------------------------------------------------------------------------------- */
static int gpu_by_uuid(const char *uuid, stub_gpu_view *out) {
    nvmlDevice_t h;
    for (unsigned i = 0; stub_nvml_gpu_at(i, out, &h) == 0; i++)
        if (!strcmp(out->uuid, uuid)) return (int)i;
    return -1;
}

static void apply(const char *line) {
    char verb[8], uuid[96];
    unsigned a = 0, b = 0, c = 0, d = 0;
    int n = sscanf(line, "%7s %95s %u %u %u %u", verb, uuid, &a, &b, &c, &d);
    stub_gpu_view g;
    int gpu = n >= 3 ? gpu_by_uuid(uuid, &g) : -1;
    if (gpu < 0 || a >= MAX_GI) return;
    if (!strcmp(verb, "gi+") && n == 6) {
        m_gi[gpu][a] = (gi_state){1, b, c, d, ++m_seq};
    } else if (!strcmp(verb, "gi-")) {
        memset(&m_gi[gpu][a], 0, sizeof m_gi[gpu][a]);
        memset(m_ci[gpu][a], 0, sizeof m_ci[gpu][a]);
    } else if (!strcmp(verb, "ci+") && n == 5 && b < MAX_CI) {
        m_ci[gpu][a][b] = (ci_state){1, c};
    } else if (!strcmp(verb, "ci-") && n >= 4 && b < MAX_CI) {
        memset(&m_ci[gpu][a][b], 0, sizeof m_ci[gpu][a][b]);
    }
}

/* Lock the file and load its state; `mig_begin` pairs with `mig_end`. Without a file: this process's state. */
void mig_begin(void) {
    pthread_mutex_lock(&m_lock);
    const char *path = getenv("HOOKCORE_STUB_NVML_MIG");
    if (!path || !*path) return;
    m_file = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (m_file < 0) return;
    flock(m_file, LOCK_EX);
    memset(m_gi, 0, sizeof m_gi);
    memset(m_ci, 0, sizeof m_ci);
    m_seq = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) apply(line);
    fclose(f);
}

void mig_end(void) {
    if (m_file >= 0) {
        flock(m_file, LOCK_UN);
        close(m_file);
        m_file = -1;
    }
    pthread_mutex_unlock(&m_lock);
}

/* Record a change (lock held): append it to the file, or apply it to this process's state. */
void mig_record(const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (m_file >= 0) {
        size_t len = strlen(line);
        if (write(m_file, line, len) != (ssize_t)len) fprintf(stderr, "stub: HOOKCORE_STUB_NVML_MIG: short write\n");
    }
    apply(line);
}

/* ---------------------------------------------------------------------------------------------
 * Checks
 * ------------------------------------------------------------------------------------------- */
/* A GPU handle in MIG mode: its position, else an NVML error (negated). */
int mig_gpu(const char *call, nvmlDevice_t d, stub_gpu_view *g) {
    int r = stub_nvml_enter(call, d, NULL);
    if (r != R_SUCCESS) return -r;
    if (stub_nvml_gpu_of(d, g) != 0) return -R_INVALID_ARGUMENT;
    if (g->mig != 1) return -R_NOT_SUPPORTED; /* MIG off or unsupported */
    return (int)g->position;
}

int valid_gi(const struct nvmlGpuInstance_st *gi) {
    return gi >= &h_gi[0][0] && gi < &h_gi[0][0] + STUB_MAX_DEVICES * MAX_GI && m_gi[gi->gpu][gi->id].used;
}
int valid_ci(const struct nvmlComputeInstance_st *ci) {
    return ci >= &h_ci[0][0][0] && ci < &h_ci[0][0][0] + STUB_MAX_DEVICES * MAX_GI * MAX_CI &&
           m_gi[ci->gpu][ci->gi].used && m_ci[ci->gpu][ci->gi][ci->id].used;
}
int is_mig_handle(const void *d) {
    const struct stub_mig_device *m = d;
    return m >= &h_mig[0][0][0] && m < &h_mig[0][0][0] + STUB_MAX_DEVICES * MAX_GI * MAX_CI;
}
int valid_mig(const struct stub_mig_device *m) {
    return is_mig_handle(m) && m_gi[m->gpu][m->gi].used && m_ci[m->gpu][m->gi][m->ci].used;
}
struct nvmlGpuInstance_st *gi_handle(unsigned gpu, unsigned id) {
    h_gi[gpu][id] = (struct nvmlGpuInstance_st){gpu, id};
    return &h_gi[gpu][id];
}
struct nvmlComputeInstance_st *ci_handle(unsigned gpu, unsigned gi, unsigned id) {
    h_ci[gpu][gi][id] = (struct nvmlComputeInstance_st){gpu, gi, id};
    return &h_ci[gpu][gi][id];
}

static int overlaps(unsigned gpu, unsigned start, unsigned size) {
    for (unsigned i = 1; i < MAX_GI; i++) {
        const gi_state *s = &m_gi[gpu][i];
        if (s->used && start < s->start + s->size && s->start < start + size) return 1;
    }
    return 0;
}
static unsigned used_compute(unsigned gpu) {
    unsigned n = 0;
    for (unsigned i = 1; i < MAX_GI; i++)
        if (m_gi[gpu][i].used) {
            const profile_t *p = profile_by_id(m_gi[gpu][i].profile_id);
            n += p ? p->compute : 0;
        }
    return n;
}
static unsigned instances_of(unsigned gpu, unsigned profile_id) {
    unsigned n = 0;
    for (unsigned i = 1; i < MAX_GI; i++) n += m_gi[gpu][i].used && m_gi[gpu][i].profile_id == profile_id;
    return n;
}
static int placement_ok(unsigned gpu, const profile_t *p, unsigned start) {
    int listed = 0;
    for (unsigned i = 0; i < p->nstarts; i++) listed |= p->starts[i] == start;
    return listed && !overlaps(gpu, start, p->memory) && used_compute(gpu) + p->compute <= 7 &&
           instances_of(gpu, p->id) < p->count;
}

/* ---------------------------------------------------------------------------------------------
 * GPU instance profiles and placements
 * ------------------------------------------------------------------------------------------- */
static void fill_profile(const profile_t *p, const stub_gpu_view *g, gi_profile_v2_t *o) {
    o->id = p->id;
    o->isP2pSupported = 0;
    o->sliceCount = p->compute;
    o->instanceCount = p->count;
    o->multiprocessorCount = p->sms;
    o->copyEngineCount = p->compute;
    o->decoderCount = p->decoders;
    o->encoderCount = 0;
    o->jpegCount = p->decoders;
    o->ofaCount = p->ofa;
    o->memorySizeMB = profile_mib(p, g);
    profile_name(p, g, o->name, sizeof o->name);
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned profile, gi_profile_v2_t *info) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!info) return R_INVALID_ARGUMENT;
    const profile_t *p = profile_by_index(profile);
    if (!p) return R_NOT_SUPPORTED; /* a profile this GPU does not have */
    unsigned version = info->version;
    fill_profile(p, &g, info);
    info->version = version;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned profile, gi_profile_v1_t *info) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!info) return R_INVALID_ARGUMENT;
    const profile_t *p = profile_by_index(profile);
    if (!p) return R_NOT_SUPPORTED;
    gi_profile_v2_t v2;
    fill_profile(p, &g, &v2);
    memcpy(info, &v2.id, sizeof *info); /* v1 is v2 without version and name */
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t d, unsigned profile_id,
                                                                    placement_t *placements, unsigned *count) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!count) return R_INVALID_ARGUMENT;
    const profile_t *p = profile_by_id(profile_id);
    if (!p) return R_INVALID_ARGUMENT;
    if (!placements) {
        *count = p->nstarts;
        return R_SUCCESS;
    }
    if (*count < p->nstarts) {
        *count = p->nstarts;
        return R_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < p->nstarts; i++) placements[i] = (placement_t){p->starts[i], p->memory};
    *count = p->nstarts;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t d, unsigned profile_id, unsigned *count) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    const profile_t *p = profile_by_id(profile_id);
    if (!p || !count) return R_INVALID_ARGUMENT;
    mig_begin();
    /* Greedy over the placements: what could still be created one after the other. */
    gi_state saved[MAX_GI];
    memcpy(saved, m_gi[gpu], sizeof saved);
    unsigned n = 0;
    for (unsigned i = 0; i < p->nstarts; i++) {
        if (!placement_ok((unsigned)gpu, p, p->starts[i])) continue;
        for (unsigned id = 1; id < MAX_GI; id++)
            if (!m_gi[gpu][id].used) {
                m_gi[gpu][id] = (gi_state){1, p->id, p->starts[i], p->memory, 0};
                break;
            }
        n++;
    }
    memcpy(m_gi[gpu], saved, sizeof saved);
    mig_end();
    *count = n;
    return R_SUCCESS;
}

static nvmlReturn_t create_gi(unsigned gpu, const profile_t *p, unsigned start, struct nvmlGpuInstance_st **out) {
    if (!placement_ok(gpu, p, start)) return R_INSUFFICIENT_RESOURCES;
    for (unsigned id = 1; id < MAX_GI; id++) {
        if (m_gi[gpu][id].used) continue;
        stub_gpu_view g;
        nvmlDevice_t h;
        stub_nvml_gpu_at(gpu, &g, &h);
        mig_record("gi+ %s %u %u %u %u\n", g.uuid, id, p->id, start, p->memory);
        *out = gi_handle(gpu, id);
        return R_SUCCESS;
    }
    return R_INSUFFICIENT_RESOURCES;
}

STUB_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned profile_id,
                                                               const placement_t *placement,
                                                               struct nvmlGpuInstance_st **out) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    const profile_t *p = profile_by_id(profile_id);
    if (!p || !placement || !out || placement->size != p->memory) return R_INVALID_ARGUMENT;
    mig_begin();
    nvmlReturn_t r = create_gi((unsigned)gpu, p, placement->start, out);
    mig_end();
    return r;
}

STUB_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned profile_id,
                                                  struct nvmlGpuInstance_st **out) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    const profile_t *p = profile_by_id(profile_id);
    if (!p || !out) return R_INVALID_ARGUMENT;
    mig_begin();
    nvmlReturn_t r = R_INSUFFICIENT_RESOURCES;
    for (unsigned i = 0; i < p->nstarts && r != R_SUCCESS; i++) r = create_gi((unsigned)gpu, p, p->starts[i], out);
    mig_end();
    return r;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned profile_id, struct nvmlGpuInstance_st **out,
                                                unsigned *count) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!count || !profile_by_id(profile_id)) return R_INVALID_ARGUMENT;
    mig_begin();
    unsigned n = 0;
    nvmlReturn_t r = R_SUCCESS;
    for (unsigned id = 1; id < MAX_GI; id++) {
        if (!m_gi[gpu][id].used || m_gi[gpu][id].profile_id != profile_id) continue;
        if (out) out[n] = gi_handle((unsigned)gpu, id);
        n++;
    }
    mig_end();
    *count = n;
    return r;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned id, struct nvmlGpuInstance_st **out) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!out || id >= MAX_GI) return R_INVALID_ARGUMENT;
    mig_begin();
    int used = m_gi[gpu][id].used;
    mig_end();
    if (!used) return R_NOT_FOUND;
    *out = gi_handle((unsigned)gpu, id);
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetInfo(struct nvmlGpuInstance_st *gi, gi_info_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    if (!valid_gi(gi) || !info) {
        mig_end();
        return R_INVALID_ARGUMENT;
    }
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(gi->gpu, &g, &h);
    const gi_state *s = &m_gi[gi->gpu][gi->id];
    *info = (gi_info_t){h, gi->id, s->profile_id, {s->start, s->size}};
    mig_end();
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceDestroy(struct nvmlGpuInstance_st *gi) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    if (!valid_gi(gi)) {
        mig_end();
        return R_INVALID_ARGUMENT;
    }
    for (unsigned c = 0; c < MAX_CI; c++)
        if (m_ci[gi->gpu][gi->id][c].used) {
            mig_end();
            return R_IN_USE;
        } /* destroy its compute instances first */
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(gi->gpu, &g, &h);
    mig_record("gi- %s %u\n", g.uuid, gi->id);
    mig_end();
    return R_SUCCESS;
}
