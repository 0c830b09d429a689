"""What a trace says about a distributed run: the analyses behind
``pivot/sections/distributed.py`` and ``ranks.py`` (one stem in every layer).

::

    comm         (one rank's collectives: what, how long, how much compute hid them)
    breakdown    (each step's wall time partitioned per device: compute, overlap,
                  exposed communication, memcpy, runtime, idle, ...)
    queue        (device queues and launch delays per stream)
    stragglers   (across ranks: the same collective on every rank, who came last)
    ranks        (across ranks: per-rank Profiles merged into a Run)

The first three run inside the per-rank reducer (``trace/reduce.py``) on one rank's
event tables; the last two read only the ranks' typed Profiles, wherever they were
reduced.
"""
