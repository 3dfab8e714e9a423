/* nvml_stub_mig_ci.c - MIG in the stub libnvidia-ml.so.1, inside a GPU instance: compute instances
 * and the MIG device handles (one per compute instance) nvml_stub_mig.c's GPU instances hold.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <string.h>

#include "nvml_stub_mig_state.h"

/* Compute instance profiles NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE by index. */
static const unsigned CI_SLICES[] = {1, 2, 3, 4, 7};

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
    mig_begin();
    unsigned version = info ? info->version : 0;
    r = ci_profile(gi, profile, info);
    if (info) info->version = version;
    mig_end();
    return r;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                                   unsigned eng, ci_profile_v1_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    if (eng != 0) return R_NOT_SUPPORTED;
    mig_begin();
    ci_profile_v2_t v2;
    r = info ? ci_profile(gi, profile, &v2) : R_INVALID_ARGUMENT;
    if (r == R_SUCCESS) memcpy(info, &v2.id, sizeof *info);
    mig_end();
    return r;
}

STUB_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                           struct nvmlComputeInstance_st **out) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    ci_profile_v2_t p;
    if (!out || (r = ci_profile(gi, profile, &p)) != R_SUCCESS) {
        mig_end();
        return r ? r : R_INVALID_ARGUMENT;
    }
    unsigned used = 0;
    for (unsigned c = 0; c < MAX_CI; c++)
        if (m_ci[gi->gpu][gi->id][c].used) used += CI_SLICES[m_ci[gi->gpu][gi->id][c].profile_index];
    if (used + p.sliceCount > gi_compute(gi)) {
        mig_end();
        return R_INSUFFICIENT_RESOURCES;
    }
    for (unsigned c = 0; c < MAX_CI; c++) {
        if (m_ci[gi->gpu][gi->id][c].used) continue;
        stub_gpu_view g;
        nvmlDevice_t h;
        stub_nvml_gpu_at(gi->gpu, &g, &h);
        mig_record("ci+ %s %u %u %u\n", g.uuid, gi->id, c, profile);
        *out = ci_handle(gi->gpu, gi->id, c);
        mig_end();
        return R_SUCCESS;
    }
    mig_end();
    return R_INSUFFICIENT_RESOURCES;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(struct nvmlGpuInstance_st *gi, unsigned profile,
                                                         struct nvmlComputeInstance_st **out, unsigned *count) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    if (!valid_gi(gi) || !count) {
        mig_end();
        return R_INVALID_ARGUMENT;
    }
    unsigned n = 0;
    for (unsigned c = 0; c < MAX_CI; c++) {
        const ci_state *s = &m_ci[gi->gpu][gi->id][c];
        if (!s->used || s->profile_index != profile) continue;
        if (out) out[n] = ci_handle(gi->gpu, gi->id, c);
        n++;
    }
    mig_end();
    *count = n;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(struct nvmlGpuInstance_st *gi, unsigned id,
                                                            struct nvmlComputeInstance_st **out) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    if (!valid_gi(gi) || !out || id >= MAX_CI) {
        mig_end();
        return R_INVALID_ARGUMENT;
    }
    int used = m_ci[gi->gpu][gi->id][id].used;
    if (used) *out = ci_handle(gi->gpu, gi->id, id);
    mig_end();
    return used ? R_SUCCESS : R_NOT_FOUND;
}

STUB_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(struct nvmlComputeInstance_st *ci, ci_info_t *info) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    if (!valid_ci(ci) || !info) {
        mig_end();
        return R_INVALID_ARGUMENT;
    }
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(ci->gpu, &g, &h);
    unsigned slices = CI_SLICES[m_ci[ci->gpu][ci->gi][ci->id].profile_index];
    *info =
        (ci_info_t){h, gi_handle(ci->gpu, ci->gi), ci->id, m_ci[ci->gpu][ci->gi][ci->id].profile_index, {0, slices}};
    mig_end();
    return R_SUCCESS;
}
STUB_API nvmlReturn_t nvmlComputeInstanceGetInfo(struct nvmlComputeInstance_st *ci, ci_info_t *info) {
    return nvmlComputeInstanceGetInfo_v2(ci, info);
}

STUB_API nvmlReturn_t nvmlComputeInstanceDestroy(struct nvmlComputeInstance_st *ci) {
    int r = stub_nvml_enter(__func__, NULL, NULL);
    if (r != R_SUCCESS) return r;
    mig_begin();
    if (!valid_ci(ci)) {
        mig_end();
        return R_INVALID_ARGUMENT;
    }
    stub_gpu_view g;
    nvmlDevice_t h;
    stub_nvml_gpu_at(ci->gpu, &g, &h);
    mig_record("ci- %s %u %u\n", g.uuid, ci->gi, ci->id);
    mig_end();
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
    mig_begin();
    unsigned n = 0;
    for (unsigned gi = 1; gi < MAX_GI; gi++) {
        if (!m_gi[gpu][gi].used) continue;
        for (unsigned c = 0; c < MAX_CI; c++) {
            if (!m_ci[gpu][gi][c].used) continue;
            if (n++ == index) {
                h_mig[gpu][gi][c] = (struct stub_mig_device){(unsigned)gpu, gi, c};
                *out = &h_mig[gpu][gi][c];
                mig_end();
                return R_SUCCESS;
            }
        }
    }
    mig_end();
    return R_NOT_FOUND;
}

/* For a MIG handle: the state checks every MIG device query makes (lock taken; mig_end() after). */
static nvmlReturn_t enter_mig(const char *call, const struct stub_mig_device *m) {
    int r = stub_nvml_enter(call, NULL, NULL);
    if (r != R_SUCCESS) return r;
    if (!is_mig_handle(m)) return R_INVALID_ARGUMENT;
    mig_begin();
    if (!valid_mig(m)) {
        mig_end();
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
    mig_end();
    if (!out) return R_INVALID_ARGUMENT;
    *out = h;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(struct stub_mig_device *m, unsigned *id) {
    nvmlReturn_t r = enter_mig(__func__, m);
    if (r != R_SUCCESS) return r;
    mig_end();
    if (!id) return R_INVALID_ARGUMENT;
    *id = m->gi;
    return R_SUCCESS;
}

STUB_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(struct stub_mig_device *m, unsigned *id) {
    nvmlReturn_t r = enter_mig(__func__, m);
    if (r != R_SUCCESS) return r;
    mig_end();
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
    mig_end();
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

int stub_mig_device_of(const void *d, struct nvmlDevice_st **gpu, unsigned *gi, unsigned *ci, int *ret) {
    const struct stub_mig_device *m = d;
    if (!is_mig_handle(m)) return 0;
    mig_begin();
    int alive = valid_mig(m);
    mig_end();
    stub_gpu_view g;
    stub_nvml_gpu_at(m->gpu, &g, gpu);
    *gi = m->gi;
    *ci = m->ci;
    *ret = alive ? R_SUCCESS : R_NOT_FOUND;
    return 1;
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
    mig_end();
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
