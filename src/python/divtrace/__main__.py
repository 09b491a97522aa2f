# __main__.py: `python -m divtrace ARGS...` is the `divtrace` command.
import sys

from ._cli import main

sys.exit(main())
