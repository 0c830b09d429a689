"""Sinks: every renderer reads a Profile, a Run or a Diff and never captures.

Importing this package registers every renderer with ``layerprof.sinks``
(``render/formats.py``) and the JSON codec.
"""

from layerprof.render import formats as formats
