# workload/: a small CUDA program (dynamic ELF, dlopens libcuda.so.1) that prints its memory
# quota and whether an allocation past it is refused; see cuda_workload.c. Built with `libs`.
WORKLOAD := $(BUILD)/workload/cuda_workload

libs: $(WORKLOAD)

$(WORKLOAD): workload/cuda_workload.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(OPT) -o $@ $< -ldl
