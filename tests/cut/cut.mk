## tests/cut/cut.mk: (fragment of Makefile.am)
## Every cut point of a trace: tests/cut/cut_points.sh records a small run
## of each model, then again killed (DIVTRACE_TEST_CUT_AT) or out of disk
## (DIVTRACE_TEST_ENOSPC_AT) at each block boundary of the trace and at
## points inside the blocks, and checks that show and diff read the cut file
## to its last complete step. tests/cut/blocks lists the reference's blocks.
check_PROGRAMS += tests/cut/blocks
tests_cut_blocks_SOURCES = tests/cut/blocks.c
TESTS += tests/cut/cut_points.sh
EXTRA_DIST += tests/cut/cut_points.sh
