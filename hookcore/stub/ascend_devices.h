/* ascend_devices.h - the fake NPUs of the Ascend stubs (libdcmi.so, libascendcl.so, libruntime.so).
 *
 * HOOKCORE_STUB_NPUS (environment): the grammar of HOOKCORE_STUB_DEVICES (stub_grammar.h), in a
 * variable of its own so that one container can describe its GPUs and its NPUs at once (a
 * heterogeneous claim runs stub CUDA and stub ACL side by side). NPUs separated by ';', each a
 * list of key=value separated by ','. Example:
 *   HOOKCORE_STUB_NPUS='uuid=NPU-1a2b3c4d-00000000-00000001-00000002-00000003,memory=64Gi,name=910B3'
 * Keys every Ascend stub reads:
 *   uuid     required; "NPU-" + five groups of 8 hex digits: the chip's VDIE die ID as DCMI reports
 *            it (dcmi_get_device_die_v2), which the driver publishes as the NPU's UUID
 *   memory   a quantity as the core reads one (hk_parse_mem: 64Gi, 32768Mi); default 64Gi
 *   name     chip name as DCMI's chip_info reports it ("910B3"); default "910B3"
 * The DCMI stub's discovery keys (card, chip, logic, phy, aicore, pci, pciid, hbm, serial,
 * health, type, ver) are documented in README.md. Unknown keys are kept and ignored.
 * A bad description is reported in one line on stderr ("stub: HOOKCORE_STUB_NPUS: ...") and leaves
 * the stub with no NPU, so a test sees the mistake instead of running on defaults.
 *
 * Private to the Ascend stubs; not part of any hook library. The grammar's parser is shared with
 * the GPU stubs (stub_grammar.c); the NPU keys are read here.
 */
#ifndef HOOKCORE_ASCEND_DEVICES_H
#define HOOKCORE_ASCEND_DEVICES_H

#include <stddef.h>

#include "stub_grammar.h"

#pragma GCC visibility push(hidden)

#define ASD_MAX_DEVICES 32
#define ASD_VALUE_MAX   STUB_VALUE_MAX

typedef struct asd_device {
    char uuid[ASD_VALUE_MAX];
    unsigned int die[5];       /* the uuid's five words */
    unsigned long long memory; /* bytes */
    char name[ASD_VALUE_MAX];
    stub_entry entry;
} asd_device;

/* Parse a description: the number of NPUs (0..max), or -1 with a one-line message in err. */
int asd_parse(const char *spec, asd_device *out, int max, char *err, size_t errlen);

/* HOOKCORE_STUB_NPUS (unset: no NPU). On a bad description prints the message once, returns 0. */
int asd_from_env(asd_device *out, int max);

/* The raw value of `key`, or NULL; an integer value (decimal or 0x hex), or `dflt` when absent. */
const char *asd_get(const asd_device *d, const char *key);
long long asd_get_int(const asd_device *d, const char *key, long long dflt);

#pragma GCC visibility pop

#endif
