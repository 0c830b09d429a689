"""``--compile``: the per-layer view of a torch.compile-d model.

``gate`` checks the torch internals it stands on, ``regions`` chooses what compiles,
``backend`` records what each compiled graph runs (``layerprof.trace.graphrecord``),
the trace engine's ``layerprof.trace.compiled`` credits kernel time to module paths and
``samples`` turns that into per-layer rows; ``run`` drives the whole.
"""
