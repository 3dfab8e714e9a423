# acl/hooklib.mk - libvnpu.so, the Ascend hook library (included by ../Makefile).
#
#   build/libvnpu.so = core/ + preload/ + acl/ (aclrt*, aclmdl*) + ascend_rt/ (rt*)
#
# and the stubs it is tested on (stub/ascend.mk: libdcmi.so, libruntime.so, libascendcl.so).
HOOK_LIBS += vnpu
SHIMS_vnpu := acl ascend_rt
-include stub/ascend.mk

# workload/acl_workload: the ACL counterpart of workload/cuda_workload (dlopens libascendcl.so).
ACL_WORKLOAD := $(BUILD)/workload/acl_workload
libs: $(ACL_WORKLOAD)
$(ACL_WORKLOAD): workload/acl_workload.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(OPT) -o $@ $< -ldl
