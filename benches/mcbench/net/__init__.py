"""fastmc over a simulated datacenter network (`make bench-net`, `make bench-net-soak`).

- ``netns``: the client and server namespaces, the veth pair, the NFQUEUE rules, netdelay (the
  packet holder in benches/netdelay) and the servers; teardown, and cleanup of a crashed run's;
- ``calibrate``: the raw TCP ping-pong that checks (and corrects) the delay;
- ``scenarios``: single, multi (3 and 10 servers) and 8 threads, with bench.py's columns and
  steps, the network targets and the chart;
- ``soak``: the soak under loss and reordering;
- ``cli``: the command line and the run.
"""
