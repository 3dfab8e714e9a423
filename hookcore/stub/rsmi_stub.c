/* rsmi_stub.c - a stub ROCm SMI library (librocm_smi64.so): what the Hygon DCU driver's discovery
 * and health ask of it, for the devices of HOOKCORE_STUB_HIP_DEVICES (hip_devices.h).
 *
 * Prototypes, enum values and struct layouts are those of the public ROCm SMI reference
 * (rocm_smi.h); no AMD or Hygon code is used. drivers/hygon_dcu/fake.py loads this library by
 * path, so the driver's ctypes bindings run unchanged against it.
 *
 * Per device, besides pci, memory and name: `uuid` the unique ID (16 hex digits, "DCU-" before
 * them optional; default derived from the bus ID), `serial` (default none: NOT_SUPPORTED), `devid` the PCI device ID (0x6320), `vendor`
 * the PCI vendor ID (0x1d94), `render` the DRM render minor (128 + position), `ecc` 0 for a
 * device without ECC reporting (NOT_SUPPORTED; default 1).
 *
 * - HOOKCORE_STUB_RSMI_DRIVER: rsmi_version_str_get(RSMI_SW_COMP_DRIVER) ("6.3.8").
 * - HOOKCORE_STUB_RSMI_FAIL=call[@pci]=code,...: the named call returns rsmi_status_t `code`, for
 *   every device or the one with that bus ID.
 * - HOOKCORE_STUB_RSMI_STATE=<file>, re-read at every query: lines `ecc <pci> <uncorrectable>
 *   [<correctable>]` (the UMC block's counts), `lost <pci>` (every query of it fails with
 *   RSMI_STATUS_FILE_ERROR, as when its sysfs node is gone), `back <pci>` (it answers again); the
 *   last line of each kind for a bus ID wins.
 * - HOOKCORE_STUB_RSMI_PROCESSES=<file>, re-read at every query: the processes on the devices, one
 *   a line `<device index> <host pid> <vram bytes> [<cu occupancy %>]` (unsigned decimals: a pid
 *   fits 32 bits, VRAM 64, occupancy 0..100; '#' comments and blank lines skipped). What the
 *   struct can hold is passed on, PID 0 and a VRAM of 2^64-1 included, so tests see what the
 *   driver makes of them; anything else (a negative or out-of-range number, a missing or extra
 *   field) is skipped, with one stderr line naming it at each count of the list (procs NULL, what
 *   a caller asks first). A line's device is ROCm SMI's index; one past the last device is left
 *   out, as the library leaves out devices the caller cannot see. At most 1024 lines are read.
 *   Unset or unreadable: no process anywhere. See the process API below.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hip_devices.h"
#include "stub_grammar.h"

#define RSMI_API __attribute__((visibility("default")))

typedef int rsmi_status_t;
enum {
    RSMI_STATUS_SUCCESS = 0,
    RSMI_STATUS_INVALID_ARGS = 1,
    RSMI_STATUS_NOT_SUPPORTED = 2,
    RSMI_STATUS_FILE_ERROR = 3,
    RSMI_STATUS_INIT_ERROR = 8,
    RSMI_STATUS_NOT_FOUND = 10,
    RSMI_STATUS_INSUFFICIENT_SIZE = 11,
};
#define RSMI_MEM_TYPE_VRAM  0
#define RSMI_GPU_BLOCK_UMC  1
#define RSMI_SW_COMP_DRIVER 0

typedef struct rsmi_error_count_t {
    uint64_t correctable_err;
    uint64_t uncorrectable_err;
} rsmi_error_count_t;

static hd_device g_dev[HD_MAX_DEVICES];
static int g_n;
static int g_inited;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* HOOKCORE_STUB_RSMI_FAIL: the code for `call` on device `d` (-1: none). */
static int injected(const char *call, int d) {
    const char *spec = getenv("HOOKCORE_STUB_RSMI_FAIL");
    if (!spec) return -1;
    size_t cl = strlen(call);
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[160];
        if (n < sizeof item) {
            memcpy(item, p, n);
            item[n] = 0;
            char *eq = strchr(item, '=');
            char *at = strchr(item, '@');
            if (eq && (size_t)((at && at < eq ? at : eq) - item) == cl && strncmp(item, call, cl) == 0) {
                *eq = 0;
                if (!at || at > eq || (d >= 0 && strcasecmp(at + 1, g_dev[d].pci) == 0)) return atoi(eq + 1);
            }
        }
        p += n + (end ? 1 : 0);
    }
    return -1;
}

typedef struct dev_state {
    int lost;
    uint64_t ue, ce;
} dev_state;

static dev_state state_of(int d) {
    dev_state s = {0, 0, 0};
    const char *path = getenv("HOOKCORE_STUB_RSMI_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return s;
    char line[256], word[16], pci[32];
    while (fgets(line, sizeof line, f)) {
        unsigned long long ue = 0, ce = 0;
        int k = sscanf(line, "%15s %31s %llu %llu", word, pci, &ue, &ce);
        if (k < 2 || strcasecmp(pci, g_dev[d].pci) != 0) continue;
        if (!strcmp(word, "lost")) s.lost = 1;
        if (!strcmp(word, "back")) s.lost = 0;
        if (!strcmp(word, "ecc") && k >= 3) s.ue = ue, s.ce = k >= 4 ? ce : 0;
    }
    fclose(f);
    return s;
}

/* The common prologue of a device query: initialised, a known device, no injected failure, not
   lost. RSMI_STATUS_SUCCESS or the status to return. */
static rsmi_status_t check(const char *call, uint32_t d, const void *out) {
    if (!g_inited) return RSMI_STATUS_INIT_ERROR;
    if (d >= (uint32_t)g_n || !out) return RSMI_STATUS_INVALID_ARGS;
    int code = injected(call, (int)d);
    if (code >= 0) return code;
    return state_of((int)d).lost ? RSMI_STATUS_FILE_ERROR : RSMI_STATUS_SUCCESS;
}

static rsmi_status_t copy_text(const char *text, char *out, size_t len) {
    if (!out || len == 0) return RSMI_STATUS_INVALID_ARGS;
    snprintf(out, len, "%s", text);
    return strlen(text) >= len ? RSMI_STATUS_INSUFFICIENT_SIZE : RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_init(uint64_t flags) {
    (void)flags;
    int code = injected("rsmi_init", -1);
    if (code >= 0) return code;
    pthread_mutex_lock(&g_lock);
    g_inited++;
    g_n = hd_from_env(g_dev, HD_MAX_DEVICES); /* every init reads the description again (tests change it) */
    pthread_mutex_unlock(&g_lock);
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_shut_down(void) {
    pthread_mutex_lock(&g_lock);
    if (g_inited) g_inited--;
    pthread_mutex_unlock(&g_lock);
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_num_monitor_devices(uint32_t *n) {
    if (!g_inited) return RSMI_STATUS_INIT_ERROR;
    if (!n) return RSMI_STATUS_INVALID_ARGS;
    int code = injected("rsmi_num_monitor_devices", -1);
    if (code >= 0) return code;
    *n = (uint32_t)g_n;
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_version_str_get(int component, char *out, uint32_t len) {
    if (!g_inited) return RSMI_STATUS_INIT_ERROR;
    if (component != RSMI_SW_COMP_DRIVER) return RSMI_STATUS_INVALID_ARGS;
    int code = injected("rsmi_version_str_get", -1);
    if (code >= 0) return code;
    const char *v = getenv("HOOKCORE_STUB_RSMI_DRIVER");
    return copy_text(v ? v : "6.3.8", out, len);
}

RSMI_API rsmi_status_t rsmi_dev_name_get(uint32_t d, char *out, size_t len) {
    rsmi_status_t r = check("rsmi_dev_name_get", d, out);
    return r ? r : copy_text(g_dev[d].name, out, len);
}

RSMI_API rsmi_status_t rsmi_dev_serial_number_get(uint32_t d, char *out, uint32_t len) {
    rsmi_status_t r = check("rsmi_dev_serial_number_get", d, out);
    if (r) return r;
    const char *serial = hd_get(&g_dev[d], "serial");
    return serial ? copy_text(serial, out, len) : RSMI_STATUS_NOT_SUPPORTED;
}

RSMI_API rsmi_status_t rsmi_dev_id_get(uint32_t d, uint16_t *id) {
    rsmi_status_t r = check("rsmi_dev_id_get", d, id);
    if (!r) *id = (uint16_t)hd_get_int(&g_dev[d], "devid", 0x6320);
    return r;
}

RSMI_API rsmi_status_t rsmi_dev_vendor_id_get(uint32_t d, uint16_t *id) {
    rsmi_status_t r = check("rsmi_dev_vendor_id_get", d, id);
    if (!r) *id = (uint16_t)hd_get_int(&g_dev[d], "vendor", 0x1d94);
    return r;
}

/* BDFID = domain << 32 | bus << 8 | device << 3 | function (rocm_smi.h). */
RSMI_API rsmi_status_t rsmi_dev_pci_id_get(uint32_t d, uint64_t *bdfid) {
    rsmi_status_t r = check("rsmi_dev_pci_id_get", d, bdfid);
    if (!r) {
        const hd_device *x = &g_dev[d];
        *bdfid = (uint64_t)x->domain << 32 | (uint64_t)x->bus << 8 | (uint64_t)x->dev << 3 | x->fn;
    }
    return r;
}

RSMI_API rsmi_status_t rsmi_dev_unique_id_get(uint32_t d, uint64_t *id) {
    rsmi_status_t r = check("rsmi_dev_unique_id_get", d, id);
    if (r) return r;
    const char *uid = hd_get(&g_dev[d], "uuid");
    if (uid) {
        *id = strtoull(strncasecmp(uid, "DCU-", 4) == 0 ? uid + 4 : uid, NULL, 16);
    } else { /* derived from the bus ID: distinct per device, stable across runs */
        const hd_device *x = &g_dev[d];
        *id = 0x5a1c000000000000ULL ^
              ((uint64_t)x->domain << 24 | (uint64_t)x->bus << 16 | x->dev << 8 | x->fn) * 0x9e3779b1ULL;
    }
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_dev_drm_render_minor_get(uint32_t d, uint32_t *minor) {
    rsmi_status_t r = check("rsmi_dev_drm_render_minor_get", d, minor);
    if (!r) *minor = (uint32_t)hd_get_int(&g_dev[d], "render", 128 + (long long)d);
    return r;
}

RSMI_API rsmi_status_t rsmi_dev_memory_total_get(uint32_t d, int type, uint64_t *total) {
    rsmi_status_t r = check("rsmi_dev_memory_total_get", d, total);
    if (r) return r;
    if (type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_NOT_SUPPORTED;
    *total = g_dev[d].memory;
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_dev_memory_usage_get(uint32_t d, int type, uint64_t *used) {
    rsmi_status_t r = check("rsmi_dev_memory_usage_get", d, used);
    if (r) return r;
    if (type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_NOT_SUPPORTED;
    *used = 0;
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_dev_ecc_count_get(uint32_t d, uint64_t block, rsmi_error_count_t *ec) {
    rsmi_status_t r = check("rsmi_dev_ecc_count_get", d, ec);
    if (r) return r;
    if (!hd_get_int(&g_dev[d], "ecc", 1) || block != RSMI_GPU_BLOCK_UMC) return RSMI_STATUS_NOT_SUPPORTED;
    dev_state s = state_of((int)d);
    ec->correctable_err = s.ce;
    ec->uncorrectable_err = s.ue;
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_status_string(rsmi_status_t status, const char **text) {
    static const char *names[] = {"RSMI_STATUS_SUCCESS",
                                  "RSMI_STATUS_INVALID_ARGS",
                                  "RSMI_STATUS_NOT_SUPPORTED",
                                  "RSMI_STATUS_FILE_ERROR",
                                  "RSMI_STATUS_PERMISSION",
                                  "RSMI_STATUS_OUT_OF_RESOURCES",
                                  "RSMI_STATUS_INTERNAL_EXCEPTION",
                                  "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
                                  "RSMI_STATUS_INIT_ERROR",
                                  "RSMI_STATUS_NOT_YET_IMPLEMENTED",
                                  "RSMI_STATUS_NOT_FOUND",
                                  "RSMI_STATUS_INSUFFICIENT_SIZE"};
    if (!text) return RSMI_STATUS_INVALID_ARGS;
    *text = status >= 0 && status < (int)(sizeof names / sizeof names[0]) ? names[status] : "RSMI_STATUS_UNKNOWN_ERROR";
    return RSMI_STATUS_SUCCESS;
}

/* --- processes (HOOKCORE_STUB_RSMI_PROCESSES) ---------------------------------------------------
 * rocm_smi.h's process API: rsmi_compute_process_info_get lists every process the kernel's KFD
 * knows (the real library fills only process_id and pasid; so does this one, the rest 0),
 * rsmi_compute_process_gpus_get the devices a process has queues on, and
 * rsmi_compute_process_info_by_device_get its VRAM (and CU occupancy) on one device: 0 where it
 * has none there, RSMI_STATUS_NOT_FOUND once the process is gone. */

typedef struct rsmi_process_info_t {
    uint32_t process_id;
    uint32_t pasid;
    uint64_t vram_usage;
    uint64_t sdma_usage;   /* microseconds */
    uint32_t cu_occupancy; /* percent of the device's CUs, or CU_OCCUPANCY_INVALID */
} rsmi_process_info_t;
#define CU_OCCUPANCY_INVALID 0xFFFFFFFFu
#define PROCS_MAX            1024

typedef struct proc_line {
    uint32_t dev, pid, occupancy;
    uint64_t vram;
} proc_line;

static int parse_proc(const char *p, void *record) {
    proc_line *out = record;
    uint64_t dev, pid, vram, occ = CU_OCCUPANCY_INVALID;
    if (!stub_parse_u64(&p, UINT32_MAX, &dev) || !stub_parse_u64(&p, UINT32_MAX, &pid) ||
        !stub_parse_u64(&p, UINT64_MAX, &vram))
        return 0;
    while (*p == ' ' || *p == '\t') p++;
    if (*p && *p != '\n' && *p != '\r' && !stub_parse_u64(&p, 100, &occ)) return 0;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p && *p != '\n') return 0;
    *out = (proc_line){(uint32_t)dev, (uint32_t)pid, (uint32_t)occ, vram};
    return 1;
}

/* The listed processes now, at most `max` lines; `say`: name each malformed line on stderr. */
static unsigned read_procs(proc_line *out, unsigned max, int say) {
    return stub_read_records("HOOKCORE_STUB_RSMI_PROCESSES",
                             "'<device index> <host pid> <vram bytes> [<cu occupancy 0-100>]' (unsigned decimals)", say,
                             parse_proc, out, sizeof *out, max);
}

static uint32_t pasid_of(uint32_t pid) { return 0x8000u | (pid & 0x7fffu); }

RSMI_API rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items) {
    if (!g_inited) return RSMI_STATUS_INIT_ERROR;
    if (!num_items) return RSMI_STATUS_INVALID_ARGS;
    int code = injected("rsmi_compute_process_info_get", -1);
    if (code >= 0) return code;
    proc_line lines[PROCS_MAX]; /* 24 KiB of stack: nothing shared between threads */
    uint32_t pids[PROCS_MAX];
    unsigned n = read_procs(lines, PROCS_MAX, procs == NULL), found = 0; /* mistakes named once a poll */
    for (unsigned i = 0; i < n; i++) {
        unsigned j = 0;
        while (j < found && pids[j] != lines[i].pid) j++;
        if (j == found) pids[found++] = lines[i].pid;
    }
    for (unsigned i = 0; procs && i < found && i < *num_items; i++)
        procs[i] = (rsmi_process_info_t){pids[i], pasid_of(pids[i]), 0, 0, 0};
    if (procs && *num_items < found) return RSMI_STATUS_INSUFFICIENT_SIZE; /* the first *num_items written */
    *num_items = found;
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices, uint32_t *num_devices) {
    if (!g_inited) return RSMI_STATUS_INIT_ERROR;
    if (!num_devices) return RSMI_STATUS_INVALID_ARGS;
    int code = injected("rsmi_compute_process_gpus_get", -1);
    if (code >= 0) return code;
    proc_line lines[PROCS_MAX];
    unsigned n = read_procs(lines, PROCS_MAX, 0), listed = 0;
    uint32_t devs[HD_MAX_DEVICES];
    unsigned found = 0;
    for (unsigned i = 0; i < n; i++) {
        if (lines[i].pid != pid) continue;
        listed = 1;
        if (lines[i].dev >= (uint32_t)g_n) continue;
        unsigned j = 0;
        while (j < found && devs[j] != lines[i].dev) j++;
        if (j == found && found < HD_MAX_DEVICES) devs[found++] = lines[i].dev;
    }
    if (!listed) return RSMI_STATUS_NOT_FOUND;
    for (unsigned i = 0; dv_indices && i < found && i < *num_devices; i++) dv_indices[i] = devs[i];
    if (dv_indices && *num_devices < found) return RSMI_STATUS_INSUFFICIENT_SIZE;
    *num_devices = found;
    return RSMI_STATUS_SUCCESS;
}

RSMI_API rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t d, rsmi_process_info_t *proc) {
    rsmi_status_t r = check("rsmi_compute_process_info_by_device_get", d, proc);
    if (r) return r;
    proc_line lines[PROCS_MAX];
    unsigned n = read_procs(lines, PROCS_MAX, 0), listed = 0;
    rsmi_process_info_t got = {pid, pasid_of(pid), 0, 0, CU_OCCUPANCY_INVALID};
    for (unsigned i = 0; i < n; i++) {
        if (lines[i].pid != pid) continue;
        listed = 1;
        if (lines[i].dev != d) continue;
        got.vram_usage = lines[i].vram; /* the last line for (device, pid) wins */
        got.cu_occupancy = lines[i].occupancy;
    }
    if (!listed) return RSMI_STATUS_NOT_FOUND;
    *proc = got;
    return RSMI_STATUS_SUCCESS;
}
