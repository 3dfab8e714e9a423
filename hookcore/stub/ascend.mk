# stub/ascend.mk - the Ascend stubs (included by ../Makefile; owned by the Ascend driver).
#
#   build/stub/libdcmi.so       stub/dcmi_stub.c  + stub/ascend_devices.c   (DCMI: discovery, health)
#
# Fakes of Huawei's libraries for machines without an NPU, default visibility like the real ones.

STUB_ASCEND_COMMON := stub/ascend_devices.c
STUB_DCMI_OBJ := $(patsubst %.c,$(BUILD)/stubobj/%.o,stub/dcmi_stub.c $(STUB_ASCEND_COMMON))
STUBDCMI := $(BUILD)/stub/libdcmi.so

libs: $(STUBDCMI)

$(STUBDCMI): $(STUB_DCMI_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libdcmi.so -o $@ $^ $(LDLIBS)

-include $(STUB_DCMI_OBJ:.o=.d)
