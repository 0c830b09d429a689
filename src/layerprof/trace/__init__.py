"""Kineto / Chrome trace reader and analyses (no torch, no pandas).

::

    reader   (files, gzip, batched orjson decode, ranks)
      -> events   (one pass into typed numpy tables, integer ns)
      -> nesting  (who encloses whom per thread, self times)
      -> links    (device op -> launch call -> op / module)
      -> steps, ops, gpu, modules, allocator, attribution   (analyses)
      -> reduce   (one rank's tables -> its typed Profile)

Two rooms beside the engine: ``distributed/`` (collectives, step breakdown, device
queues in a rank; stragglers and the merge of ranks into a Run) and ``jobs/`` (the
inputs, one job per rank on an executor, the merge). Entry point: :func:`analyze`
(``jobs/rankjobs.py``).
"""

from __future__ import annotations

from layerprof.trace.jobs.rankjobs import analyze, analyze_file

__all__ = ["analyze", "analyze_file"]
