## tests/cut/cut.mk: (fragment of Makefile.am)
