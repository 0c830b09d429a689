"""Hooks mode: per-layer forward (and backward) times from wrappers around every module.

The Recorder swaps one instance-level wrapper into each module, appends ``(code, time)``
pairs while the model runs and reduces them afterwards (``layertimes``); ``backward`` times
each layer's backward from autograd graph-node hooks.
"""
