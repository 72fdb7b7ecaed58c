# scalednn — Makefile in Darknet's style.
#
#   make                 libscalednn.a, libscalednn.so and ./darknet
#   make check           the fast tier: the unit tests (every tests/test_*.c
#                        not marked `tier: full`), under 3 minutes on 2 cores
#   make test            the CMocka suite (no GPU needed)
#   make test-sim        the GPU suite on simulated devices (GPU=sim, build-sim/)
#   make asan            the suite under AddressSanitizer + UBSan (build-asan/),
#                        then the simulated GPU suite under both (build-sim-asan/)
#   make fuzz            libFuzzer on the cfg reader, labels, images (mk/fuzz.mk)
#   make clean
#
# Switches: BLAS=0|1 (OpenBLAS gemm replaces Darknet's; default 1 when found)
#           ONEDNN=0|1 (cpu_conv=onednn: convolutions on oneDNN; default 1 when found)
#           MPI=0|1, GPU=0|1|sim (sim: simulated devices, BUILD=build-sim), DEBUG=1
# Paths:    DARKNET_HOME (Debian's darknet), CUDA_HOME, MPI_HOME

DARKNET_HOME ?= /usr/lib/darknet
CUDA_HOME    ?= /usr/local/cuda
MPI_HOME     ?= /usr/lib/x86_64-linux-gnu/openmpi
ifeq ($(GPU),sim)
BUILD        ?= build-sim
endif
BUILD        ?= build
SAN          ?= 0
DEBUG        ?= 0
GPU          ?= 0

CC ?= cc

# ---- what is on this machine -------------------------------------------
HAVE_DARKNET := $(shell test -f $(DARKNET_HOME)/libdarknet.so && test -f $(DARKNET_HOME)/include/darknet.h && echo 1)
HAVE_OPENBLAS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c - -lopenblas -o /dev/null 2>/dev/null && echo 1)
HAVE_CMOCKA := $(shell echo 'int main(void){return 0;}' | $(CC) -x c - -lcmocka -o /dev/null 2>/dev/null && echo 1)
HAVE_NVCC := $(shell test -x $(CUDA_HOME)/bin/nvcc && echo 1)
HAVE_MPI := $(shell command -v mpicc >/dev/null 2>&1 && echo 1)
HAVE_DNNL := $(shell printf '\043include <dnnl.h>\nint main(void){return dnnl_version()==0;}\n' | $(CC) -x c - -ldnnl -o /dev/null 2>/dev/null && echo 1)

ifeq ($(HAVE_MPI),1)
MPI ?= 1
else
MPI ?= 0
endif

ifeq ($(HAVE_OPENBLAS),1)
BLAS ?= 1
else
BLAS ?= 0
endif

ifeq ($(HAVE_DNNL),1)
ONEDNN ?= 1
else
ONEDNN ?= 0
endif

ifneq ($(HAVE_DARKNET),1)
$(error Debian's darknet is not installed under $(DARKNET_HOME): run scripts/setup.sh (apt-get install darknet))
endif

define found
$(if $(filter 1,$(1)),✓ $(2),✗ $(2) $(3))
endef
$(info ---------------------------------------------------------------)
$(info $(call found,$(HAVE_DARKNET),darknet,) ($(DARKNET_HOME)))
$(info $(call found,$(HAVE_OPENBLAS),OpenBLAS,(BLAS=0: Darknet's own gemm)) BLAS=$(BLAS))
$(info $(call found,$(HAVE_DNNL),oneDNN,(cpu_conv=onednn needs libdnnl-dev)) ONEDNN=$(ONEDNN))
$(info $(call found,$(HAVE_CMOCKA),CMocka,(make test needs libcmocka-dev)))
$(info $(call found,$(HAVE_MPI),OpenMPI,) MPI=$(MPI))
$(info $(call found,$(HAVE_NVCC),nvcc,) GPU=$(GPU))
$(info ---------------------------------------------------------------)

# ---- the library's concept folders (plugin/cuda is mk/gpu.mk's) -----------
PLUGIN_DIRS := base config darknet comm codec plan step data trace eval engine gradref
PLUGIN_INC  := $(addprefix -Iplugin/,$(PLUGIN_DIRS))
PLUGIN_HDR  := $(wildcard $(addsuffix /*.h,$(addprefix plugin/,$(PLUGIN_DIRS))))
PLUGIN_SRC  := $(wildcard $(addsuffix /*.c,$(addprefix plugin/,$(PLUGIN_DIRS))))

# ---- flags ---------------------------------------------------------------
# Never add -DGPU: Debian's libdarknet is a CPU build and darknet.h changes
# the layout of its structs under GPU.
CFLAGS_BASE := -std=c11 -Wall -Wextra -Werror -pthread -D_GNU_SOURCE \
               -Iinclude $(PLUGIN_INC) -Icli -I$(DARKNET_HOME)/include
ifeq ($(DEBUG),1)
OPT := -O0 -g
else
OPT := -O3 -g
endif
SANFLAGS :=
ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
CFLAGS += $(CFLAGS_BASE) $(OPT) $(SANFLAGS)
ifeq ($(BLAS),1)
CFLAGS += -DSDNN_BLAS=1
BLASLIB := -lopenblas
else
BLASLIB :=
endif
ifeq ($(ONEDNN),1)
CFLAGS += -DSDNN_ONEDNN=1
DNNLLIB := -ldnnl -lgomp
else
DNNLLIB :=
endif
LDFLAGS += $(SANFLAGS) -pthread
# Our gemm (in libscalednn) must come before -ldarknet.
LDLIBS := $(BLASLIB) $(DNNLLIB) -L$(DARKNET_HOME) -Wl,-rpath,$(DARKNET_HOME) -ldarknet -lm

# Optional parts: each fragment adds its flags, EXTRA_LIB_OBJ / EXTRA_PIC_OBJ
# (objects of libscalednn) and their rules when its switch is on.
-include mk/mpi.mk
-include mk/gpu.mk
-include mk/fuzz.mk

# ---- sources ---------------------------------------------------------------
LIB_SRC  := $(PLUGIN_SRC)
APP_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(EXTRA_LIB_OBJ)
PIC_OBJ  := $(LIB_SRC:%.c=$(BUILD)/pic/%.o) $(EXTRA_PIC_OBJ)
APP_OBJ  := $(APP_SRC:%.c=$(BUILD)/%.o)
APP_LIB_OBJ := $(filter-out $(BUILD)/cli/main.o,$(APP_OBJ))
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# Each compile writes the headers it read into TARGET.d (-MMD), so a header
# edit rebuilds only what includes it; -MP keeps a deleted header from
# stopping the build.
DEPFLAGS = -MMD -MP -MF $@.d -MT $@

# Objects depend on a stamp named after the flags, so switching BLAS=, SAN=
# or DEBUG= in the same build directory rebuilds what they change (and a
# build directory made before -MMD, whose objects have no .d, is rebuilt).
FLAGS_HASH := $(shell echo '$(CC) $(CFLAGS) $(DEPFLAGS) $(LDFLAGS) $(LDLIBS)' | cksum | cut -d' ' -f1)
FLAGS_STAMP := $(BUILD)/.flags-$(FLAGS_HASH)

ifeq ($(BUILD),build)
DARKNET_BIN := darknet
LIBA := libscalednn.a
LIBSO := libscalednn.so
else
DARKNET_BIN := $(BUILD)/darknet
LIBA := $(BUILD)/libscalednn.a
LIBSO := $(BUILD)/libscalednn.so
endif

.PHONY: all check test test-sim asan clean tests bench
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
all: $(LIBA) $(LIBSO) $(DARKNET_BIN)

$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.flags-*
	@touch $@

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/pic/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -fPIC -c $< -o $@

$(LIBA): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSO): $(PIC_OBJ)
	$(CC) -shared $(LDFLAGS) $^ -o $@ $(LDLIBS)

# The front-end's commands (all but main) also go into an archive the tests link.
$(BUILD)/libsdnnapp.a: $(APP_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(DARKNET_BIN): $(APP_OBJ) $(LIBA)
	$(CC) $(LDFLAGS) $(APP_OBJ) $(LIBA) -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libsdnnapp.a $(LIBA) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -Itests $< $(BUILD)/libsdnnapp.a $(LIBA) -o $@ $(LDFLAGS) -lcmocka $(LDLIBS)

tests: $(TEST_BIN) $(DARKNET_BIN)

$(BUILD)/bench/%: bench/%.c $(LIBA) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIBA) -o $@ $(LDFLAGS) $(LDLIBS)

bench: $(BENCH_BIN) $(DARKNET_BIN)

# The fast tier for every edit: the unit tests and the small nets.  A test
# file whose top comment says `tier: full` (long MPI, end-to-end and
# many-run CLI suites) runs only in `make test`.
FULL_TIER_SRC := $(shell grep -l 'tier: full' $(TEST_SRC) /dev/null 2>/dev/null)
CHECK_BIN := $(filter-out $(FULL_TIER_SRC:tests/%.c=$(BUILD)/tests/%),$(TEST_BIN))

check: $(CHECK_BIN) $(DARKNET_BIN)
	SDNN_DARKNET_BIN=$(abspath $(DARKNET_BIN)) SDNN_TEST_BUILD=$(BUILD) \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	ASAN_OPTIONS=suppressions=$(abspath tests/asan.supp) \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	sh tests/run.sh $(CHECK_BIN)

test: tests
	SDNN_DARKNET_BIN=$(abspath $(DARKNET_BIN)) SDNN_TEST_BUILD=$(BUILD) \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	ASAN_OPTIONS=suppressions=$(abspath tests/asan.supp) \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	sh tests/run.sh $(TEST_BIN)

# The GPU suite on simulated devices (make GPU=sim; needs OpenBLAS, no GPU):
# results show the engine's host logic and ordering, not the kernels.
test-sim:
ifeq ($(HAVE_OPENBLAS),1)
	sh tests/gpu/run.sh --device sim
else
	@echo "no OpenBLAS: the GPU suite on simulated devices (GPU=sim) skipped"
endif

asan:
	$(MAKE) BUILD=build-asan SAN=1 test
ifeq ($(HAVE_OPENBLAS),1)
	sh tests/gpu/run.sh --device sim --asan
else
	@echo "no OpenBLAS: the GPU suite on simulated devices (GPU=sim SAN=1) skipped"
endif

# The headers each object and test read, from the last build (-MMD).
-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)

clean:
	rm -rf build build-asan build-noblas build-sim build-sim-asan build-fuzz darknet libscalednn.a libscalednn.so
