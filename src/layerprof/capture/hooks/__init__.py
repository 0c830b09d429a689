"""Hooks mode, the default: the Recorder's calibrated wrappers time every layer's forward
(``mode``), and autograd graph-node marks its backward (``backward``, with ops mode's
autograd nodes as the fallback where node hooks cannot be used).
"""
