"""The package version (its own module, so any layer can name it without the API)."""

__version__ = "0.2.0"
