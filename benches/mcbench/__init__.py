"""fastmc benchmark suite: fastmc side by side with the floor and the peers, in one run.

    python benches/bench.py [--servers host:port,...] [--quick] [--scenarios a,b,...]
                            [--out results] [--strict] [--pin auto|off]

Every figure is measured in this run, with the clients interleaved round by round, and quoted as
a median. Every result is also quoted as fastmc's ratio to the floor (a raw pipelined socket batch
from Python, no parsing) and to each peer (pylibmc, pylibmc binary, pymemcache with acknowledged
writes, libmc, python-memcached). Every scenario checks what it reads back. The Markdown tables and
the speed-up chart are written under ``--out``; a summary marks each target PASS or FAIL.

Exit status: 0 when everything ran and verified; 1 when fastmc could not be imported (the other
columns are still measured); 2 when a client read back a wrong or missing value or raised; with
``--strict`` also 3 when a target failed.

Development aid: ``FASTMC_BENCH_MODULE=pylibmc`` fills the fastmc column with another module that
has pylibmc's API (marked as a stand-in everywhere), to exercise the suite before fastmc builds.

The package, from the bottom up:

- ``settings``: the --quick and full settings, the value size, paths;
- ``measure``: timing one call, medians, resident memory, pinning to one CPU;
- ``verify``: the values that name their key, the read-back diff, the failures of a run;
- ``servers``: throwaway memcached processes (the launcher shared with the tests), server info;
- ``columns``: one client configuration per column (``base``), the raw-socket floor and the
  bound (``floor``), fastmc and the peers (``peers``);
- ``targets``: every PASS/FAIL threshold, in one table;
- ``report``: cells, ratios, Markdown tables, the summary, the files written, the chart;
- ``context``: the run context the scenarios share;
- ``scenarios``: one module per scenario, and the registry;
- ``cli``: the command line, setup, the run, the report and the exit status.

See benches/README.md for what each scenario measures.
"""
