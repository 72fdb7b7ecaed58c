# mk/gpu.mk — the GPU engine (plugin/cuda/), included by the Makefile.
#
#   make GPU=1 [CUDNN=1] [NCCL=1] [CUDA_HOME=...] [CUDNN_HOME=...] [NCCL_HOME=...]
#   make GPU=sim [BUILD=build-sim]  the engine on simulated devices (no nvcc)
#   make GPU=1|sim gpu-tests    the self-checking programs of tests/gpu/
#   make GPU=1 gpu-bench        the benchmark programs of bench/gpu/
#
# nvcc compiles plugin/cuda/*.cu for sm_90 (H100/H200) and sm_80 (A100),
# plus compute_90 PTX for newer chips; plugin/cuda/*.c (host glue that reads
# Darknet's structs) is compiled by $(CC) with the project's flags.  Nothing
# is ever compiled with -DGPU: Debian's libdarknet is a CPU build and
# darknet.h changes the layout of `layer` under GPU.  The engine's switch is
# SDNN_GPU_ENGINE.
#
# GPU=sim links the same host glue (plugin/cuda/*.c) and the kernels of
# the .cu files (GPU_SIM_CU below, built by the host C++ compiler against
# sim/cuda_shim.h, run by the executor sim/exec.c) against the simulated
# device runtime (plugin/cuda/sim/*.c) in place of CUDA's libraries:
# streams are worker threads, device memory is a mapping the host cannot
# touch, cuBLAS's gemm OpenBLAS, NCCL an in-process stand-in
# (docs/ARCHITECTURE.md, "The simulated device").  It needs OpenBLAS (gemm)
# and no CUDA at all.
ifeq ($(GPU),1)

ifneq ($(HAVE_NVCC),1)
$(error GPU=1: nvcc not found under CUDA_HOME=$(CUDA_HOME))
endif

CUDNN      ?= 1
NCCL       ?= 1
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDNN_HOME ?= $(CUDA_HOME)
NCCL_HOME  ?= $(CUDA_HOME)
GPU_ARCH   ?= -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=compute_90

HAVE_CUDNN_H := $(shell test -f $(CUDNN_HOME)/include/cudnn.h && echo 1)
HAVE_NCCL_H  := $(shell test -f $(NCCL_HOME)/include/nccl.h && echo 1)
ifeq ($(CUDNN),1)
ifneq ($(HAVE_CUDNN_H),1)
$(error CUDNN=1: cudnn.h not found under CUDNN_HOME=$(CUDNN_HOME) (or build with CUDNN=0))
endif
endif
ifeq ($(NCCL),1)
ifneq ($(HAVE_NCCL_H),1)
$(error NCCL=1: nccl.h not found under NCCL_HOME=$(NCCL_HOME) (or build with NCCL=0))
endif
endif
$(info $(call found,1,GPU engine,) CUDNN=$(CUDNN) NCCL=$(NCCL) CUDA_HOME=$(CUDA_HOME))

GPU_DEFS := -DSDNN_GPU_ENGINE=1 -DSDNN_CUDNN=$(CUDNN) -DSDNN_NCCL=$(NCCL)
GPU_INC  := -I$(CUDA_HOME)/include
ifneq ($(CUDNN_HOME),$(CUDA_HOME))
GPU_INC  += -I$(CUDNN_HOME)/include
endif
ifneq ($(NCCL_HOME),$(CUDA_HOME))
GPU_INC  += -I$(NCCL_HOME)/include
endif

# The rest of libscalednn sees the switch (the comm registry, the trainer).
CFLAGS += -DSDNN_GPU_ENGINE=1

# --fmad=false: a*b + c keeps its two roundings everywhere, as in ops.h's C
# formulas and in the simulated executor (-ffp-contract=off), so the GPU
# rounds as the formulas the tests check do.
NVCCFLAGS := -std=c++17 $(GPU_ARCH) -O3 -lineinfo --fmad=false $(GPU_DEFS) $(GPU_INC) \
             -Iinclude $(PLUGIN_INC) -Iplugin/cuda \
             -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings \
             -Xcudafe --display_error_number
GPU_CFLAGS := -DSDNN_CUDNN=$(CUDNN) -DSDNN_NCCL=$(NCCL) $(GPU_INC) -Iplugin/cuda

GPU_LIBDIRS := $(sort $(CUDA_HOME)/lib64 $(CUDNN_HOME)/lib64 $(NCCL_HOME)/lib64)
GPU_LIBS := -lcudart -lcublas
ifeq ($(CUDNN),1)
GPU_LIBS += -lcudnn
endif
ifeq ($(NCCL),1)
GPU_LIBS += -lnccl
endif
# --no-as-needed: ./darknet carries the CUDA libraries even before the
# front-end calls into the engine, so a GPU build fails early where they
# are missing.
LDLIBS += $(foreach d,$(GPU_LIBDIRS),-L$(d) -Wl,-rpath,$(d)) \
          -Wl,--push-state,--no-as-needed $(GPU_LIBS) -Wl,--pop-state -lstdc++

GPU_CU  := $(wildcard plugin/cuda/*.cu)
GPU_C   := $(wildcard plugin/cuda/*.c)
GPU_HDR := $(wildcard plugin/cuda/*.h plugin/cuda/*.cuh include/*.h) $(PLUGIN_HDR)
GPU_OBJ := $(GPU_CU:plugin/cuda/%.cu=$(BUILD)/cuda/%.o) $(GPU_C:plugin/cuda/%.c=$(BUILD)/cuda/%.o)
GPU_PIC := $(GPU_CU:plugin/cuda/%.cu=$(BUILD)/cuda/pic/%.o) $(GPU_C:plugin/cuda/%.c=$(BUILD)/cuda/pic/%.o)
EXTRA_LIB_OBJ += $(GPU_OBJ)
EXTRA_PIC_OBJ += $(GPU_PIC)

# Objects depend on a stamp named after the flags, like the Makefile's own.
GPU_STAMP := $(BUILD)/cuda/.flags-$(shell echo '$(NVCC) $(NVCCFLAGS) $(CC) $(CFLAGS) $(GPU_CFLAGS)' | cksum | cut -d' ' -f1)

$(GPU_STAMP):
	@mkdir -p $(BUILD)/cuda
	@rm -f $(BUILD)/cuda/.flags-*
	@touch $@

$(BUILD)/cuda/%.o: plugin/cuda/%.cu $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/cuda/pic/%.o: plugin/cuda/%.cu $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -c $< -o $@

$(BUILD)/cuda/%.o: plugin/cuda/%.c $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/cuda/pic/%.o: plugin/cuda/%.c $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_CFLAGS) $(DEPFLAGS) -fPIC -c $< -o $@
endif

ifeq ($(GPU),sim)

ifneq ($(BLAS),1)
$(error GPU=sim: the simulated device computes gemm with OpenBLAS (install libopenblas-dev; BLAS=1))
endif
$(info $(call found,1,GPU engine on simulated devices,) GPU=sim)

CFLAGS += -DSDNN_GPU_ENGINE=1
GPU_CFLAGS := -DSDNN_CUDNN=0 -DSDNN_NCCL=1 -Iplugin/cuda
# The .cu files whose kernels run as themselves on the simulated device's
# executor (plugin/cuda/sim/exec.c): the host C++ compiler builds them
# against plugin/cuda/sim/cuda_shim.h, with no contraction of a*b + c (as
# nvcc's --fmad=false above): every kernel of the engine.  The rest of
# plugin/cuda/*.cu is library calls with simulated stand-ins in
# plugin/cuda/sim/*.c: runtime.cu (sim/runtime.c), nccl.cu (sim/nccl.c) and
# conv.cu's cuBLAS gemm (sim/gemm.c, OpenBLAS queued on the stream; cuDNN
# is never built here, SDNN_CUDNN=0).
GPU_SIM_CU := plugin/cuda/kernels.cu plugin/cuda/codec.cu plugin/cuda/layers.cu \
              plugin/cuda/bn.cu plugin/cuda/conv.cu
CXX ?= g++
SIM_CXXFLAGS := -std=c++17 -Wall -Wextra -Werror -pthread -D_GNU_SOURCE -ffp-contract=off \
                -Iinclude $(PLUGIN_INC) -Iplugin/cuda $(OPT) $(SANFLAGS) \
                -DSDNN_GPU_ENGINE=1 -DSDNN_SIM_EXEC=1 $(GPU_CFLAGS)
LDLIBS  += -lstdc++
GPU_C   := $(wildcard plugin/cuda/*.c) $(wildcard plugin/cuda/sim/*.c)
GPU_HDR := $(wildcard plugin/cuda/*.h plugin/cuda/*.cuh plugin/cuda/sim/*.h include/*.h) \
           $(PLUGIN_HDR)
GPU_OBJ := $(GPU_C:plugin/cuda/%.c=$(BUILD)/cuda/%.o) \
           $(GPU_SIM_CU:plugin/cuda/%.cu=$(BUILD)/cuda/cu/%.o)
GPU_PIC := $(GPU_C:plugin/cuda/%.c=$(BUILD)/cuda/pic/%.o) \
           $(GPU_SIM_CU:plugin/cuda/%.cu=$(BUILD)/cuda/pic/cu/%.o)
EXTRA_LIB_OBJ += $(GPU_OBJ)
EXTRA_PIC_OBJ += $(GPU_PIC)

GPU_STAMP := $(BUILD)/cuda/.flags-sim-$(shell echo '$(CC) $(CFLAGS) $(GPU_CFLAGS) $(CXX) $(SIM_CXXFLAGS) $(GPU_SIM_CU)' | cksum | cut -d' ' -f1)

$(GPU_STAMP):
	@mkdir -p $(BUILD)/cuda
	@rm -f $(BUILD)/cuda/.flags-*
	@touch $@

$(BUILD)/cuda/%.o: plugin/cuda/%.c $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/cuda/pic/%.o: plugin/cuda/%.c $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_CFLAGS) $(DEPFLAGS) -fPIC -c $< -o $@

$(BUILD)/cuda/cu/%.o: plugin/cuda/%.cu $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) $(DEPFLAGS) -x c++ -c $< -o $@

$(BUILD)/cuda/pic/cu/%.o: plugin/cuda/%.cu $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) $(DEPFLAGS) -fPIC -x c++ -c $< -o $@

endif

ifneq ($(filter 1 sim,$(GPU)),)

# ---- tests/gpu and bench/gpu programs ---------------------------------------
# Self-checking programs without CMocka (the GPU machine has no Debian
# packages): each exits non-zero on a failure.  formulas and probe run on
# any machine; the others need a device.
GPU_TEST_SRC := $(wildcard tests/gpu/*.c)
GPU_TEST_BIN := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
GPU_BENCH_SRC := $(wildcard bench/gpu/*.c)
GPU_BENCH_BIN := $(GPU_BENCH_SRC:bench/gpu/%.c=$(BUILD)/bench/gpu/%)

# Rules with the archive as a prerequisite come after the Makefile defines
# it; second expansion reads $$(LIBA) when the rule is used.
.SECONDEXPANSION:
$(BUILD)/tests/gpu/%: tests/gpu/%.c $$(LIBA) $(wildcard tests/gpu/*.h) $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_CFLAGS) -Itests/gpu $< $(LIBA) -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/gpu/%: bench/gpu/%.c $$(LIBA) $(wildcard tests/gpu/*.h) $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_CFLAGS) -Itests/gpu $< $(LIBA) -o $@ $(LDFLAGS) $(LDLIBS)

# Simulated devices only: C++ programs built against the CUDA shim that
# check the kernel executor itself (tests/gpu/sim/*.cu, run by run_sim.sh).
ifeq ($(GPU),sim)
GPU_SIM_TEST_SRC := $(wildcard tests/gpu/sim/*.cu)
GPU_SIM_TEST_BIN := $(GPU_SIM_TEST_SRC:tests/gpu/sim/%.cu=$(BUILD)/tests/gpu/sim/%)
$(BUILD)/tests/gpu/sim/%: tests/gpu/sim/%.cu $$(SIM_TEST_OBJ_$$*) $$(LIBA) $(GPU_HDR) $(GPU_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(SIM_CXXFLAGS) -x c++ $< -x none $(SIM_TEST_OBJ_$*) $(LIBA) -o $@ $(LDFLAGS) $(LDLIBS)

# tests/gpu/sim/mutants: real kernels with one defect put in.  Each mutant
# (tests/gpu/sim/mutate.sh NAME: a copy of one plugin/cuda/*.cu with one
# exact text replaced) is compiled and linked into its own copy of the
# program, before the library, so the library's member of that file is
# never linked.  The program of the real kernels runs each mutant's program.
SIM_MUTANTS := codec-int8-nosync codec-int8-short kernels-fill-floor bn-nosync \
               bn-finish-floor bn-bound bn-grid-y
SIM_MUT_DIR := $(BUILD)/tests/gpu/sim/mutants.d
$(BUILD)/tests/gpu/sim/mutants: $(SIM_MUTANTS:%=$(SIM_MUT_DIR)/%)
$(SIM_MUT_DIR)/%.cu: tests/gpu/sim/mutate.sh $(wildcard plugin/cuda/*.cu)
	@mkdir -p $(dir $@)
	sh tests/gpu/sim/mutate.sh $* $@
$(SIM_MUT_DIR)/%.o: $(SIM_MUT_DIR)/%.cu $(GPU_HDR) $(GPU_STAMP)
	$(CXX) $(SIM_CXXFLAGS) $(DEPFLAGS) -x c++ -c $< -o $@
$(SIM_MUT_DIR)/%: tests/gpu/sim/mutants.cu $(SIM_MUT_DIR)/%.o $$(LIBA) $(GPU_HDR) $(GPU_STAMP)
	$(CXX) $(SIM_CXXFLAGS) -x c++ $< -x none $(SIM_MUT_DIR)/$*.o $(LIBA) -o $@ $(LDFLAGS) $(LDLIBS)
.PRECIOUS: $(SIM_MUT_DIR)/%.cu $(SIM_MUT_DIR)/%.o
endif

.PHONY: gpu-tests gpu-bench
gpu-tests: $(GPU_TEST_BIN) $(GPU_SIM_TEST_BIN) $$(DARKNET_BIN)
gpu-bench: $(GPU_BENCH_BIN) $$(DARKNET_BIN)

# Keep `make` (no goal) building `all`, not the first rule above.
ifeq ($(.DEFAULT_GOAL),$(GPU_STAMP))
.DEFAULT_GOAL := all
endif
ifeq ($(.DEFAULT_GOAL),)
.DEFAULT_GOAL := all
endif

endif
