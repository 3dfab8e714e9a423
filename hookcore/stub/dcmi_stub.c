/* dcmi_stub.c - a stub libdcmi.so: Huawei's Ascend device management interface, faked.
 *
 * For machines without an NPU: the Ascend driver's discovery and health code runs its real ctypes
 * path against this library (drivers/ascend/fake.py loads it). It answers the DCMI calls the driver
 * makes, with the prototypes and struct layouts of Huawei's DCMI API reference (written from the
 * public documentation; no Huawei header is used), for the NPUs of HOOKCORE_STUB_NPUS
 * (ascend_devices.h; DCMI-only keys in README.md). Like the real library it enumerates every NPU
 * of the node (it ignores ASCEND_VISIBLE_DEVICES).
 *
 * Other knobs:
 *   HOOKCORE_STUB_DCMI_DRIVER   dcmi_get_driver_version ("25.0.rc1.1")
 *   HOOKCORE_STUB_DCMI_FAIL     call[@uuid]=code,...: the named call returns DCMI error `code`
 *                               (negative, e.g. -8255 = DCMI_ERR_CODE_NOT_SUPPORT), for every NPU
 *                               or the one with that uuid
 *   HOOKCORE_STUB_DCMI_STATE    a file re-read on every health query; lines
 *                                 health <uuid> <0|1|2|3|lost>     (lost: 0xFFFFFFFF, device gone)
 *                                 errors <uuid> <hex code>...       (dcmi_get_device_errorcode_v2)
 *                               the last line naming a uuid and a kind wins.
 *   HOOKCORE_STUB_DCMI_PROCESSES a file re-read at every dcmi_get_device_resource_info: the
 *                               processes on the NPUs, one a line `<phy id> <host pid> <memory
 *                               bytes>` (the phy ID and memory unsigned decimals within 32 and 64
 *                               bits, the pid a decimal within int: what the struct holds, PID 0
 *                               and negative PIDs included; '#' comments and blank lines skipped;
 *                               at most 1024 lines). Any other line is skipped, named on stderr at
 *                               each query of the first NPU described (once a poll). See the
 *                               process query below.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ascend_devices.h"
#include "stub_grammar.h"

#define DCMI_API __attribute__((visibility("default")))

#define DCMI_OK                    0
#define DCMI_ERR_INVALID_PARAMETER (-8001)
#define DCMI_ERR_INNER             (-8005)
#define DCMI_ERR_INVALID_DEVICE_ID (-8007)
#define DCMI_ERR_DEVICE_NOT_EXIST  (-8008)
#define DCMI_ERR_NOT_READY         (-8012)
#define DCMI_ERR_NOT_SUPPORT       (-8255)

#define MAX_CHIP_NAME_LEN 32
#define MAX_LENTH         256
#define DIE_ID_COUNT      5

struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};
struct dcmi_pcie_info_all {
    unsigned int venderid, subvenderid, deviceid, subdeviceid;
    int domain;
    unsigned int bdf_busid, bdf_deviceid, bdf_funcid;
    unsigned char reserve[32];
};
struct dcmi_hbm_info {
    unsigned long long memory_size; /* MB */
    unsigned int freq;
    unsigned long long memory_usage; /* MB */
    int temp;
    unsigned int bandwith_util_rate;
};
struct dcmi_get_memory_info_stru {
    unsigned long long memory_size; /* MB */
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};
struct dcmi_die_id {
    unsigned int soc_die[DIE_ID_COUNT];
};
struct dcmi_elabel_info {
    char product_name[MAX_LENTH];
    char model[MAX_LENTH];
    char manufacturer[MAX_LENTH];
    char manufacturer_date[MAX_LENTH];
    char serial_number[MAX_LENTH];
};
enum dcmi_die_type { NDIE, VDIE };
enum dcmi_unit_type { NPU_TYPE = 0, MCU_TYPE = 1, CPU_TYPE = 2, INVALID_TYPE = 0xFF };

static asd_device g_dev[ASD_MAX_DEVICES];
static int g_n;
static int g_init;
/* cards in order of first appearance, and the chips of each */
static int g_cards[ASD_MAX_DEVICES], g_ncards;

static int card_of(const asd_device *d, int pos) { return (int)asd_get_int(d, "card", pos); }
static int chip_of(const asd_device *d) { return (int)asd_get_int(d, "chip", 0); }

/* HOOKCORE_STUB_DCMI_FAIL: does `call` fail for device d (NULL: a call about no device)? */
static int injected(const char *call, const asd_device *d) {
    const char *spec = getenv("HOOKCORE_STUB_DCMI_FAIL");
    if (!spec) return 0;
    size_t clen = strlen(call);
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > clen && strncmp(p, call, clen) == 0 && (p[clen] == '=' || p[clen] == '@')) {
            const char *q = p + clen;
            int match = 1;
            if (*q == '@') {
                const char *eq = memchr(q, '=', len - clen);
                if (!eq) return 0;
                size_t ulen = (size_t)(eq - q - 1);
                match = d && strlen(d->uuid) == ulen && strncasecmp(d->uuid, q + 1, ulen) == 0;
                q = eq;
            }
            if (match) return atoi(q + 1);
        }
        p += len + (end ? 1 : 0);
    }
    return 0;
}

#define FAIL_IF_INJECTED(call, d)    \
    do {                             \
        int rc_ = injected(call, d); \
        if (rc_) return rc_;         \
    } while (0)

static asd_device *find(int card_id, int device_id) {
    for (int i = 0; i < g_n; i++)
        if (card_of(&g_dev[i], i) == card_id && chip_of(&g_dev[i]) == device_id) return &g_dev[i];
    return NULL;
}

static asd_device *by_logic(unsigned int logic) {
    for (int i = 0; i < g_n; i++)
        if (asd_get_int(&g_dev[i], "logic", i) == (long long)logic) return &g_dev[i];
    return NULL;
}

#define LOOKUP(d, card, dev, call)             \
    if (!g_init) return DCMI_ERR_NOT_READY;    \
    asd_device *d = find(card, dev);           \
    if (!d) return DCMI_ERR_INVALID_DEVICE_ID; \
    FAIL_IF_INJECTED(call, d)

DCMI_API int dcmi_init(void) {
    FAIL_IF_INJECTED("dcmi_init", NULL);
    g_n = asd_from_env(g_dev, ASD_MAX_DEVICES);
    g_ncards = 0;
    for (int i = 0; i < g_n; i++) {
        int c = card_of(&g_dev[i], i), seen = 0;
        for (int k = 0; k < g_ncards; k++) seen |= g_cards[k] == c;
        if (!seen) g_cards[g_ncards++] = c;
    }
    g_init = 1;
    return DCMI_OK;
}

DCMI_API int dcmi_get_dcmi_version(char *ver, unsigned int len) {
    if (!ver || len == 0) return DCMI_ERR_INVALID_PARAMETER;
    snprintf(ver, len, "%s", "7.0.0-stub");
    return DCMI_OK;
}

DCMI_API int dcmi_get_driver_version(char *ver, unsigned int len) {
    if (!g_init) return DCMI_ERR_NOT_READY;
    FAIL_IF_INJECTED("dcmi_get_driver_version", NULL);
    if (!ver || len == 0) return DCMI_ERR_INVALID_PARAMETER;
    const char *v = getenv("HOOKCORE_STUB_DCMI_DRIVER");
    snprintf(ver, len, "%s", v ? v : "25.0.rc1.1");
    return DCMI_OK;
}

DCMI_API int dcmi_get_card_list(int *card_num, int *card_list, int list_len) {
    if (!g_init) return DCMI_ERR_NOT_READY;
    FAIL_IF_INJECTED("dcmi_get_card_list", NULL);
    if (!card_num || !card_list || list_len < g_ncards) return DCMI_ERR_INVALID_PARAMETER;
    *card_num = g_ncards;
    for (int i = 0; i < g_ncards; i++) card_list[i] = g_cards[i];
    return DCMI_OK;
}

static int chips_in(int card_id) {
    int n = 0;
    for (int i = 0; i < g_n; i++) n += card_of(&g_dev[i], i) == card_id;
    return n;
}

DCMI_API int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    if (!g_init) return DCMI_ERR_NOT_READY;
    FAIL_IF_INJECTED("dcmi_get_device_num_in_card", NULL);
    if (!device_num) return DCMI_ERR_INVALID_PARAMETER;
    int n = chips_in(card_id);
    if (n == 0) return DCMI_ERR_INVALID_DEVICE_ID;
    *device_num = n;
    return DCMI_OK;
}

/* Each fake card has an MCU after its NPU chips, as Atlas boards do: a driver that walks
   0..device_id_max-1 sees only NPUs. */
DCMI_API int dcmi_get_device_id_in_card(int card_id, int *device_id_max, int *mcu_id, int *cpu_id) {
    if (!g_init) return DCMI_ERR_NOT_READY;
    FAIL_IF_INJECTED("dcmi_get_device_id_in_card", NULL);
    if (!device_id_max || !mcu_id || !cpu_id) return DCMI_ERR_INVALID_PARAMETER;
    int n = chips_in(card_id);
    if (n == 0) return DCMI_ERR_INVALID_DEVICE_ID;
    *device_id_max = n;
    *mcu_id = n;
    *cpu_id = -1;
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_type(int card_id, int device_id, enum dcmi_unit_type *type) {
    if (!g_init) return DCMI_ERR_NOT_READY;
    if (!type) return DCMI_ERR_INVALID_PARAMETER;
    int n = chips_in(card_id);
    if (n == 0) return DCMI_ERR_INVALID_DEVICE_ID;
    if (device_id == n) {
        *type = MCU_TYPE;
        return DCMI_OK;
    }
    LOOKUP(d, card_id, device_id, "dcmi_get_device_type");
    (void)d;
    *type = NPU_TYPE;
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_logic_id(int *logic_id, int card_id, int device_id) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_logic_id");
    if (!logic_id) return DCMI_ERR_INVALID_PARAMETER;
    *logic_id = (int)asd_get_int(d, "logic", d - g_dev);
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid) {
    if (!g_init) return DCMI_ERR_NOT_READY;
    asd_device *d = by_logic(logicid);
    if (!d) return DCMI_ERR_INVALID_DEVICE_ID;
    FAIL_IF_INJECTED("dcmi_get_device_phyid_from_logicid", d);
    if (!phyid) return DCMI_ERR_INVALID_PARAMETER;
    *phyid = (unsigned int)asd_get_int(d, "phy", d - g_dev);
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *info) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_chip_info");
    if (!info) return DCMI_ERR_INVALID_PARAMETER;
    memset(info, 0, sizeof *info);
    const char *type = asd_get(d, "type"), *ver = asd_get(d, "ver");
    snprintf((char *)info->chip_type, MAX_CHIP_NAME_LEN, "%s", type ? type : "Ascend");
    snprintf((char *)info->chip_name, MAX_CHIP_NAME_LEN, "%s", d->name);
    snprintf((char *)info->chip_ver, MAX_CHIP_NAME_LEN, "%s", ver ? ver : "V1");
    info->aicore_cnt = (unsigned int)asd_get_int(d, "aicore", 20);
    return DCMI_OK;
}

/* On-chip HBM (910 series). NPUs described with hbm=0 (310P: LPDDR) answer NOT_SUPPORT here and
   report their memory through dcmi_get_device_memory_info_v3, as the real chips do. */
DCMI_API int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *info) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_hbm_info");
    if (!info) return DCMI_ERR_INVALID_PARAMETER;
    if (!asd_get_int(d, "hbm", 1)) return DCMI_ERR_NOT_SUPPORT;
    memset(info, 0, sizeof *info);
    info->memory_size = d->memory >> 20;
    info->freq = 1600;
    info->memory_usage = (unsigned long long)asd_get_int(d, "used", 0) >> 20;
    info->temp = 40;
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *info) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_memory_info_v3");
    if (!info) return DCMI_ERR_INVALID_PARAMETER;
    memset(info, 0, sizeof *info);
    if (asd_get_int(d, "hbm", 1)) {
        /* a 910's DDR is the control CPU's memory, not what workloads allocate: small */
        info->memory_size = 15 * 1024;
        info->memory_available = 12 * 1024;
    } else {
        info->memory_size = d->memory >> 20;
        info->memory_available = d->memory >> 20;
    }
    info->freq = 3200;
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *info) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_pcie_info_v2");
    if (!info) return DCMI_ERR_INVALID_PARAMETER;
    memset(info, 0, sizeof *info);
    unsigned int domain = 0, bus = 0x10 + (unsigned)(d - g_dev), dev = 0, fn = 0;
    const char *pci = asd_get(d, "pci");
    if (pci && sscanf(pci, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return DCMI_ERR_INNER;
    info->venderid = 0x19e5;
    info->subvenderid = 0x0200;
    info->deviceid = (unsigned int)asd_get_int(d, "pciid", 0xd802);
    info->subdeviceid = 0x0100;
    info->domain = (int)domain;
    info->bdf_busid = bus;
    info->bdf_deviceid = dev;
    info->bdf_funcid = fn;
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type type, struct dcmi_die_id *die) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_die_v2");
    if (!die || (type != NDIE && type != VDIE)) return DCMI_ERR_INVALID_PARAMETER;
    for (int i = 0; i < DIE_ID_COUNT; i++) die->soc_die[i] = type == VDIE ? d->die[i] : d->die[i] ^ 0x5a5a5a5au;
    return DCMI_OK;
}

DCMI_API int dcmi_get_device_elabel_info(int card_id, int device_id, struct dcmi_elabel_info *info) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_elabel_info");
    if (!info) return DCMI_ERR_INVALID_PARAMETER;
    memset(info, 0, sizeof *info);
    const char *serial = asd_get(d, "serial");
    snprintf(info->product_name, MAX_LENTH, "Atlas stub");
    snprintf(info->manufacturer, MAX_LENTH, "Huawei");
    if (serial) snprintf(info->serial_number, MAX_LENTH, "%s", serial);
    return DCMI_OK;
}

/* The current health and error codes of d: the description's, overridden by the state file. */
static void current_state(const asd_device *d, unsigned int *health, unsigned int *codes, int *ncodes, int max) {
    *health = (unsigned int)asd_get_int(d, "health", 0);
    *ncodes = 0;
    const char *path = getenv("HOOKCORE_STUB_DCMI_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char kind[16], uuid[ASD_VALUE_MAX];
        int off = 0;
        if (sscanf(line, "%15s %95s %n", kind, uuid, &off) < 2 || strcasecmp(uuid, d->uuid) != 0) continue;
        const char *rest = line + off;
        if (strcmp(kind, "health") == 0) {
            *health = strncmp(rest, "lost", 4) == 0 ? 0xFFFFFFFFu : (unsigned int)strtoul(rest, NULL, 0);
        } else if (strcmp(kind, "errors") == 0) {
            *ncodes = 0;
            char *end;
            for (;;) {
                unsigned long c = strtoul(rest, &end, 16);
                if (end == rest || *ncodes >= max) break;
                codes[(*ncodes)++] = (unsigned int)c;
                rest = end;
            }
        }
    }
    fclose(f);
}

DCMI_API int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_health");
    if (!health) return DCMI_ERR_INVALID_PARAMETER;
    unsigned int codes[1];
    int n;
    current_state(d, health, codes, &n, 0);
    return DCMI_OK; /* 0xFFFFFFFF = the device does not exist (DCMI's value, not an error code) */
}

DCMI_API int dcmi_get_device_errorcode_v2(int card_id, int device_id, int *error_count, unsigned int *list,
                                          unsigned int list_len) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_errorcode_v2");
    if (!error_count || !list) return DCMI_ERR_INVALID_PARAMETER;
    unsigned int health;
    current_state(d, &health, list, error_count, (int)list_len);
    return DCMI_OK;
}

/* --- processes (HOOKCORE_STUB_DCMI_PROCESSES) ---------------------------------------------------
 * dcmi_get_device_resource_info(card, chip, proc_info, proc_num): the processes on one NPU chip,
 * each its host PID and the device memory (bytes) it holds there. The call takes no buffer size:
 * Huawei's reference gives at most 32 processes, so callers pass room for 32 and, like the real
 * library, this one writes no more (the first 32 lines of the chip; *proc_num is what it wrote). */

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage; /* bytes; 64 bits on the LP64 hosts DCMI ships for */
};
#define DCMI_MAX_PROC_NUM 32
#define PROC_LINES_MAX    1024

typedef struct proc_line {
    unsigned int phy;
    int pid;
    unsigned long long memory;
} proc_line;

/* A decimal at *p (blanks before it skipped) ending at a blank or the line's end, within
   [lo, hi] (`negative`: a leading '-' allowed): 1 with *out set and *p past it; 0 otherwise. */
static int decimal(const char **p, int negative, long long lo, unsigned long long hi, unsigned long long *out) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    int minus = negative && *s == '-';
    const char *digits = s + minus;
    if (*digits < '0' || *digits > '9') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, 10);
    if (errno || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) return 0;
    if (minus ? v > (unsigned long long)(-(lo + 1)) + 1 : v > hi) return 0;
    *out = minus ? (unsigned long long)(-(long long)(v - 1) - 1) : v; /* two's complement, no overflow */
    *p = end;
    return 1;
}

static int parse_proc(const char *p, void *record) {
    proc_line *out = record;
    unsigned long long phy, pid, memory;
    if (!decimal(&p, 0, 0, UINT_MAX, &phy) || !decimal(&p, 1, INT_MIN, INT_MAX, &pid) ||
        !decimal(&p, 0, 0, ULONG_MAX, &memory))
        return 0;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p && *p != '\n') return 0;
    *out = (proc_line){(unsigned int)phy, (int)(long long)pid, memory};
    return 1;
}

/* The listed processes now, at most `max` lines; `say`: name each malformed line on stderr. */
static unsigned read_procs(proc_line *out, unsigned max, int say) {
    return stub_read_records(
        "HOOKCORE_STUB_DCMI_PROCESSES",
        "'<phy id> <host pid> <memory bytes>' (decimals: the phy ID and memory unsigned, the pid within int)", say,
        parse_proc, out, sizeof *out, max);
}

DCMI_API int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *proc_info,
                                           int *proc_num) {
    LOOKUP(d, card_id, device_id, "dcmi_get_device_resource_info");
    if (!proc_info || !proc_num) return DCMI_ERR_INVALID_PARAMETER;
    proc_line lines[PROC_LINES_MAX]; /* 16 KiB of stack: nothing shared between threads */
    unsigned n = read_procs(lines, PROC_LINES_MAX, d == &g_dev[0]);
    unsigned phy = (unsigned)asd_get_int(d, "phy", d - g_dev);
    int found = 0;
    for (unsigned i = 0; i < n && found < DCMI_MAX_PROC_NUM; i++)
        if (lines[i].phy == phy) proc_info[found++] = (struct dcmi_proc_mem_info){lines[i].pid, lines[i].memory};
    *proc_num = found;
    return DCMI_OK;
}
