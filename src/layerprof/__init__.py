"""layerprof: where the time and memory of a PyTorch model go, layer by layer."""

from __future__ import annotations

__version__ = "0.1.0"
