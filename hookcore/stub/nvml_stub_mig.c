/* nvml_stub_mig.c - MIG in the stub libnvidia-ml.so.1: GPU instances, compute instances and MIG
 * device handles of fake GPUs whose `mig=on` (nvml_stub.c owns the GPUs themselves).
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

#include "nvml_stub_mig.h"
#include "stub_devices.h"

#define STUB_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    R_SUCCESS = 0,
    R_UNINITIALIZED = 1,
    R_INVALID_ARGUMENT = 2,
    R_NOT_SUPPORTED = 3,
    R_NOT_FOUND = 6,
    R_INSUFFICIENT_SIZE = 7,
    R_IN_USE = 19,
    R_INSUFFICIENT_RESOURCES = 23,
    R_UNKNOWN = 999,
};

#define MAX_GI     16 /* GPU instance IDs 1..15 */
#define MAX_CI     8  /* compute instance IDs 0..7 */
#define MEM_SLICES 8
#define NAME_LEN   96

typedef struct {
    unsigned start, size;
} placement_t;
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
typedef struct {
    unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} ci_profile_v1_t;
typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[NAME_LEN];
} ci_profile_v2_t;
typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount,
        sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} attributes_t;

/* One GPU instance profile: NVML_GPU_INSTANCE_PROFILE_* index, ID, shape, H200 name. */
typedef struct {
    unsigned index, id, compute, memory, count, sms, decoders, ofa;
    unsigned starts[8], nstarts;
    const char *h200;
} profile_t;

static const profile_t PROFILES[] = {
    {0x0, 19, 1, 1, 7, 16, 1, 0, {0, 1, 2, 3, 4, 5, 6}, 7, "1g.18gb"},
    {0x9, 15, 1, 2, 4, 16, 1, 0, {0, 2, 4, 6}, 4, "1g.35gb"},
    {0x1, 14, 2, 2, 3, 32, 2, 0, {0, 2, 4}, 3, "2g.35gb"},
    {0x2, 9, 3, 4, 2, 60, 3, 0, {0, 4}, 2, "3g.71gb"},
    {0x3, 5, 4, 4, 1, 64, 4, 0, {0}, 1, "4g.71gb"},
    {0x4, 0, 7, 8, 1, 132, 7, 1, {0}, 1, "7g.141gb"},
};
#define NPROFILES (sizeof PROFILES / sizeof PROFILES[0])
/* Compute instance profiles NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE by index. */
static const unsigned CI_SLICES[] = {1, 2, 3, 4, 7};

/* Handles: one per possible (GPU, GI id) and (GPU, GI id, CI id); MIG device = compute instance. */
struct nvmlGpuInstance_st {
    unsigned gpu, id;
};
struct nvmlComputeInstance_st {
    unsigned gpu, gi, id;
};
struct stub_mig_device {
    unsigned gpu, gi, ci;
};

typedef struct {
    int used;
    unsigned profile_id, start, size, seq;
} gi_state;
typedef struct {
    int used;
    unsigned profile_index;
} ci_state;

static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
static gi_state m_gi[STUB_MAX_DEVICES][MAX_GI];
static ci_state m_ci[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
static struct nvmlGpuInstance_st h_gi[STUB_MAX_DEVICES][MAX_GI];
static struct nvmlComputeInstance_st h_ci[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
static struct stub_mig_device h_mig[STUB_MAX_DEVICES][MAX_GI][MAX_CI];
static unsigned m_seq;  /* creations replayed (part of each MIG UUID) */
static int m_file = -1; /* the state file, locked during a call */

typedef struct {
    nvmlDevice_t device;
    unsigned id, profileId;
    placement_t placement;
} gi_info_t;
typedef struct {
    nvmlDevice_t device;
    struct nvmlGpuInstance_st *gpuInstance;
    unsigned id, profileId;
    placement_t placement;
} ci_info_t;

/* ---------------------------------------------------------------------------------------------
 * Profiles
 * ------------------------------------------------------------------------------------------- */
static const profile_t *profile_by_index(unsigned index) {
    for (unsigned i = 0; i < NPROFILES; i++)
        if (PROFILES[i].index == index) return &PROFILES[i];
    return NULL;
}
static const profile_t *profile_by_id(unsigned id) {
    for (unsigned i = 0; i < NPROFILES; i++)
        if (PROFILES[i].id == id) return &PROFILES[i];
    return NULL;
}

static unsigned long long profile_mib(const profile_t *p, const stub_gpu_view *g) {
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

/* Lock the file and load its state; `begin` pairs with `end`. Without a file: this process's state. */
static void begin(void) {
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

static void end(void) {
    if (m_file >= 0) {
        flock(m_file, LOCK_UN);
        close(m_file);
        m_file = -1;
    }
    pthread_mutex_unlock(&m_lock);
}

/* Record a change (lock held): append it to the file, or apply it to this process's state. */
static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...) {
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
static int mig_gpu(const char *call, nvmlDevice_t d, stub_gpu_view *g) {
    int r = stub_nvml_enter(call, d, NULL);
    if (r != R_SUCCESS) return -r;
    if (stub_nvml_gpu_of(d, g) != 0) return -R_INVALID_ARGUMENT;
    if (g->mig != 1) return -R_NOT_SUPPORTED; /* MIG off or unsupported */
    return (int)g->position;
}

static int valid_gi(const struct nvmlGpuInstance_st *gi) {
    return gi >= &h_gi[0][0] && gi < &h_gi[0][0] + STUB_MAX_DEVICES * MAX_GI && m_gi[gi->gpu][gi->id].used;
}
static int valid_ci(const struct nvmlComputeInstance_st *ci) {
    return ci >= &h_ci[0][0][0] && ci < &h_ci[0][0][0] + STUB_MAX_DEVICES * MAX_GI * MAX_CI &&
           m_gi[ci->gpu][ci->gi].used && m_ci[ci->gpu][ci->gi][ci->id].used;
}
static int is_mig_handle(const void *d) {
    const struct stub_mig_device *m = d;
    return m >= &h_mig[0][0][0] && m < &h_mig[0][0][0] + STUB_MAX_DEVICES * MAX_GI * MAX_CI;
}
static int valid_mig(const struct stub_mig_device *m) {
    return is_mig_handle(m) && m_gi[m->gpu][m->gi].used && m_ci[m->gpu][m->gi][m->ci].used;
}
static struct nvmlGpuInstance_st *gi_handle(unsigned gpu, unsigned id) {
    h_gi[gpu][id] = (struct nvmlGpuInstance_st){gpu, id};
    return &h_gi[gpu][id];
}
static struct nvmlComputeInstance_st *ci_handle(unsigned gpu, unsigned gi, unsigned id) {
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
    begin();
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
    end();
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
        record("gi+ %s %u %u %u %u\n", g.uuid, id, p->id, start, p->memory);
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
    begin();
    nvmlReturn_t r = create_gi((unsigned)gpu, p, placement->start, out);
    end();
    return r;
}

STUB_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t d, unsigned profile_id,
                                                  struct nvmlGpuInstance_st **out) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    const profile_t *p = profile_by_id(profile_id);
    if (!p || !out) return R_INVALID_ARGUMENT;
    begin();
    nvmlReturn_t r = R_INSUFFICIENT_RESOURCES;
    for (unsigned i = 0; i < p->nstarts && r != R_SUCCESS; i++) r = create_gi((unsigned)gpu, p, p->starts[i], out);
    end();
    return r;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned profile_id, struct nvmlGpuInstance_st **out,
                                                unsigned *count) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!count || !profile_by_id(profile_id)) return R_INVALID_ARGUMENT;
    begin();
    unsigned n = 0;
    nvmlReturn_t r = R_SUCCESS;
    for (unsigned id = 1; id < MAX_GI; id++) {
        if (!m_gi[gpu][id].used || m_gi[gpu][id].profile_id != profile_id) continue;
        if (out) out[n] = gi_handle((unsigned)gpu, id);
        n++;
    }
    end();
    *count = n;
    return r;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned id, struct nvmlGpuInstance_st **out) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!out || id >= MAX_GI) return R_INVALID_ARGUMENT;
    begin();
    int used = m_gi[gpu][id].used;
    end();
    if (!used) return R_NOT_FOUND;
    *out = gi_handle((unsigned)gpu, id);
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetInfo(struct nvmlGpuInstance_st *gi, gi_info_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    if (!valid_gi(gi) || !info) {
        end();
        return R_INVALID_ARGUMENT;
    }
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(gi->gpu, &g, &h);
    const gi_state *s = &m_gi[gi->gpu][gi->id];
    *info = (gi_info_t){h, gi->id, s->profile_id, {s->start, s->size}};
    end();
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceDestroy(struct nvmlGpuInstance_st *gi) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    if (!valid_gi(gi)) {
        end();
        return R_INVALID_ARGUMENT;
    }
    for (unsigned c = 0; c < MAX_CI; c++)
        if (m_ci[gi->gpu][gi->id][c].used) {
            end();
            return R_IN_USE;
        } /* destroy its compute instances first */
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(gi->gpu, &g, &h);
    record("gi- %s %u\n", g.uuid, gi->id);
    end();
    return R_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * Compute instances
 * ------------------------------------------------------------------------------------------- */
static unsigned gi_compute(const struct nvmlGpuInstance_st *gi) {
    const profile_t *p = profile_by_id(m_gi[gi->gpu][gi->id].profile_id);
    return p ? p->compute : 0;
}

static nvmlReturn_t ci_profile(struct nvmlGpuInstance_st *gi, unsigned profile, ci_profile_v2_t *o) {
    if (!valid_gi(gi) || !o) return R_INVALID_ARGUMENT;
    if (profile >= sizeof CI_SLICES / sizeof CI_SLICES[0]) return R_NOT_SUPPORTED;
    unsigned slices = CI_SLICES[profile], total = gi_compute(gi);
    if (slices > total) return R_NOT_SUPPORTED;
    const profile_t *p = profile_by_id(m_gi[gi->gpu][gi->id].profile_id);
    o->id = profile;
    o->sliceCount = slices;
    o->instanceCount = total / slices;
    o->multiprocessorCount = p->sms * slices / total;
    o->sharedCopyEngineCount = p->compute;
    o->sharedDecoderCount = o->sharedJpegCount = p->decoders;
    o->sharedEncoderCount = 0;
    o->sharedOfaCount = p->ofa;
    snprintf(o->name, sizeof o->name, "MIG %uc.%ug", slices, total);
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                                    unsigned eng, ci_profile_v2_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    if (eng != 0) return R_NOT_SUPPORTED; /* only the shared engine profile */
    begin();
    unsigned version = info ? info->version : 0;
    r = ci_profile(gi, profile, info);
    if (info) info->version = version;
    end();
    return r;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                                   unsigned eng, ci_profile_v1_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    if (eng != 0) return R_NOT_SUPPORTED;
    begin();
    ci_profile_v2_t v2;
    r = info ? ci_profile(gi, profile, &v2) : R_INVALID_ARGUMENT;
    if (r == R_SUCCESS) memcpy(info, &v2.id, sizeof *info);
    end();
    return r;
}

STUB_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                           struct nvmlComputeInstance_st **out) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    ci_profile_v2_t p;
    if (!out || (r = ci_profile(gi, profile, &p)) != R_SUCCESS) {
        end();
        return r ? r : R_INVALID_ARGUMENT;
    }
    unsigned used = 0;
    for (unsigned c = 0; c < MAX_CI; c++)
        if (m_ci[gi->gpu][gi->id][c].used) used += CI_SLICES[m_ci[gi->gpu][gi->id][c].profile_index];
    if (used + p.sliceCount > gi_compute(gi)) {
        end();
        return R_INSUFFICIENT_RESOURCES;
    }
    for (unsigned c = 0; c < MAX_CI; c++) {
        if (m_ci[gi->gpu][gi->id][c].used) continue;
        stub_gpu_view g;
        nvmlDevice_t h;
        stub_nvml_gpu_at(gi->gpu, &g, &h);
        record("ci+ %s %u %u %u\n", g.uuid, gi->id, c, profile);
        *out = ci_handle(gi->gpu, gi->id, c);
        end();
        return R_SUCCESS;
    }
    end();
    return R_INSUFFICIENT_RESOURCES;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                         struct nvmlComputeInstance_st **out, unsigned *count) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    if (!valid_gi(gi) || !count) {
        end();
        return R_INVALID_ARGUMENT;
    }
    unsigned n = 0;
    for (unsigned c = 0; c < MAX_CI; c++) {
        const ci_state *s = &m_ci[gi->gpu][gi->id][c];
        if (!s->used || s->profile_index != profile) continue;
        if (out) out[n] = ci_handle(gi->gpu, gi->id, c);
        n++;
    }
    end();
    *count = n;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(struct nvmlGpuInstance_st *gi, unsigned id,
                                                            struct nvmlComputeInstance_st **out) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    if (!valid_gi(gi) || !out || id >= MAX_CI) {
        end();
        return R_INVALID_ARGUMENT;
    }
    int used = m_ci[gi->gpu][gi->id][id].used;
    if (used) *out = ci_handle(gi->gpu, gi->id, id);
    end();
    return used ? R_SUCCESS : R_NOT_FOUND;
}

STUB_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(struct nvmlComputeInstance_st *ci, ci_info_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    if (!valid_ci(ci) || !info) {
        end();
        return R_INVALID_ARGUMENT;
    }
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(ci->gpu, &g, &h);
    unsigned slices = CI_SLICES[m_ci[ci->gpu][ci->gi][ci->id].profile_index];
    *info =
        (ci_info_t){h, gi_handle(ci->gpu, ci->gi), ci->id, m_ci[ci->gpu][ci->gi][ci->id].profile_index, {0, slices}};
    end();
    return R_SUCCESS;
}
STUB_API nvmlReturn_t nvmlComputeInstanceGetInfo(struct nvmlComputeInstance_st *ci, ci_info_t *info) {
    return nvmlComputeInstanceGetInfo_v2(ci, info);
}

STUB_API nvmlReturn_t nvmlComputeInstanceDestroy(struct nvmlComputeInstance_st *ci) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    begin();
    if (!valid_ci(ci)) {
        end();
        return R_INVALID_ARGUMENT;
    }
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(ci->gpu, &g, &h);
    record("ci- %s %u %u\n", g.uuid, ci->gi, ci->id);
    end();
    return R_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * MIG device handles (one per compute instance)
 * ------------------------------------------------------------------------------------------- */
STUB_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is_mig) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    if (!is_mig) return R_INVALID_ARGUMENT;
    stub_gpu_view g;
    if (is_mig_handle(d)) {
        *is_mig = 1;
        return R_SUCCESS;
    }
    if (stub_nvml_gpu_of(d, &g) != 0) return R_INVALID_ARGUMENT;
    *is_mig = 0;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *count) {
    int r = stub_nvml_enter(__func__, d, NULL);
    if (r != R_SUCCESS) return r;
    stub_gpu_view g;
    if (!count || stub_nvml_gpu_of(d, &g) != 0) return R_INVALID_ARGUMENT;
    *count = g.mig >= 0 ? 7 : 0;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index,
                                                          struct stub_mig_device **out) {
    stub_gpu_view g;
    int gpu = mig_gpu(__func__, d, &g);
    if (gpu < 0) return -gpu;
    if (!out) return R_INVALID_ARGUMENT;
    begin();
    unsigned n = 0;
    for (unsigned gi = 1; gi < MAX_GI; gi++) {
        if (!m_gi[gpu][gi].used) continue;
        for (unsigned c = 0; c < MAX_CI; c++) {
            if (!m_ci[gpu][gi][c].used) continue;
            if (n++ == index) {
                h_mig[gpu][gi][c] = (struct stub_mig_device){(unsigned)gpu, gi, c};
                *out = &h_mig[gpu][gi][c];
                end();
                return R_SUCCESS;
            }
        }
    }
    end();
    return R_NOT_FOUND;
}

/* For a MIG handle: the state checks every MIG device query makes (lock taken; end() after). */
static nvmlReturn_t enter_mig(const char *call, const struct stub_mig_device *m) {
    int r = stub_nvml_enter(call, NULL, NULL);
    if (r != R_SUCCESS) return r;
    if (!is_mig_handle(m)) return R_INVALID_ARGUMENT;
    begin();
    if (!valid_mig(m)) {
        end();
        return R_NOT_FOUND;
    } /* its instance was destroyed */
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(struct stub_mig_device *m, nvmlDevice_t *out) {
    nvmlReturn_t r = enter_mig(__func__, m);
    if (r != R_SUCCESS) return r;
    stub_gpu_view g;
    nvmlDevice_t h = NULL;
    stub_nvml_gpu_at(m->gpu, &g, &h);
    end();
    if (!out) return R_INVALID_ARGUMENT;
    *out = h;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(struct stub_mig_device *m, unsigned *id) {
    nvmlReturn_t r = enter_mig(__func__, m);
    if (r != R_SUCCESS) return r;
    end();
    if (!id) return R_INVALID_ARGUMENT;
    *id = m->gi;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(struct stub_mig_device *m, unsigned *id) {
    nvmlReturn_t r = enter_mig(__func__, m);
    if (r != R_SUCCESS) return r;
    end();
    if (!id) return R_INVALID_ARGUMENT;
    *id = m->ci;
    return R_SUCCESS;
}

/* MIG device handles only, as NVML's reference documents and as driver 580 answers on an H200
   (measured: NOT_SUPPORTED for the whole GPU); a whole GPU's SM count comes from
   nvmlDeviceGetNumGpuCores (nvml_stub.c). */
STUB_API nvmlReturn_t nvmlDeviceGetAttributes_v2(struct stub_mig_device *m, attributes_t *a) {
    stub_gpu_view whole;
    if (!is_mig_handle(m) && stub_nvml_gpu_of((const struct nvmlDevice_st *)m, &whole) == 0) {
        unsigned sms = 0;
        unsigned long long mib = 0;
        nvmlReturn_t rg = stub_nvml_gpu_attributes("nvmlDeviceGetAttributes_v2", (struct nvmlDevice_st *)m, &sms, &mib);
        return rg != R_SUCCESS ? rg : R_NOT_SUPPORTED;
    }
    nvmlReturn_t r = enter_mig(__func__, m);
    if (r != R_SUCCESS) return r;
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(m->gpu, &g, &h);
    const profile_t *p = profile_by_id(m_gi[m->gpu][m->gi].profile_id);
    unsigned slices = CI_SLICES[m_ci[m->gpu][m->gi][m->ci].profile_index];
    end();
    if (!a || !p) return R_INVALID_ARGUMENT;
    *a = (attributes_t){p->sms * slices / p->compute,
                        p->compute,
                        p->decoders,
                        0,
                        p->decoders,
                        p->ofa,
                        p->compute,
                        slices,
                        profile_mib(p, &g)};
    return R_SUCCESS;
}
STUB_API nvmlReturn_t nvmlDeviceGetAttributes(struct stub_mig_device *m, attributes_t *a) {
    return nvmlDeviceGetAttributes_v2(m, a);
}

/* MIG UUIDs as the driver forms them ("MIG-" + a UUID), derived from the parent, the instance
   IDs and the creation's sequence number: a re-created instance gets a new UUID, as on a GPU. */
int stub_mig_device_uuid(const void *d, char *uuid, unsigned len, int *ret) {
    const struct stub_mig_device *m = d;
    if (!is_mig_handle(m)) return 0;
    *ret = enter_mig("nvmlDeviceGetUUID", m);
    if (*ret != R_SUCCESS) return 1;
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(m->gpu, &g, &h);
    unsigned long long x = 1469598103934665603ULL; /* FNV-1a */
    char key[160];
    snprintf(key, sizeof key, "%s/%u/%u/%u", g.uuid, m->gi, m->ci, m_gi[m->gpu][m->gi].seq);
    for (const char *c = key; *c; c++) {
        x ^= (unsigned char)*c;
        x *= 1099511628211ULL;
    }
    unsigned long long y = x * 0x9E3779B97F4A7C15ULL;
    end();
    char buf[64];
    snprintf(buf, sizeof buf, "MIG-%08llx-%04llx-4%03llx-8%03llx-%012llx", x >> 32, (x >> 16) & 0xffff, x & 0xfff,
             (y >> 52) & 0xfff, y & 0xffffffffffffULL);
    if (!uuid) {
        *ret = R_INVALID_ARGUMENT;
        return 1;
    }
    if (strlen(buf) + 1 > len) {
        *ret = R_INSUFFICIENT_SIZE;
        return 1;
    }
    memcpy(uuid, buf, strlen(buf) + 1);
    *ret = R_SUCCESS;
    return 1;
}
