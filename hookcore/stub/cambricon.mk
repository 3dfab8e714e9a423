# stub/cambricon.mk - the Cambricon MLU stubs and workload (included by ../Makefile). No hook
# library: in sMLU mode the vendor's driver holds each share, so these only stand in for the
# vendor's libraries on machines without an MLU.
#
#   build/stub/libcndev.so        cndev_stub.c cndev_stub_smlu.c  CNDev: discovery, health, sMLU instances,
#                                 cndev_stub_procs.c              the process list (the watchdog's)
#   build/stub/libcnrt.so         cnrt_stub.c                     CNRT: a container's memory, held to its sMLU instance
#   build/workload/mlu_workload   workload/mlu_workload.c         prints its sMLU settings and whether they hold
#
# All read their MLUs from HOOKCORE_STUB_MLUS and the sMLU table from HOOKCORE_STUB_CNDEV_SMLU
# (cambricon_devices.h); libcndev.so its process list from HOOKCORE_STUB_CNDEV_PROCESSES.

STUB_CMB_COMMON := stub/cambricon_devices.c $(STUB_GRAMMAR)
STUB_CNDEV_OBJ := $(patsubst %.c,$(BUILD)/stubobj/%.o,stub/cndev_stub.c stub/cndev_stub_smlu.c stub/cndev_stub_procs.c \
    $(STUB_CMB_COMMON))
STUB_CNRT_OBJ := $(patsubst %.c,$(BUILD)/stubobj/%.o,stub/cnrt_stub.c $(STUB_CMB_COMMON))
STUBCNDEV := $(BUILD)/stub/libcndev.so
STUBCNRT := $(BUILD)/stub/libcnrt.so
MLU_WORKLOAD := $(BUILD)/workload/mlu_workload

libs: $(STUBCNDEV) $(STUBCNRT) $(MLU_WORKLOAD)

$(STUBCNDEV): $(STUB_CNDEV_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libcndev.so -Wl,--no-undefined -o $@ $^ $(LDLIBS)

$(STUBCNRT): $(STUB_CNRT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libcnrt.so -Wl,--no-undefined -o $@ $^ $(LDLIBS)

$(MLU_WORKLOAD): workload/mlu_workload.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(OPT) -o $@ $< -ldl

-include $(STUB_CNDEV_OBJ:.o=.d) $(STUB_CNRT_OBJ:.o=.d)
