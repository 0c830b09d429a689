"""Ops mode: a torch.profiler run whose operators are attributed to module paths.

``profiler`` records the run; ``cost`` measures what the recording costs each layer and
removes it.
"""
