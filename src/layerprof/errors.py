"""One exception tree for everything layerprof reports to a user.

::

    LayerprofError                 base: one clear line, optional hint
    ├── UsageError                 bad command-line or API arguments
    ├── ModelLoadError             model file / --arch could not become an nn.Module
    ├── InputSpecError             an --input spec did not parse or load
    ├── ModelRunError              the model raised; names the layer path it failed in
    ├── DeviceError                the requested device is not available
    ├── ProfileFormatError         a file is not a layerprof profile
    ├── TraceError                 a file or directory is not a readable Kineto trace
    └── OutputError                an output file could not be written

The CLI prints ``str(error)`` and, when present, ``error.hint``; it never shows
a traceback unless ``--debug`` is given.
"""

from __future__ import annotations


class LayerprofError(Exception):
    """Base of all errors layerprof raises on purpose."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(LayerprofError):
    """Arguments that cannot work together or do not parse."""


class ModelLoadError(LayerprofError):
    """A model file or architecture could not be turned into an ``nn.Module``."""


class InputSpecError(LayerprofError):
    """An input specification is malformed or its file cannot be loaded."""


class ModelRunError(LayerprofError):
    """The model raised while running; ``layer`` is the innermost module path."""

    def __init__(self, message: str, *, layer: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.layer = layer


class DeviceError(LayerprofError):
    """The requested device (e.g. CUDA) is not available."""


class ProfileFormatError(LayerprofError):
    """A file is not a layerprof profile, or has an unknown schema version."""


class TraceError(LayerprofError):
    """A trace file or directory cannot be read as a Kineto/Chrome trace."""


class OutputError(LayerprofError):
    """An output file could not be written."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program was (by the CLI's handler), so that it ends as
    Ctrl-C does: every clean-up an interrupt runs (workers ended, temporary files
    removed, hooks taken off) runs for it too. Not a LayerprofError: nothing was wrong."""
