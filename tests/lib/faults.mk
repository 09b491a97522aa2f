## tests/lib/faults.mk: (fragment of Makefile.am)
