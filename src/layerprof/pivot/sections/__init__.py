"""Typed sections of a Profile (value objects only: no torch, no numpy), one module
per family; import a section's types from its module
(``from layerprof.pivot.sections.trace import Steps``).

``trace`` holds what traces and ops mode fill (steps, GPU time, kernels, memcpy,
launches, memory, annotations, where a trace came from, cross-rank results);
``distributed`` the step breakdown, collectives, queues, memory timeline and
stragglers; ``stepwork`` each step's device work; ``serving`` a serving engine's
steps by phase; ``flops`` counted FLOPs, their coverage and the device's peak;
``passes`` whether a live run's per-layer pass ran the clean pass's code (fused fast
paths); ``compiled`` how a ``--compile`` run's kernel time went to layers; ``inputs``
the input signatures a Recorder saw; ``memory`` the bytes each layer saves for
backward (activation memory); ``loop`` a training loop's steps and each layer's
forward and backward per step; ``generation`` a generate's prefill and decode;
``replay`` a CUDA graph replay's layers; ``repeats`` the medians of separate
processes; ``ranks`` each layer across ranks; ``sweep`` one model over a grid.

A new analysis adds its own module here, a field on ``Profile`` (or ``Run``), and
its writer/reader in ``layerprof.codec``. This package imports none of its modules:
a module is created when something imports it (a frozen dataclass costs about 1 ms
to create on Python 3.11, and ``layerprof analyze`` of a trace needs neither a
compiled run's, a generate's nor a training loop's sections).
"""
