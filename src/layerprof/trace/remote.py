"""What ``analyze`` reads: a file, a directory, a glob, or an fsspec URL naming one of those.

A URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``,
``memory://``, any scheme fsspec knows) is listed on the client, and each
rank's file is opened by the worker that analyzes it: the client never
downloads the ranks. Every read goes through ``layerprof.reading``, so the
``--max-input-size`` ceiling holds for remote files too. fsspec and its
backends (``s3fs``, ``gcsfs``, ``adlfs``, ``aiohttp``) are optional: a
missing one is one line naming the package. Credentials come from each
backend's usual environment (``AWS_*``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_*``, ...); layerprof passes none and shows every URL without
the user name, password and query string a URL may carry.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from layerprof.errors import TraceError, UsageError
from layerprof.reading import read_input, read_stream
from layerprof.trace.reader import TRACE_SUFFIXES, trace_files, unreadable

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


@dataclass(frozen=True)
class TraceInput:
    """One rank's trace: where a worker opens it, and the name the user sees."""

    location: str  # a local path, or a URL
    name: str  # the path, or the URL without credentials
    listed: bool = False  # found in a directory or by a glob (not named by the user)

    @property
    def remote(self) -> bool:
        return is_url(self.location)


def is_url(text: str) -> bool:
    return _SCHEME.match(text) is not None


def redact(url: str) -> str:
    """A URL as it may be shown: no user name or password, no query string values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _USERINFO.sub("", url.split("?", 1)[0])
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url  # nothing to hide (and memory:///x keeps its three slashes)
    host = parts.netloc.rsplit("@", 1)[-1]
    query = "&".join(f"{k.split('=', 1)[0]}=..." for k in parts.query.split("&") if k)
    return f"{parts.scheme}://{host}{parts.path}" + (f"?{query}" if query else "")


def scrub(text: str, url: str) -> str:
    """A backend's message with the URL (and any other credentials in URLs) hidden."""
    return _USERINFO.sub("", text.replace(url, redact(url)))


def list_inputs(spec: str | os.PathLike[str]) -> list[TraceInput]:
    """The trace files ``spec`` names: a file, a directory's ``*.json[.gz]``, a glob,
    or the same under an fsspec URL. TraceError (one line) when it names none."""
    text = os.fspath(spec)
    if is_url(text):
        return _remote_inputs(text)
    p = Path(text)
    if not p.exists() and glob.has_magic(text):
        # Every match, readable or not (a dangling link, a FIFO): see read_trace_bytes.
        traces = sorted(f for f in glob.glob(text) if f.endswith(TRACE_SUFFIXES))
        if not traces:
            raise TraceError(f"{text}: no .json or .json.gz file matches")
        return [TraceInput(f, f, listed=True) for f in traces]
    if p.is_dir():
        return [TraceInput(str(f), str(f), listed=True) for f in trace_files(p)]
    return [TraceInput(str(f), str(f)) for f in trace_files(p)]


def _remote_inputs(url: str) -> list[TraceInput]:
    name = redact(url)
    fs, root = filesystem(url)
    try:
        if glob.has_magic(root):
            found = [p for p in fs.glob(root) if not fs.isdir(p)]
            kind = "no .json or .json.gz file matches"
        elif fs.isdir(root):
            found = [e["name"] for e in fs.ls(root, detail=True) if e.get("type") != "directory"]
            kind = "directory holds no .json or .json.gz trace files"
        elif fs.exists(root):
            return [TraceInput(url, name)]
        else:
            raise TraceError(f"{name}: no such file or directory")
    except TraceError:
        raise
    except Exception as exc:  # the backend's own errors: permissions, network, ...
        raise TraceError(f"{name}: cannot list it ({scrub(_first_line(exc), url)})") from None
    traces = sorted(str(p) for p in found if str(p).endswith(TRACE_SUFFIXES))
    if not traces:
        raise TraceError(f"{name}: {kind}")
    urls = [fs.unstrip_protocol(p) if not is_url(p) else p for p in traces]
    return [TraceInput(u, redact(u)) for u in urls]


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and path of ``url``; one line naming what to install if
    fsspec or the scheme's backend is missing."""
    name = redact(url)
    try:
        import fsspec
    except ImportError:
        raise UsageError(
            f"{name}: reading URLs needs fsspec, which is not installed",
            hint="pip install 'layerprof[remote]'",
        ) from None
    scheme = url.split("://", 1)[0].lower()
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as exc:
        package = _backend_package(scheme, exc)
        raise UsageError(
            f"{name}: reading {scheme}:// URLs needs the {package} package, which is not installed",
            hint=f"pip install {package}",
        ) from None
    except ValueError as exc:
        raise UsageError(f"{name}: {scrub(_first_line(exc), url)}") from None
    return fs, str(path)


def _backend_package(scheme: str, exc: ImportError) -> str:
    """The package fsspec says a scheme needs (``s3fs`` for ``s3://``)."""
    try:
        from fsspec.registry import known_implementations

        said = str(known_implementations.get(scheme, {}).get("err", ""))
    except ImportError:  # pragma: no cover - fsspec imported above
        said = ""
    found = re.search(r"[Ii]nstall (?:the )?([A-Za-z0-9_.\-\[\]]+)", said or str(exc))
    return found.group(1) if found else (exc.name or f"an fsspec backend for {scheme}://")


def read_trace_bytes(source: TraceInput, *, limit: int | None) -> bytearray:
    """The JSON bytes of one rank's trace, within the input size ceiling."""
    if not source.remote:
        # A listed name must be a regular file: a FIFO would block the read forever and
        # /dev/zero fill it; a file the user named (a pipe, <(zcat t.json.gz)) may be either.
        why = unreadable(source.location) if source.listed else None
        if why is not None:
            raise TraceError(f"{source.name}: {why}")
        return read_input(source.location, limit=limit, error=TraceError)
    fs, path = filesystem(source.location)
    try:
        size = _size(fs, path)
        with fs.open(path, "rb") as handle:
            return read_stream(handle, source.name, size=size, limit=limit, error=TraceError)
    except (TraceError, UsageError):
        raise
    except FileNotFoundError:
        raise TraceError(f"{source.name}: no such file") from None
    except Exception as exc:  # network, permissions, ...: the backend's words, scrubbed
        raise TraceError(
            f"{source.name}: cannot read it ({scrub(_first_line(exc), source.location)})"
        ) from None


def _size(fs: Any, path: str) -> int | None:
    try:
        size = fs.size(path)
    except Exception:  # a server that does not say (no Content-Length): read it as a stream
        return None
    return size if isinstance(size, int) and size >= 0 else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
