#!/usr/bin/env python3
"""fastmc benchmark suite: `python benches/bench.py [--quick] [--servers host:port,...] ...`.

The suite itself is the package benches/mcbench (see its docstring and benches/README.md);
this file is its entry point, used by `make bench` and `make bench-full`.
"""

import sys

from mcbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
