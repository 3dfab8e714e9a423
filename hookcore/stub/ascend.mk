# stub/ascend.mk - the Ascend stubs (included by ../Makefile; owned by the Ascend driver).
#
#   build/stub/libdcmi.so       dcmi_stub.c            DCMI: the driver's discovery, health and process list
#   build/stub/libruntime.so    ascend_runtime_stub.c  the CANN runtime's rt* layer and a simulated NPU
#   build/stub/libascendcl.so   acl_stub.c             the public ACL API (aclrt*, aclmdl*), on libruntime.so
#
# Fakes of Huawei's libraries for machines without an NPU, default visibility like the real ones;
# all read their NPUs from HOOKCORE_STUB_NPUS (ascend_devices.c).

STUB_ASCEND_COMMON := stub/ascend_devices.c $(STUB_GRAMMAR)
stub_objs = $(patsubst %.c,$(BUILD)/stubobj/%.o,$(1))
STUB_DCMI_OBJ := $(call stub_objs,stub/dcmi_stub.c $(STUB_ASCEND_COMMON))
STUB_RT_OBJ := $(call stub_objs,stub/ascend_runtime_stub.c $(STUB_ASCEND_COMMON))
STUB_ACL_OBJ := $(call stub_objs,stub/acl_stub.c)
STUBDCMI := $(BUILD)/stub/libdcmi.so
STUBRT := $(BUILD)/stub/libruntime.so
STUBACL := $(BUILD)/stub/libascendcl.so

libs: $(STUBDCMI) $(STUBRT) $(STUBACL)

$(STUBDCMI): $(STUB_DCMI_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libdcmi.so -o $@ $^ $(LDLIBS)

$(STUBRT): $(STUB_RT_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libruntime.so -o $@ $^ $(LDLIBS)

# libascendcl.so needs libruntime.so (found next to it: $ORIGIN), as the real one does.
$(STUBACL): $(STUB_ACL_OBJ) $(STUBRT)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libascendcl.so -o $@ $(STUB_ACL_OBJ) -L$(BUILD)/stub -lruntime \
	    -Wl,-rpath,'$$ORIGIN' -Wl,--no-undefined $(LDLIBS)

-include $(STUB_DCMI_OBJ:.o=.d) $(STUB_RT_OBJ:.o=.d) $(STUB_ACL_OBJ:.o=.d)
