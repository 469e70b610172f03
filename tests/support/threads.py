"""Concurrency helpers several test modules share: worker threads started together, and a
forked child that runs a check."""

import os
import threading


def run_threads(work, n):
    """Run ``work(i)`` for i in range(n), each in its own thread, started together (a barrier);
    returns ``(i, repr(exception))`` for each worker that raised (an empty list when every one
    succeeded)."""
    errors = []
    barrier = threading.Barrier(n)

    def guarded(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as e:  # returned to the test, which asserts on the list
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def in_forked_child(check, fork=os.fork):
    """Fork with ``fork``; the child runs ``check()`` and exits 0 when it returns true, 2 when
    false and 3 when it raises. Returns the child's exit status."""
    pid = fork()
    if pid == 0:
        code = 3
        try:
            code = 0 if check() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status)
