/* cndev_stub_smlu.c - the stub CNDev's sMLU management: profiles and instances in the table file
 * every process shares (HOOKCORE_STUB_CNDEV_SMLU; rules in cndev_stub.c's header comment). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cndev_stub.h"

/* The prologue of an sMLU call: cndev_stub_check, sMLU mode on, the table read into *t; locked (*fd
   >= 0) to be written back when `write`, else read as it stands (*fd -1: a reader needs no lock, the
   file is replaced whole, and a container may see it read-only). */
static cndevRet_t begin(const char *call, cndevDevice_t dev, const void *out, const int32_t *version, int *d,
                        cmb_table *t, int *fd, int write) {
    cndevRet_t r = cndev_stub_check(call, dev, out, version, d);
    if (r) return r;
    if (!cmb_get_int(&g_dev[*d], "smlu", 1)) return CNDEV_ERROR_NOT_SUPPORTED;
    *fd = -1;
    if (!write) return cmb_table_read(t) == 0 ? CNDEV_SUCCESS : CNDEV_ERROR_UNKNOWN;
    *fd = cmb_table_lock(t);
    return *fd < 0 ? CNDEV_ERROR_UNKNOWN : CNDEV_SUCCESS;
}

static void profile_name(const cmb_profile *p, char *out, size_t len) {
    snprintf(out, len, "%uq.%llumb", p->quota, p->memory >> 20);
}

static int instances_of(const cmb_table *t, int slot, int profile) {
    int n = 0;
    for (int i = 0; i < t->ninstances; i++) n += t->instances[i].slot == slot && t->instances[i].profile == profile;
    return n;
}

CNDEV_API cndevRet_t cndevGetSMluProfileIdInfo(cndevSMluProfileIdInfo_t *info, cndevDevice_t dev) {
    int d, fd;
    cmb_table t;
    cndevRet_t r = begin("cndevGetSMluProfileIdInfo", dev, info, info ? &info->version : NULL, &d, &t, &fd, 0);
    if (r) return r;
    info->count = 0;
    for (int i = 0; i < t.nprofiles && info->count < 128; i++) {
        if (t.profiles[i].slot == g_dev[d].slot) info->profileId[info->count++] = t.profiles[i].id;
    }
    return CNDEV_SUCCESS;
}

CNDEV_API cndevRet_t cndevGetSMluProfileInfo(cndevSMluProfileInfo_t *info, int32_t profile, cndevDevice_t dev) {
    int d, fd;
    cmb_table t;
    cndevRet_t r = begin("cndevGetSMluProfileInfo", dev, info, info ? &info->version : NULL, &d, &t, &fd, 0);
    if (r) return r;
    int slot = g_dev[d].slot;
    const cmb_profile *p = cmb_profile_of(&t, slot, profile);
    if (p) {
        unsigned long long total = g_dev[d].memory / p->memory, used = cmb_slot_used(&t, slot);
        unsigned long long room = (g_dev[d].memory - (used < g_dev[d].memory ? used : g_dev[d].memory)) / p->memory;
        info->profileId = p->id;
        profile_name(p, info->name, sizeof info->name);
        info->totalCapacity = (uint32_t)total;
        info->remainCapacity = (uint32_t)room;
        info->mluQuota[0] = p->quota, info->mluQuota[1] = 0;
        info->memorySize[0] = p->memory, info->memorySize[1] = 0;
    }
    return p ? CNDEV_SUCCESS : CNDEV_ERROR_NOT_FOUND;
}

CNDEV_API cndevRet_t cndevCreateSMluProfileInfo(cndevSMluSet_t *set, int32_t *profile, cndevDevice_t dev) {
    int d, fd;
    cmb_table t;
    if (!profile) return CNDEV_ERROR_INVALID_ARGUMENT;
    cndevRet_t r = begin("cndevCreateSMluProfileInfo", dev, set, set ? &set->version : NULL, &d, &t, &fd, 1);
    if (r) return r;
    int slot = g_dev[d].slot, next = 1;
    if (set->mluQuota < 1 || set->mluQuota > 100 || set->memorySize == 0 || set->memorySize > g_dev[d].memory) {
        r = CNDEV_ERROR_INVALID_ARGUMENT;
    } else if (t.nprofiles >= CMB_MAX_PROFILES) {
        r = CNDEV_ERROR_INSUFFICIENT_SPACE;
    }
    for (int i = 0; !r && i < t.nprofiles; i++) {
        const cmb_profile *p = &t.profiles[i];
        if (p->slot != slot) continue;
        if (p->quota == set->mluQuota && p->memory == set->memorySize) r = CNDEV_ERROR_DUPLICATE;
        if (p->id >= next) next = p->id + 1;
    }
    if (!r) {
        t.profiles[t.nprofiles++] = (cmb_profile){slot, next, set->mluQuota, set->memorySize};
        *profile = next;
    }
    return cmb_table_unlock(fd, &t, !r) != 0 && !r ? CNDEV_ERROR_UNKNOWN : r;
}

CNDEV_API cndevRet_t cndevDestroySMluProfileInfo(int32_t profile, cndevDevice_t dev) {
    int d, fd;
    cmb_table t;
    cndevRet_t r = begin("cndevDestroySMluProfileInfo", dev, &profile, NULL, &d, &t, &fd, 1);
    if (r) return r;
    int slot = g_dev[d].slot, at = -1;
    for (int i = 0; i < t.nprofiles; i++) at = t.profiles[i].slot == slot && t.profiles[i].id == profile ? i : at;
    r = at < 0 ? CNDEV_ERROR_NOT_FOUND : instances_of(&t, slot, profile) ? CNDEV_ERROR_IN_USE : CNDEV_SUCCESS;
    if (!r) t.profiles[at] = t.profiles[--t.nprofiles];
    return cmb_table_unlock(fd, &t, !r) != 0 && !r ? CNDEV_ERROR_UNKNOWN : r;
}

/* An instance name: 1..99 printable characters without spaces; "" is stored as "-". */
static int name_ok(const char *name) {
    size_t n = strlen(name);
    if (n >= CMB_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!isgraph((unsigned char)name[i])) return 0;
    }
    return 1;
}

CNDEV_API cndevRet_t cndevCreateSMluInstanceByProfileId(cndevMluInstance_t *handle, uint32_t profile, cndevDevice_t dev,
                                                        char *name) {
    int d, fd;
    cmb_table t;
    if (!name || !name_ok(name)) return CNDEV_ERROR_INVALID_ARGUMENT;
    const char *stored = *name ? name : "-";
    cndevRet_t r = begin("cndevCreateSMluInstanceByProfileId", dev, handle, NULL, &d, &t, &fd, 1);
    if (r) return r;
    int slot = g_dev[d].slot, id = 1;
    const cmb_profile *p = cmb_profile_of(&t, slot, (int)profile);
    if (!p) {
        r = CNDEV_ERROR_NOT_FOUND;
    } else if (t.ninstances >= CMB_MAX_INSTANCES || cmb_slot_used(&t, slot) + p->memory > g_dev[d].memory) {
        r = CNDEV_ERROR_INSUFFICIENT_SPACE;
    }
    for (int i = 0; !r && i < t.ninstances; i++) {
        const cmb_instance *in = &t.instances[i];
        if (in->slot == slot && *name && strcmp(in->name, name) == 0) r = CNDEV_ERROR_DUPLICATE;
    }
    for (int busy = 1; !r && busy; id += busy) { /* the smallest free instance id on the MLU */
        busy = 0;
        for (int i = 0; i < t.ninstances; i++) busy |= t.instances[i].slot == slot && t.instances[i].id == id;
    }
    if (!r) {
        cmb_instance *in = &t.instances[t.ninstances++];
        *in = (cmb_instance){slot, id, (int)profile, {0}};
        memcpy(in->name, stored, strlen(stored) + 1);
        *handle = id << 8 | slot;
    }
    return cmb_table_unlock(fd, &t, !r) != 0 && !r ? CNDEV_ERROR_UNKNOWN : r;
}

static void fill_info(cndevSMluInfo_t *out, const cmb_table *t, int d, const cmb_instance *in) {
    const cmb_profile *p = cmb_profile_of(t, in->slot, in->profile);
    int32_t version = out->version;
    memset(out, 0, sizeof *out);
    out->version = version;
    out->profileId = in->profile;
    out->instanceId = in->id;
    /* the MLU's UUID with the instance id in its last group */
    snprintf((char *)out->uuid, sizeof out->uuid, "%.24s%012x", g_dev[d].uuid + 4, (unsigned)in->id);
    unsigned dom = 0, bus = 0x10u + (unsigned)d, device = 0, fn = 0;
    const char *pci = cmb_get(&g_dev[d], "pci");
    if (pci) sscanf(pci, "%x:%x:%x.%x", &dom, &bus, &device, &fn);
    out->domain = (int32_t)dom, out->bus = (int32_t)bus, out->device = (int32_t)device, out->function = (int32_t)fn;
    if (p) profile_name(p, out->profileName, sizeof out->profileName);
    snprintf(out->instanceName, sizeof out->instanceName, "%s", strcmp(in->name, "-") ? in->name : "");
    cmb_instance_node(in->slot, in->id, out->devNodeName, sizeof out->devNodeName);
    out->mluQuota[0] = p ? p->quota : 0;
    out->memorySize[0] = p ? p->memory : 0;
}

CNDEV_API cndevRet_t cndevGetAllSMluInstanceInfo(int32_t *count, cndevSMluInfo_t *info, cndevDevice_t dev) {
    int d, fd;
    cmb_table t;
    if (!count || *count < 0) return CNDEV_ERROR_INVALID_ARGUMENT;
    cndevRet_t r = begin("cndevGetAllSMluInstanceInfo", dev, info, info ? &info->version : NULL, &d, &t, &fd, 0);
    if (r) return r;
    int slot = g_dev[d].slot, n = 0;
    for (int i = 0; i < t.ninstances; i++) {
        if (t.instances[i].slot != slot) continue;
        if (n < *count) fill_info(&info[n], &t, d, &t.instances[i]);
        n++;
    }
    r = n > *count ? CNDEV_ERROR_INSUFFICIENT_SPACE : CNDEV_SUCCESS;
    *count = n;
    return r;
}

CNDEV_API cndevRet_t cndevDestroySMluInstanceByInstanceName(cndevDevice_t dev, char *name) {
    int d, fd;
    cmb_table t;
    if (!name || !*name || !name_ok(name)) return CNDEV_ERROR_INVALID_ARGUMENT;
    cndevRet_t r = begin("cndevDestroySMluInstanceByInstanceName", dev, name, NULL, &d, &t, &fd, 1);
    if (r) return r;
    int at = -1;
    for (int i = 0; i < t.ninstances; i++) {
        at = t.instances[i].slot == g_dev[d].slot && strcmp(t.instances[i].name, name) == 0 ? i : at;
    }
    r = at < 0 ? CNDEV_ERROR_NOT_FOUND : CNDEV_SUCCESS;
    if (!r) t.instances[at] = t.instances[--t.ninstances];
    return cmb_table_unlock(fd, &t, !r) != 0 && !r ? CNDEV_ERROR_UNKNOWN : r;
}
