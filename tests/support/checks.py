"""Client settings and server-side counts that tests in several directories share."""

# No fail-fast window: every call after a fault really talks to the server again (and a server
# that stops answering fails a call after 400 ms).
AGAIN = {"retry_timeout": -1, "_poll_timeout": 400}


def total_connections(mc, i=0):
    """How many connections the `i`-th server of client `mc` has accepted since it started."""
    return int(mc.get_stats()[i][1]["total_connections"])
