/* cndev_stub_procs.c - the stub CNDev's process list (cndevGetProcessInfo), for the MLU watchdog's
 * tests.
 *
 * HOOKCORE_STUB_CNDEV_PROCESSES names a file re-read at every query (a test rewrites it while a
 * daemon polls), one process a line:
 *
 *     <mlu index> <host pid> <physical memory KiB>
 *
 * The MLU index is CNDev's (the one cndevGetDeviceHandleByIndex takes: the MLU's position in
 * HOOKCORE_STUB_MLUS); the pid an unsigned decimal within 32 bits, the memory one within 64 bits.
 * What the struct can hold is passed on, PID 0, PIDs past the kernel's maximum and a memory of
 * 2^64-1 KiB included; virtualMemoryUsed is the physical memory. '#' comments and blank lines are
 * skipped; any other line (a number out of range, a word, a missing or extra field, one past 255
 * characters) is skipped and named on stderr at each query of MLU 0 (once a poll). Unset: no
 * process. At most 1024 lines are read.
 *
 * The call as CNDev's public header documents it: *infoCount is, in, the entries the caller's
 * array has room for and, out, how many processes the MLU has. More processes than room: the first
 * *infoCount are written (a caller must not read them: CNDev does not say what it writes then),
 * *infoCount is the real count and the answer CNDEV_ERROR_INSUFFICIENT_SPACE. The struct version is
 * the first entry's; each entry written carries it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdlib.h>

#include "cndev_stub.h"
#include "stub_grammar.h"

typedef struct {
    int32_t version;
    uint32_t pid;
    uint64_t physicalMemoryUsed; /* KiB */
    uint64_t virtualMemoryUsed;  /* KiB */
} cndevProcessInfo_t;
#define PROCS_MAX 1024

typedef struct proc_line {
    uint32_t mlu, pid;
    uint64_t kib;
} proc_line;

static int parse_proc(const char *p, void *record) {
    proc_line *out = record;
    uint64_t mlu, pid, kib;
    if (!stub_parse_u64(&p, UINT32_MAX, &mlu) || !stub_parse_u64(&p, UINT32_MAX, &pid) ||
        !stub_parse_u64(&p, UINT64_MAX, &kib))
        return 0;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p && *p != '\n') return 0;
    *out = (proc_line){(uint32_t)mlu, (uint32_t)pid, kib};
    return 1;
}

CNDEV_API cndevRet_t cndevGetProcessInfo(uint32_t *infoCount, cndevProcessInfo_t *procInfo, cndevDevice_t dev) {
    int d;
    cndevRet_t r = cndev_stub_check("cndevGetProcessInfo", dev, procInfo, procInfo ? &procInfo->version : NULL, &d);
    if (r) return r;
    if (!infoCount) return CNDEV_ERROR_INVALID_ARGUMENT;
    proc_line lines[PROCS_MAX]; /* 16 KiB of stack: nothing shared between threads */
    unsigned n = stub_read_records("HOOKCORE_STUB_CNDEV_PROCESSES",
                                   "'<mlu index> <host pid> <physical memory KiB>' (unsigned decimals)", d == 0,
                                   parse_proc, lines, sizeof *lines, PROCS_MAX);
    uint32_t room = *infoCount, found = 0;
    int32_t version = procInfo->version;
    for (unsigned i = 0; i < n; i++) {
        if (lines[i].mlu != (uint32_t)d) continue;
        if (found < room) procInfo[found] = (cndevProcessInfo_t){version, lines[i].pid, lines[i].kib, lines[i].kib};
        found++;
    }
    *infoCount = found;
    return found > room ? CNDEV_ERROR_INSUFFICIENT_SPACE : CNDEV_SUCCESS;
}
