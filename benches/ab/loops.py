"""The timed loops both A/B scripts' children run on `mc` (a fastmc.Client): single get and set,
100-key get_multi, each as µs per call in `out`. A snippet of source, joined into each child."""

LOOPS = r"""
keys = ["ab%d" % i for i in range(100)]
d = {k: b"v" * 40 for k in keys}
mc.set_multi(d)
out = {}
def timed(name, n, fn):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    out[name] = (time.perf_counter() - t) / n * 1e6
timed("get", 3000, lambda: mc.get("ab1"))
timed("set", 3000, lambda: mc.set("ab1", b"v" * 40))
timed("get_multi 100", 800, lambda: mc.get_multi(keys))
"""
