## tests/fuzz/fuzz.mk: (fragment of Makefile.am)
## libFuzzer harnesses of the readers of untrusted files: traces (with
## `divtrace show` and `divtrace diff` on them), IDX, NPY, PGM and sweep
## files. Built only by a clang build configured with --enable-fuzz;
## `make fuzz` runs each for FUZZ_TIME seconds, FUZZ_JOBS at once, on a
## scratch copy of its corpus under tests/fuzz/work (FUZZ_TIMEOUT and
## FUZZ_ARGS: see tests/fuzz/run.sh); `make fuzz-cov` measures the readers'
## line coverage by the seeds and what make fuzz found (SEEDS_ONLY=1: the
## seeds alone; tests/fuzz/coverage.sh). tests/fuzz/mkseeds.py rewrites the
## seed corpora.
FUZZ_HARNESSES = fuzz_trace fuzz_idx fuzz_npy fuzz_pgm fuzz_sweep
FUZZ_TIME = 30
# empty: one per CPU (nproc)
FUZZ_JOBS =
FUZZ_UTIL = tests/fuzz/fuzz_util.c tests/fuzz/fuzz_util.h
FUZZ_LINK_FLAGS = $(AM_LDFLAGS) -fsanitize=fuzzer

if ENABLE_FUZZ
FUZZ_PROGS = tests/fuzz/fuzz_trace tests/fuzz/fuzz_idx tests/fuzz/fuzz_npy \
	tests/fuzz/fuzz_pgm tests/fuzz/fuzz_sweep
noinst_PROGRAMS += $(FUZZ_PROGS)
# show and diff are the program's commands, not the core library's
tests_fuzz_fuzz_trace_SOURCES = tests/fuzz/fuzz_trace.c $(FUZZ_UTIL) src/cli.h \
	src/cli_common.c src/cmd_show.c src/cmd_show.h src/cmd_show_export.c src/cmd_diff.c \
	src/cmd_diff.h src/cmd_diff_ref.c
tests_fuzz_fuzz_trace_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_trace_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_idx_SOURCES = tests/fuzz/fuzz_idx.c $(FUZZ_UTIL)
tests_fuzz_fuzz_idx_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_idx_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_npy_SOURCES = tests/fuzz/fuzz_npy.c $(FUZZ_UTIL)
tests_fuzz_fuzz_npy_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_npy_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_pgm_SOURCES = tests/fuzz/fuzz_pgm.c $(FUZZ_UTIL)
tests_fuzz_fuzz_pgm_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_pgm_LDADD = $(CORE_LIBS)
tests_fuzz_fuzz_sweep_SOURCES = tests/fuzz/fuzz_sweep.c $(FUZZ_UTIL)
tests_fuzz_fuzz_sweep_LDFLAGS = $(FUZZ_LINK_FLAGS)
tests_fuzz_fuzz_sweep_LDADD = $(CORE_LIBS)

fuzz: $(FUZZ_PROGS)
	$(AM_V_at)$(SHELL) $(srcdir)/tests/fuzz/run.sh "$(srcdir)/tests/fuzz" "tests/fuzz" \
	  "$(FUZZ_TIME)" "$(FUZZ_JOBS)" $(FUZZ_HARNESSES)
else
fuzz:
	@echo "make fuzz: configure with CC=clang --enable-fuzz (and --enable-asan --enable-ubsan) to build the fuzz harnesses" >&2; exit 2
endif
# a build of its own (clang, -fprofile-instr-generate) under tests/fuzz/cov
fuzz-cov:
	$(AM_V_at)$(SHELL) $(srcdir)/tests/fuzz/coverage.sh "$(abs_top_srcdir)" "$(abs_top_builddir)/tests/fuzz" \
	  $(FUZZ_HARNESSES)
.PHONY: fuzz fuzz-cov
mostlyclean-local: clean-fuzz
clean-fuzz:
	-rm -rf tests/fuzz/work tests/fuzz/cov
.PHONY: clean-fuzz

EXTRA_DIST += tests/fuzz/fuzz_trace.c tests/fuzz/fuzz_idx.c tests/fuzz/fuzz_npy.c \
	tests/fuzz/fuzz_pgm.c tests/fuzz/fuzz_sweep.c $(FUZZ_UTIL) \
	tests/fuzz/fuzz_trace.dict tests/fuzz/fuzz_idx.dict tests/fuzz/fuzz_npy.dict \
	tests/fuzz/fuzz_pgm.dict tests/fuzz/fuzz_sweep.dict \
	tests/fuzz/run.sh tests/fuzz/coverage.sh tests/fuzz/mkseeds.py tests/fuzz/corpus
