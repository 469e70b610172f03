#!/usr/bin/env python3
"""fastmc over a simulated datacenter network: `python benches/bench_net.py [--rtts 0.2,1]`, and
the loss and reordering soak, `python benches/bench_net.py --soak`. Needs root.

The code is the package benches/mcbench/net (see benches/README.md, docs/bench/net.md); this file
is its entry point, used by `make bench-net` and `make bench-net-soak`.
"""

import sys

from mcbench.net.cli import main

if __name__ == "__main__":
    sys.exit(main())
