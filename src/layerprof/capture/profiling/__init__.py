"""The torch.profiler toolkit the capture modes share (not a mode itself): a capture
session and its trace (``profiler``), what recording under it costs (``cost``) and a
run's Profile filled from the trace (``traced``). Ops mode (``capture/ops/``) is one of
its users; the scripted and compiled modes and the backward pass are the others."""
