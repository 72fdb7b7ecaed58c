# make fuzz: libFuzzer targets (clang's -fsanitize=fuzzer, with ASan and
# UBSan) for the cfg reader (config.c + cfgcheck.c), the label parser and
# the image structure walks (datacheck.c), and fuzz_darknet: every cfg the
# checks accept is parsed by libdarknet (it must not crash).  Each runs FUZZ_SECONDS (60)
# from the seed corpus in fuzz/corpus/NAME (kept small, in the tree); what
# the fuzzer adds goes to build-fuzz/corpus-NAME, crashes to build-fuzz/.
# Not part of `make test`.  Needs clang and libclang-rt-14-dev.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_FLAGS   := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
                -D_GNU_SOURCE -Iinclude $(PLUGIN_INC) -I$(DARKNET_HOME)/include
FUZZ_NAMES   := cfg darknet labels image
FUZZ_SRC_cfg    := fuzz/fuzz_cfg.c plugin/config/cfgcheck.c plugin/config/config.c plugin/base/status.c plugin/plan/costmodel.c
FUZZ_SRC_darknet := fuzz/fuzz_darknet.c plugin/config/cfgcheck.c plugin/config/config.c plugin/base/status.c \
                    plugin/plan/costmodel.c plugin/darknet/replicas.c plugin/darknet/saveio.c
FUZZ_LIBS_darknet := -L$(DARKNET_HOME) -Wl,-rpath,$(DARKNET_HOME) -ldarknet
# libdarknet's own parse leaks (tests/lsan.supp lists them): not ours.
FUZZ_OPTS_darknet := -detect_leaks=0
FUZZ_SRC_labels := fuzz/fuzz_labels.c plugin/data/datacheck.c plugin/base/status.c
FUZZ_SRC_image  := fuzz/fuzz_image.c plugin/data/datacheck.c plugin/base/status.c

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)

# The sources a target fuzzes are built by clang with the fuzzer's
# instrumentation; the registries and tables they call (codec, comm and
# engine names, cfg keys, the cost model's byte counts) come from the
# library, whose members are linked only for what those sources leave
# undefined.
$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c $(PLUGIN_SRC) $(PLUGIN_HDR) $(wildcard include/*.h) $(LIBA)
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_SRC_$*) -o $@ $(FUZZ_LIBS_$*) $(LIBA) $(LDLIBS) -lm -pthread

fuzz: fuzz-build
	@for n in $(FUZZ_NAMES); do \
	    mkdir -p $(FUZZ_BUILD)/corpus-$$n; \
	    echo "fuzz_$$n: $(FUZZ_SECONDS) s"; \
	    opts=; [ $$n = darknet ] && opts="$(FUZZ_OPTS_darknet)"; \
	    ASAN_OPTIONS=$${ASAN_OPTIONS:-}$${opts:+:detect_leaks=0} $(FUZZ_BUILD)/fuzz_$$n $$opts -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
	        -artifact_prefix=$(FUZZ_BUILD)/crash-$$n- -print_final_stats=1 \
	        $(FUZZ_BUILD)/corpus-$$n fuzz/corpus/$$n 2>$(FUZZ_BUILD)/fuzz_$$n.log; \
	    rc=$$?; grep -E '^(stat::number_of_executed_units|stat::new_units_added)|ERROR|SUMMARY' \
	        $(FUZZ_BUILD)/fuzz_$$n.log; \
	    if [ $$rc -ne 0 ]; then echo "fuzz_$$n found a failure: see $(FUZZ_BUILD)/fuzz_$$n.log"; exit 1; fi; \
	done
