/* mlu_workload.c -- a minimal MLU program that prints the sMLU settings its container was given
 * and shows whether the memory they grant holds.
 *
 * No hook is involved: on a Cambricon node in sMLU mode the vendor's driver holds a container to
 * the sMLU instance whose device node it was given. The program reaches the vendor's libraries
 * as an application does (dlopen of libcndev.so and libcnrt.so), on a node or against the stubs
 * (hookcore/stub). For one MLU (the first visible one, or --device N):
 *
 *   1. its sMLU instance: the MLUs of CAMBRICON_VISIBLE_DEVICES (whole) and VIRTUAL_DEVICES (sMLU
 *      shares: "<mlu node>,<ipcm node>,<instance node>" each), the variables the DRA driver sets in
 *      the vendor's names, numbered by host index ascending; prints smlu_instance=<node> of MLU N
 *      (or "none": a whole MLU), and,
 *      from CNDev's instance list (cndevGetAllSMluInstanceInfo), smlu_name, smlu_quota_percent
 *      and smlu_memory_bytes (or smlu_info=unavailable: no libcndev.so in the container);
 *   2. cnrtSetDevice, cnrtMemGetInfo: prints quota_total_bytes=<total> (the instance's memory
 *      under sMLU, the MLU's otherwise) and free_bytes=<free>;
 *   3. allocates half of <total> (within_quota_alloc=ok), then the rest plus one MiB:
 *      over_quota_alloc=refused (cnrtErrorNoMem) or allowed.
 *
 * Usage: mlu_workload [--device N]   Output: one key=value per line on stdout.
 * Exit status: 0 the over-quota allocation was refused; 1 it was allowed; 2 bad usage; 3 the
 * runtime could not be loaded or the MLU not opened; 4 an allocation within the total failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cnrtRet_t;
enum { CNRT_NO_MEM = 100100, INFO_MAX = 128 };
#define MiB ((size_t)1 << 20)

/* cndevSMluInfo_t, as the public CNDev header lays it out */
typedef struct {
    int32_t version, profileId, instanceId;
    uint8_t uuid[37];
    int32_t domain, bus, device, function;
    char profileName[100], instanceName[100], devNodeName[100];
    uint32_t mluQuota[2];
    unsigned long memorySize[2];
    uint32_t reserved[128];
} smlu_info;

static void *symbol(void *lib, const char *name) {
    void *fn = dlsym(lib, name);
    if (!fn) {
        printf("error=the runtime has no %s\n", name);
        exit(3);
    }
    return fn;
}

/* The host index of the container's MLU `ordinal`: the indices of CAMBRICON_VISIBLE_DEVICES (whole
   MLUs) and of VIRTUAL_DEVICES' entries (sMLU shares) together, ascending; -1 when there is none. */
static int slot_of(int ordinal) {
    int slots[64], n = 0;
    for (const char *p = getenv("CAMBRICON_VISIBLE_DEVICES"); p && *p && n < 64;) {
        slots[n++] = atoi(p);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    for (const char *p = getenv("VIRTUAL_DEVICES"); p && *p && n < 64;) {
        if (sscanf(p, "/dev/cambricon_dev%d", &slots[n]) == 1) n++;
        p = strchr(p, ';');
        p = p ? p + 1 : NULL;
    }
    for (int i = 1; i < n; i++) { /* insertion sort: a handful of MLUs */
        for (int k = i; k > 0 && slots[k - 1] > slots[k]; k--) {
            int t = slots[k];
            slots[k] = slots[k - 1], slots[k - 1] = t;
        }
    }
    return ordinal >= 0 && ordinal < n ? slots[ordinal] : -1;
}

/* The instance node VIRTUAL_DEVICES gives host slot `slot` (its entry's last path), or 0. */
static int instance_node(int slot, char *out, size_t len) {
    char want[64];
    snprintf(want, sizeof want, "/dev/cambricon_dev%d,", slot);
    for (const char *p = getenv("VIRTUAL_DEVICES"); p && *p;) {
        const char *end = strchr(p, ';');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *last = memrchr(p, ',', n);
        size_t k = last ? (size_t)(p + n - last - 1) : 0;
        if (strncmp(p, want, strlen(want)) == 0 && last && k < len) {
            memcpy(out, last + 1, k);
            out[k] = 0;
            return 1;
        }
        p += n + (end ? 1 : 0);
    }
    return 0;
}

/* What CNDev says of the instance at `node`, printed; 0, or -1 when CNDev cannot tell. */
static int print_instance(const char *node) {
    void *lib = dlopen("libcndev.so", RTLD_NOW);
    if (!lib) return -1;
    int (*init)(int) = (int (*)(int))dlsym(lib, "cndevInit");
    int (*count_fn)(int32_t *) = (int (*)(int32_t *))dlsym(lib, "cndevGetDeviceCount");
    int (*handle_fn)(int, int32_t *) = (int (*)(int, int32_t *))dlsym(lib, "cndevGetDeviceHandleByIndex");
    int (*all)(int32_t *, smlu_info *, int32_t) =
        (int (*)(int32_t *, smlu_info *, int32_t))dlsym(lib, "cndevGetAllSMluInstanceInfo");
    int32_t card[2] = {6, 0}; /* cndevCardInfo_t {version, number} */
    if (!init || !count_fn || !handle_fn || !all || init(0) != 0 || count_fn(card) != 0) return -1;
    static smlu_info infos[INFO_MAX];
    for (int i = 0; i < card[1]; i++) {
        int32_t handle, n = INFO_MAX;
        infos[0].version = 6;
        if (handle_fn(i, &handle) != 0 || all(&n, infos, handle) != 0) continue;
        for (int k = 0; k < n; k++) {
            if (strcmp(infos[k].devNodeName, node) != 0) continue;
            printf("smlu_name=%s\nsmlu_quota_percent=%u\nsmlu_memory_bytes=%lu\n", infos[k].instanceName,
                   infos[k].mluQuota[0], infos[k].memorySize[0]);
            return 0;
        }
    }
    return -1;
}

int main(int argc, char **argv) {
    int ordinal = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            ordinal = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--device N]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char node[128];
    int slot = slot_of(ordinal);
    if (slot >= 0 && instance_node(slot, node, sizeof node)) {
        printf("smlu_instance=%s\n", node);
        if (print_instance(node) != 0) printf("smlu_info=unavailable\n");
    } else {
        printf("smlu_instance=none\n");
    }

    void *cnrt = dlopen("libcnrt.so", RTLD_NOW);
    if (!cnrt) {
        printf("error=cannot load libcnrt.so: %s\n", dlerror());
        return 3;
    }
    cnrtRet_t (*set_device)(int) = (cnrtRet_t(*)(int))symbol(cnrt, "cnrtSetDevice");
    cnrtRet_t (*mem_info)(size_t *, size_t *) = (cnrtRet_t(*)(size_t *, size_t *))symbol(cnrt, "cnrtMemGetInfo");
    cnrtRet_t (*alloc)(void **, size_t) = (cnrtRet_t(*)(void **, size_t))symbol(cnrt, "cnrtMalloc");
    cnrtRet_t (*release)(void *) = (cnrtRet_t(*)(void *))symbol(cnrt, "cnrtFree");
    cnrtRet_t r = set_device(ordinal);
    size_t free_b = 0, total = 0;
    if (r == 0) r = mem_info(&free_b, &total);
    if (r != 0) {
        printf("error=MLU %d cannot be opened (cnrtRet_t %d)\n", ordinal, r);
        return 3;
    }
    printf("quota_total_bytes=%zu\nfree_bytes=%zu\n", total, free_b);
    void *half = NULL, *rest = NULL;
    r = alloc(&half, total / 2);
    if (r != 0) {
        printf("within_quota_alloc=failed (cnrtRet_t %d)\n", r);
        return 4;
    }
    printf("within_quota_alloc=ok\n");
    r = alloc(&rest, total - total / 2 + MiB);
    printf("over_quota_alloc=%s\n", r == CNRT_NO_MEM ? "refused" : r == 0 ? "allowed" : "failed");
    if (r == 0) release(rest);
    release(half);
    return r == CNRT_NO_MEM ? 0 : 1;
}
