/* cambricon_devices.h - the fake MLUs of the Cambricon stubs (libcndev.so, libcnrt.so) and the
 * one table of sMLU instances they share (the vendor's driver's, in a real node).
 *
 * HOOKCORE_STUB_MLUS (environment): the grammar of HOOKCORE_STUB_DEVICES (stub_grammar.h), in a
 * variable of its own (a heterogeneous container describes its GPUs, NPUs and MLUs at once). MLUs
 * separated by ';', each a list of key=value separated by ','. Keys:
 *   uuid     required; "MLU-" + 8-4-4-4-12 hex digits: what the driver publishes (CNDev's
 *            cndevGetUUID answers the part after "MLU-")
 *   memory   a quantity (hk_parse_mem: 48Gi, 24576Mi); default 48Gi
 *   name     the card name cndevGetCardNameStringByDevId answers ("MLU370-X8")
 *   slot     the MLU's index on the host (/dev/cambricon_dev<slot>); default the position
 *   cores    MLU core count (cndevGetCoreCount); pci the bus ID; sn, mbsn the serial numbers
 *            (hex); smlu 0 when the MLU's sMLU mode is off; health 0 when it is in problem
 * A bad description is reported in one line on stderr ("stub: HOOKCORE_STUB_MLUS: ...") and
 * leaves the stub with no MLU, so a test sees the mistake instead of running on defaults.
 *
 * The sMLU table: HOOKCORE_STUB_CNDEV_SMLU names a file of profiles and instances, one a line:
 *   profile <slot> <id> <quota %> <memory bytes>
 *   instance <slot> <id> <profile id> <name>
 * read and rewritten under an exclusive lock (flock of "<file>.lock") by every process that
 * creates or destroys one, and read by the stub runtime: the node daemon makes an instance and
 * the claim's workload is held to it, as the vendor's driver holds a container to the instance
 * whose device node (/dev/cambricon-caps/cap_dev<slot>_mi<id>) it was given.
 *
 * Private to the Cambricon stubs; not part of any hook library.
 */
#ifndef HOOKCORE_CAMBRICON_DEVICES_H
#define HOOKCORE_CAMBRICON_DEVICES_H

#include <stddef.h>

#include "stub_grammar.h"

#pragma GCC visibility push(hidden)

#define CMB_MAX_DEVICES   16
#define CMB_MAX_PROFILES  128
#define CMB_MAX_INSTANCES 128
#define CMB_NAME_MAX      100 /* CNDEV_MLUINSTANCE_PROFILE_NAME_BUFFER_SIZE */

typedef struct cmb_device {
    char uuid[STUB_VALUE_MAX]; /* "MLU-..." */
    unsigned long long memory; /* bytes */
    char name[STUB_VALUE_MAX];
    int slot;
    stub_entry entry;
} cmb_device;

typedef struct cmb_profile {
    int slot, id;
    unsigned int quota;
    unsigned long long memory;
} cmb_profile;

typedef struct cmb_instance {
    int slot, id, profile;
    char name[CMB_NAME_MAX];
} cmb_instance;

typedef struct cmb_table {
    int nprofiles, ninstances;
    cmb_profile profiles[CMB_MAX_PROFILES];
    cmb_instance instances[CMB_MAX_INSTANCES];
} cmb_table;

/* Parse a description: the number of MLUs (0..max), or -1 with a one-line message in err. */
int cmb_parse(const char *spec, cmb_device *out, int max, char *err, size_t errlen);

/* HOOKCORE_STUB_MLUS (unset: no MLU). On a bad description prints the message once, returns 0. */
int cmb_from_env(cmb_device *out, int max);

/* The raw value of `key`, or NULL; an integer value (decimal or 0x hex), or `dflt` when absent. */
const char *cmb_get(const cmb_device *d, const char *key);
long long cmb_get_int(const cmb_device *d, const char *key, long long dflt);

/* Lock the table's file (HOOKCORE_STUB_CNDEV_SMLU) and read it into *t: a lock fd (>= 0) to pass
   to cmb_table_unlock, or -1 when no file is named or it cannot be read (errno set). */
int cmb_table_lock(cmb_table *t);
/* Write *t back when `save` (atomically: a temp file renamed over it), then unlock: 0 or -1. */
int cmb_table_unlock(int fd, const cmb_table *t, int save);
/* Read the table without writing it: 0, or -1 when no file is named or it cannot be read. */
int cmb_table_read(cmb_table *t);

/* The device node of an instance: "/dev/cambricon-caps/cap_dev<slot>_mi<id>". */
void cmb_instance_node(int slot, int id, char *out, size_t len);
/* The profile with `id` on `slot`, or NULL; the bytes the instances on `slot` hold. */
const cmb_profile *cmb_profile_of(const cmb_table *t, int slot, int id);
unsigned long long cmb_slot_used(const cmb_table *t, int slot);

#pragma GCC visibility pop

#endif
