## tests/lib/faults.mk: (fragment of Makefile.am)
## libdivtrace under faults and threads: tests/test_lib_faults (a training
## loop that records itself under a full disk, unwritable paths, failed
## allocations, a deleted trace file: the training unchanged, one report),
## and tests/lib/tsan_check (the library's sources built with
## ThreadSanitizer, used from threads as divtrace_record(3), THREADS,
## allows; `make check-tsan` builds and runs it and fails on any report).
if HAVE_CMOCKA
check_PROGRAMS += tests/test_lib_faults
TESTS += tests/test_lib_faults
tests_test_lib_faults_SOURCES = tests/test_lib_faults.c
tests_test_lib_faults_CFLAGS = $(TEST_CFLAGS)
tests_test_lib_faults_LDFLAGS = $(AM_LDFLAGS) -no-install
tests_test_lib_faults_LDADD = src/libdivtrace.la $(TEST_LIBS)
endif

# ThreadSanitizer: the library's sources compiled again into the test
# program with -fsanitize=thread (per-target flags, so neither the build's
# own SAN_CFLAGS, which may hold AddressSanitizer, nor its objects are
# involved). Whether the compiler can build and run such a program is
# found out once a configuration, at make time, into tests/lib/tsan-flags;
# where it cannot, the program is built plain and skips (77). It is quick
# enough for every make check (a few seconds).
check_PROGRAMS += tests/lib/tsan_check
TESTS += tests/lib/tsan_check
tests_lib_tsan_check_SOURCES = tests/lib/tsan_check.c $(src_libdivtrace_la_SOURCES) src/trace_read.c src/trace_ckpt.c
tests_lib_tsan_check_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN_CFLAGS) -g `cat tests/lib/tsan-flags`
tests_lib_tsan_check_LDFLAGS = -no-install `cat tests/lib/tsan-flags`
tests_lib_tsan_check_LDADD = $(XXHASH_LIBS) $(ZLIB_LIBS) $(ZSTD_LIBS) $(LIBS)
if HAVE_CUDA
tests_lib_tsan_check_LDADD += $(LIB_GPU_LO) $(CUDART_LIBS)
endif
$(tests_lib_tsan_check_OBJECTS): tests/lib/tsan-flags
src/tests_lib_tsan_check-build.$(OBJEXT): src/build_info.h
tests/lib/tsan-flags: Makefile
	$(AM_V_GEN)$(MKDIR_P) tests/lib && \
	printf 'static int x;\nint main(void) { return x; }\n' >tests/lib/tsan-probe.c && \
	if $(CC) $(CFLAGS) -fsanitize=thread -o tests/lib/tsan-probe$(EXEEXT) tests/lib/tsan-probe.c \
	     >/dev/null 2>&1 && ./tests/lib/tsan-probe$(EXEEXT) >/dev/null 2>&1; then \
	  echo -fsanitize=thread; else echo; fi >$@.tmp && \
	rm -f tests/lib/tsan-probe.c tests/lib/tsan-probe$(EXEEXT) && mv -f $@.tmp $@
CLEANFILES += tests/lib/tsan-flags

# make check-tsan: the same program, asked for: a compiler without
# ThreadSanitizer is an error here, and a report fails it.
check-tsan: tests/lib/tsan_check$(EXEEXT)
	@if test -z "`cat tests/lib/tsan-flags`"; then \
	  echo "check-tsan: $(CC) $(CFLAGS) cannot build and run a -fsanitize=thread program here" >&2; exit 1; fi
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 $$TSAN_OPTIONS" ./tests/lib/tsan_check$(EXEEXT)
.PHONY: check-tsan

# the PyTorch adapter under faults (run by tests/cli_torch.sh)
EXTRA_DIST += tests/torch/test_faults.py
