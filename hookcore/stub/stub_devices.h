/* stub_devices.h - the fake devices of the stub libcuda and libnvidia-ml, from one description.
 *
 * HOOKCORE_STUB_DEVICES (environment): devices in the grammar of stub_grammar.h (';' between
 * devices, key=value pairs separated by ','). Example:
 *   HOOKCORE_STUB_DEVICES='uuid=GPU-11111111-2222-3333-4444-555555555555,memory=141Gi,name=NVIDIA H200;
 *                          uuid=GPU-66666666-7777-8888-9999-000000000000,memory=80Gi'
 * Keys every stub reads:
 *   uuid     required; "GPU-" + 32 hex digits as 8-4-4-4-12 (what cuDeviceGetUuid and NVML report)
 *   memory   a quantity as the core reads one (hk_parse_mem: 141Gi, 80G, 1.5Ti); default 16Gi
 *   name     default "Stub GPU <position>"
 *   sms      the device's SM count, 1..4096, default 132 (the H200's): libcuda's
 *            MULTIPROCESSOR_COUNT outside an MPS client, NVML's nvmlDeviceGetAttributes
 * Other keys are kept for the stub that wants them (the NVML stub's discovery keys: index, minor,
 * pci, ...; see README.md) and ignored by the rest.
 * Unset: the legacy STUB_CUDA_DEVICES (count, default 1) and STUB_CUDA_MEMORY (default 16Gi),
 * device i with UUID GPU-57554201-0000-4000-8000-0000000000ii.
 * A bad description is reported in one line on stderr ("stub: HOOKCORE_STUB_DEVICES: ...") and
 * leaves the stub with no device, so a test sees the mistake instead of running on defaults.
 *
 * Shared by stub/cuda_stub.c and stub/nvml_stub.c (both link stub/stub_devices.c); not part of
 * any hook library.
 */
#ifndef HOOKCORE_STUB_DEVICES_H
#define HOOKCORE_STUB_DEVICES_H

#include <stddef.h>

#include "stub_grammar.h"

#pragma GCC visibility push(hidden) /* each stub library has its own copy; none exports it */

#define STUB_MAX_DEVICES 16
#define STUB_DEFAULT_SMS 132 /* the H200's */

typedef struct stub_device_desc {
    char uuid[STUB_VALUE_MAX];    /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned char uuid_bytes[16]; /* the same, raw (cuDeviceGetUuid) */
    unsigned long long memory;    /* bytes */
    char name[STUB_VALUE_MAX];
    unsigned sms;     /* SM count (key `sms`, 1..4096, default 132): libcuda's and NVML's one source */
    stub_entry entry; /* every key=value as given, in order */
} stub_device_desc;

/* Parse a description. Returns the number of devices (0..max), or -1 with a one-line message in
   err (which names the device by position and the key). */
int stub_devices_parse(const char *spec, stub_device_desc *out, int max, char *err, size_t errlen);

/* HOOKCORE_STUB_DEVICES, else the legacy variables. On a bad description prints the message to
   stderr once and returns 0. */
int stub_devices_from_env(stub_device_desc *out, int max);

/* The value of `key` for a device, or NULL. */
const char *stub_device_get(const stub_device_desc *d, const char *key);

/* Position of the device a CUDA_VISIBLE_DEVICES entry names: a decimal index, a full UUID or a
   unique UUID prefix ("GPU-1111"), with or without "GPU-". -1 if none or ambiguous. */
int stub_device_lookup(const stub_device_desc *devs, int n, const char *entry, size_t len);

#pragma GCC visibility pop

#endif
