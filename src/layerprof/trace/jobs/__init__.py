"""The job machinery around the attribution engine: one job per rank's trace, run on
an executor, the results merged into a Run.

::

    remote       (the inputs: paths, folders, globs, fsspec URLs; their bytes)
    rankjobs     (analyze(): one RankJob per input -- read, decode, reduce -- then merge)
    executors    (serial, a local process pool or Dask; ``--executor``)
    processpool  (the local pool, imported only when one runs)
    tasks        (what the executors share: an item's outcome, the call that makes it)

A job is pickled by its module path (``layerprof.trace.jobs.rankjobs.RankJob``) and
a worker imports it by name, so nothing here may live in ``__main__``.
"""
