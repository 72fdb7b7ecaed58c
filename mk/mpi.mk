# mk/mpi.mk — the MPI backend (plugin/comm/comm_mpi.c and its mpi_*.c) and its
# tests, included by the Makefile.  MPI=1 (the default when mpicc is found)
# compiles everything with -DSDNN_MPI=1 and OpenMPI's include flags and links
# with its libraries; MPI=0 builds comm_mpi.c as a stub whose available() is 0
# (the mpi_*.c files are then empty).
#
# Also builds the programs of tests/mpi/ (run under mpirun by
# tests/test_mpi.c and tests/mpi/run.sh) as part of `make tests`.

MPICC ?= $(if $(wildcard $(MPI_HOME)/bin/mpicc),$(MPI_HOME)/bin/mpicc,mpicc)

ifeq ($(MPI),1)
ifneq ($(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1),1)
$(error MPI=1 but $(MPICC) was not found: apt-get install libopenmpi-dev openmpi-bin, or build with MPI=0)
endif
# -isystem: OpenMPI's headers are not ours to hold to -Wall -Wextra -Werror.
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell $(MPICC) --showme:compile))
MPI_LDLIBS := $(shell $(MPICC) --showme:link)
CFLAGS += -DSDNN_MPI=1 $(MPI_CFLAGS)
LDLIBS += $(MPI_LDLIBS)

# Rules below must not become the default goal.
ifeq ($(.DEFAULT_GOAL),)
.DEFAULT_GOAL := all
endif

SDNN_MPI_LIBA := $(if $(filter build,$(BUILD)),libscalednn.a,$(BUILD)/libscalednn.a)
MPI_TEST_BIN := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.c))

$(MPI_TEST_BIN): $(BUILD)/tests/mpi/%: tests/mpi/%.c $(SDNN_MPI_LIBA) $(wildcard include/*.h) $(PLUGIN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(SDNN_MPI_LIBA) -o $@ $(LDFLAGS) $(LDLIBS)

tests: $(MPI_TEST_BIN)
endif
