"""Helpers of the tests that run the compiled kernels on several threads at once."""
from __future__ import annotations

import threading


def each_on_its_own_thread(fn, args, repeat: int = 5) -> list:
    """``fn(args[i])`` for every ``i``, each on its own thread, all at once, ``repeat`` times over (the kernels release
    the GIL: their calls overlap); the last result of each, in the order of ``args``."""
    out = [None] * len(args)

    def run(i):
        for _ in range(repeat):
            out[i] = fn(args[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
