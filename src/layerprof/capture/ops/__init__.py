"""Ops mode: a torch.profiler run whose operators are attributed to module paths
(``mode``), on the toolkit of ``layerprof.capture.profiling``.
"""
