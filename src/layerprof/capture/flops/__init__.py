"""FLOPs and bytes per layer: the counting dispatch mode, per-op formulas, and the
device's peak rates (given, looked up for known GPUs, or measured) for the roofline.
"""
