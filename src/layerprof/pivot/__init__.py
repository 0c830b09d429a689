"""The pivot: the value types every source fills and every analysis and renderer reads.

``profile`` holds ``Profile`` (one process or rank) and ``Run`` (several ranks),
``diff`` the ``Diff`` of two profiles (its rows and gate), ``change`` how one time
moved (``Change``) and the words for it, ``records`` the per-layer and per-op
records, ``sections`` the typed sections a Profile carries, ``notes`` the facts the
numbers depend on. Frozen values, no
torch, no I/O (``save``/``load`` go through ``layerprof.sinks``).
"""
