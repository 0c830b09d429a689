"""Kineto / Chrome trace reader and analyses (no torch, no pandas).

::

    reader   (files, gzip, batched orjson decode, ranks)
      -> events   (one pass into typed numpy tables, integer ns)
      -> nesting  (who encloses whom per thread, self times)
      -> links    (device op -> launch call -> op / module)
      -> steps, ops, gpu, modules, memory, attribution   (analyses)
      -> reduce   (one rank's tables -> its typed Profile; ranks -> a Run)

Entry point: :func:`analyze`.
"""

from __future__ import annotations

from layerprof.trace.analysis import analyze, analyze_file

__all__ = ["analyze", "analyze_file"]
