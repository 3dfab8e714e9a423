/* hip_devices.h - the fake devices of the HIP stubs (libamdhip64.so, librocm_smi64.so).
 *
 * HOOKCORE_STUB_HIP_DEVICES (environment): the grammar of HOOKCORE_STUB_DEVICES (stub_grammar.h),
 * in a variable of its own so that one container can describe its GPUs, NPUs and HIP devices at
 * once (a heterogeneous claim runs several stub runtimes side by side). Example:
 *   HOOKCORE_STUB_HIP_DEVICES='pci=0000:c1:00.0,memory=64Gi,name=K100_AI,cus=120'
 * Keys both stubs read:
 *   pci      required; the PCI bus ID dddd:bb:dd.f (hex): the device's identity (what
 *            hipDeviceGetPCIBusId and rsmi_dev_pci_id_get report, and what libvhip keys it by)
 *   memory   a quantity as the core reads one (hk_parse_mem: 64Gi, 65520Mi); default 64Gi
 *   name     the product name (rsmi_dev_name_get, hipDeviceGetName); default "K100_AI"
 * The ROCm SMI stub's keys (uuid, serial, devid, vendor, render, ecc) are documented in README.md.
 * Unknown keys are kept and ignored. A bad description is reported in one line on stderr
 * ("stub: HOOKCORE_STUB_HIP_DEVICES: ...") and leaves the stub with no device, so a test sees the
 * mistake instead of running on defaults.
 *
 * Private to the HIP stubs; not part of any hook library.
 */
#ifndef HOOKCORE_HIP_DEVICES_H
#define HOOKCORE_HIP_DEVICES_H

#include <stddef.h>

#include "stub_grammar.h"

#pragma GCC visibility push(hidden)

#define HD_MAX_DEVICES 32

typedef struct hd_device {
    char pci[16]; /* dddd:bb:dd.f, lower case */
    unsigned int domain, bus, dev, fn;
    unsigned long long memory; /* bytes */
    char name[STUB_VALUE_MAX];
    stub_entry entry;
} hd_device;

/* Parse a description: the number of devices (0..max), or -1 with a one-line message in err. */
int hd_parse(const char *spec, hd_device *out, int max, char *err, size_t errlen);

/* HOOKCORE_STUB_HIP_DEVICES (unset: no device). On a bad description prints the message once,
   returns 0. */
int hd_from_env(hd_device *out, int max);

/* The raw value of `key`, or NULL; an integer value (decimal or 0x hex), or `dflt` when absent. */
const char *hd_get(const hd_device *d, const char *key);
long long hd_get_int(const hd_device *d, const char *key, long long dflt);

/* The position of the device with PCI bus ID `pci` (any case), or -1. */
int hd_find(const hd_device *devs, int n, const char *pci);

#pragma GCC visibility pop

#endif
