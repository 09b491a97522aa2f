## tests/fuzz/fuzz.mk: (fragment of Makefile.am)
