"""Sources of measurements: run a live model and record it.

The runner (clean latency pass + per-layer pass) with the Recorder's hooks and
clocks, ops mode (torch.profiler, attributed by the trace engine), backward,
TorchScript / torch.export, memory and FLOPs. Imports torch where a model runs.
"""
