# stub/hip.mk - the HIP stubs (included by ../hip/hooklib.mk; owned by the Hygon DCU driver).
#
#   build/stub/libamdhip64.so.6   hip_stub*.c   the HIP runtime API and simulated devices
#                                               (soname libamdhip64.so.6; libamdhip64.so links to it)
#   build/stub/librocm_smi64.so   rsmi_stub.c   ROCm SMI: the driver's discovery, health and process list
#
# Fakes of the vendor libraries for machines without a DCU, default visibility like the real
# ones; both read their devices from HOOKCORE_STUB_HIP_DEVICES (hip_devices.c).

STUB_HIP_COMMON := stub/hip_devices.c $(STUB_GRAMMAR)
STUB_HIP_OBJ := $(patsubst %.c,$(BUILD)/stubobj/%.o,stub/hip_stub.c stub/hip_stub_memory.c stub/hip_stub_engine.c \
                                                  $(STUB_HIP_COMMON))
STUB_RSMI_OBJ := $(patsubst %.c,$(BUILD)/stubobj/%.o,stub/rsmi_stub.c $(STUB_HIP_COMMON))
STUBHIP := $(BUILD)/stub/libamdhip64.so.6
STUBRSMI := $(BUILD)/stub/librocm_smi64.so

libs: $(STUBHIP) $(STUBRSMI)

$(STUBHIP): $(STUB_HIP_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libamdhip64.so.6 -o $@ $^ $(LDLIBS)
	ln -sf libamdhip64.so.6 $(BUILD)/stub/libamdhip64.so

$(STUBRSMI): $(STUB_RSMI_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,librocm_smi64.so -o $@ $^ $(LDLIBS)

-include $(STUB_HIP_OBJ:.o=.d) $(STUB_RSMI_OBJ:.o=.d)
