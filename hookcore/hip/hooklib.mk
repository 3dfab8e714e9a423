# hip/hooklib.mk - libvhip.so, the HIP hook library (included by ../Makefile).
#
#   build/libvhip.so = core/ + preload/ + hip/ (hipMalloc*, hipMemCreate, launches, copies)
#
# It polices the HIP runtime API, so it serves Hygon DCUs (DTK's HIP) and AMD Instinct GPUs
# (ROCm's) alike; only the former has a driver here (drivers/hygon_dcu). The stubs it is tested
# on: stub/hip.mk (libamdhip64.so, librocm_smi64.so).
HOOK_LIBS += vhip
SHIMS_vhip := hip
-include stub/hip.mk

# workload/hip_workload: the HIP counterpart of workload/cuda_workload (dlopens libamdhip64.so).
HIP_WORKLOAD := $(BUILD)/workload/hip_workload
libs: $(HIP_WORKLOAD)
$(HIP_WORKLOAD): workload/hip_workload.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(OPT) -o $@ $< -ldl
