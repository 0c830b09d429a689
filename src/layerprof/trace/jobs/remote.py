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

In a URL, ``?`` starts a query string (a presigned S3 or Azure SAS link
carries its signature there), never a wildcard: a URL with a query names one
file. An ``http(s)://`` URL is never listed unless it ends in ``/`` or has
``*`` or ``[`` in its last segment: fsspec lists a web page by reading its
whole body, so layerprof reads that page itself, within the input size
limit. http(s) reads wait at most ``timeout`` seconds for the server to
connect or to send the next bytes.
"""

from __future__ import annotations

import fnmatch
import glob
import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from layerprof.errors import TraceError, UsageError
from layerprof.reading import CHUNK, default_limit, format_size, read_input, read_stream
from layerprof.trace.reader import TRACE_SUFFIXES, trace_files, unreadable

#: Seconds an http(s) server may take to accept a connection or to send the next bytes.
DEFAULT_TIMEOUT = 30.0

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_ANY_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_WILDCARD = re.compile(r"[*[]")
_HREF = re.compile(rb"""href\s*=\s*["']?([^"'\s>]+)""", re.IGNORECASE)
_HTTP = ("http", "https")


@dataclass(frozen=True)
class TraceInput:
    """One rank's trace: where a worker opens it, and the name the user sees."""

    location: str = field(repr=False)  # a local path, or a URL with what it needs to open
    name: str  # the path, or the URL without credentials (all a message may show)
    listed: bool = False  # found in a directory or by a glob (not named by the user)

    @property
    def remote(self) -> bool:
        return is_url(self.location)


def is_url(text: str) -> bool:
    return _SCHEME.match(text) is not None


def shown(spec: str | os.PathLike[str]) -> str:
    """What a message, a console header or a saved file may call ``spec``: a path as
    it is, a URL without its user name, password and query string values."""
    text = os.fspath(spec)
    return redact(text) if is_url(text) else text


def redact(url: str) -> str:
    """A URL as it may be shown: no user name or password, no query string values."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for "alice:p" (a password's "/", "?" or "#" cut it)
    except ValueError:
        # An authority that does not parse: a password with a "/", "?" or "#" not
        # percent-encoded. Everything up to the last "@" goes; without one, all of it.
        scheme, _, rest = url.partition("://")
        userinfo, at, after = rest.rpartition("@")
        return redact(f"{scheme}://{after}") if at and userinfo else f"{scheme}://..."
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url  # nothing to hide (and memory:///x keeps its three slashes)
    host = parts.netloc.rsplit("@", 1)[-1]
    # Names stay (they say what kind of link it is); a part with no "=" may be a bare token.
    query = "&".join(
        f"{k.split('=', 1)[0]}=..." if "=" in k else "..." for k in parts.query.split("&") if k
    )
    return f"{parts.scheme}://{host}{parts.path}" + (f"?{query}" if query else "")


def scrub(text: str, url: str) -> str:
    """A backend's message with the URL, and every secret it carries, hidden: backends
    quote the URL re-encoded (``%43`` decoded, the query re-escaped), so each URL in
    the text is redacted and each secret of ``url`` is removed in any spelling."""
    text = _ANY_URL.sub(lambda m: redact(m.group(0)), text.replace(url, redact(url)))
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, "...")
    return text


def _secrets(url: str) -> set[str]:
    """The user name, password and query values of ``url``, raw and percent-decoded."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    found = [parts.username or "", parts.password or "", parts.fragment]
    found += [pair.split("=", 1)[-1] for pair in parts.query.split("&")]
    # Short values ("1", "true") are common words; they hide nothing worth the noise.
    return {s for raw in found for s in (raw, unquote(raw)) if len(s) >= 4}


def list_inputs(
    spec: str | os.PathLike[str], *, limit: int | None = None, timeout: float | None = None
) -> list[TraceInput]:
    """The trace files ``spec`` names: a file, a directory's ``*.json[.gz]``, a glob,
    or the same under an fsspec URL. TraceError (one line) when it names none.

    ``limit``: the most bytes an http(s) listing page may hold (the input size
    ceiling); ``timeout``: seconds an http(s) server may stay silent."""
    text = os.fspath(spec)
    if is_url(text):
        return _remote_inputs(text, limit=limit, timeout=timeout)
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


def _remote_inputs(url: str, *, limit: int | None, timeout: float | None) -> list[TraceInput]:
    name = redact(url)
    fs, root = filesystem(url, timeout=timeout)
    pattern = wildcard(url)
    if _scheme(url) in _HTTP:
        return _http_inputs(fs, url, pattern=pattern, limit=limit, timeout=timeout)
    try:
        if pattern:
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
        raise _remote_error(exc, url, "cannot list it", timeout) from None
    traces = sorted(str(p) for p in found if str(p).endswith(TRACE_SUFFIXES))
    if not traces:
        raise TraceError(f"{name}: {kind}")
    urls = [fs.unstrip_protocol(p) if not is_url(p) else p for p in traces]
    return [TraceInput(u, redact(u)) for u in urls]


def wildcard(url: str) -> bool:
    """Whether ``url`` is a glob: ``*`` or ``[`` in it, and no query string (``?`` is
    never a wildcard in a URL: it starts the query a signed link carries)."""
    return "?" not in url and _WILDCARD.search(url) is not None


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower()


def _http_inputs(
    fs: Any, url: str, *, pattern: bool, limit: int | None, timeout: float | None
) -> list[TraceInput]:
    """An http(s) URL: a file as it is (the worker reads it, no request here); a URL
    ending in ``/`` is the page that links to the traces, a glob matches the last
    segment against the links of the page above it."""
    name = redact(url)
    if not pattern and not url.endswith("/"):
        return [TraceInput(url, name)]
    page = _folder(url) if pattern else url
    if _WILDCARD.search(page):
        raise TraceError(f"{name}: a glob in an http(s) URL matches file names in one folder")
    links = _page_links(fs, page, limit=limit, timeout=timeout)
    last = url[len(page) :]
    chosen = [u for u, leaf in links if not pattern or fnmatch.fnmatchcase(leaf, last)]
    traces = sorted({u for u in chosen if urlsplit(u).path.endswith(TRACE_SUFFIXES)})
    if not traces:
        kind = "no .json or .json.gz file matches" if pattern else "the page links to no trace"
        raise TraceError(f"{name}: {kind}")
    return [TraceInput(u, redact(u)) for u in traces]


def _folder(url: str) -> str:
    """The URL up to the ``/`` before its first wildcard."""
    found = _WILDCARD.search(url)
    return url[: url.rfind("/", 0, found.start() if found else len(url)) + 1]


def _page_links(
    fs: Any, page: str, *, limit: int | None, timeout: float | None
) -> list[tuple[str, str]]:
    """(URL, file name) of each link on ``page`` to a file directly in its folder, read
    within the input size ceiling. A link keeps the page's credentials, so a worker
    can open it."""
    ceiling = default_limit() if limit is None else limit
    name = redact(page)
    try:
        with fs.open(page, "rb", block_size=0) as handle:  # a stream, read in chunks
            body = bytearray()
            while chunk := handle.read(CHUNK):
                body += chunk
                if len(body) > ceiling:
                    raise TraceError(
                        f"{name}: the listing is larger than the input size limit of"
                        f" {format_size(ceiling)}; raise it with --max-input-size"
                    )
    except TraceError:
        raise
    except Exception as exc:  # network, status, ...: the backend's words, scrubbed
        if _missing(exc):
            raise TraceError(f"{name}: no such page") from None
        raise _remote_error(exc, page, "cannot list it", timeout) from None
    base = urlsplit(page)
    folder = redact(page).split("?", 1)[0]
    out = []
    for raw in _HREF.findall(bytes(body)):
        link = urljoin(page, html.unescape(raw.decode("utf-8", "replace")))
        parts = urlsplit(link)._replace(netloc=base.netloc, fragment="")
        leaf = redact(parts.geturl()).split("?", 1)[0][len(folder) :]
        if redact(link).startswith(folder) and leaf and "/" not in leaf:
            out.append((parts.geturl(), unquote(leaf)))
    return out


def filesystem(url: str, *, timeout: float | None = None) -> tuple[Any, str]:
    """The fsspec filesystem and path of ``url``; one line naming what to install if
    fsspec or the scheme's backend is missing. ``timeout`` bounds each wait of an
    http(s) request (connecting, then between bytes), not a whole download."""
    name = redact(url)
    try:
        import fsspec
    except ImportError:
        raise UsageError(
            f"{name}: reading URLs needs fsspec, which is not installed",
            hint="pip install 'layerprof[remote]'",
        ) from None
    scheme = _scheme(url)
    try:
        fs, path = fsspec.core.url_to_fs(url, **_options(scheme, timeout))
    except ImportError as exc:
        package = _backend_package(scheme, exc)
        raise UsageError(
            f"{name}: reading {scheme}:// URLs needs the {package} package, which is not installed",
            hint=f"pip install {package}",
        ) from None
    except ValueError as exc:
        raise UsageError(f"{name}: {scrub(_first_line(exc), url)}") from None
    return fs, str(path)


def _options(scheme: str, timeout: float | None) -> dict[str, Any]:
    """Storage options: aiohttp's default waits 300 s in total for a silent server,
    and would also cut off a download that takes longer than that."""
    if scheme not in _HTTP:
        return {}
    import aiohttp  # fsspec's http backend needs it; url_to_fs names it when missing

    wait = DEFAULT_TIMEOUT if timeout is None else timeout
    return {
        "client_kwargs": {
            "timeout": aiohttp.ClientTimeout(total=None, sock_connect=wait, sock_read=wait)
        }
    }


def _backend_package(scheme: str, exc: ImportError) -> str:
    """The package fsspec says a scheme needs (``s3fs`` for ``s3://``)."""
    try:
        from fsspec.registry import known_implementations

        said = str(known_implementations.get(scheme, {}).get("err", ""))
    except ImportError:  # pragma: no cover - fsspec imported above
        said = ""
    found = re.search(r"[Ii]nstall (?:the )?([A-Za-z0-9_.\-\[\]]+)", said or str(exc))
    return found.group(1) if found else (exc.name or f"an fsspec backend for {scheme}://")


def read_trace_bytes(
    source: TraceInput, *, limit: int | None, timeout: float | None = None
) -> bytearray:
    """The JSON bytes of one rank's trace, within the input size ceiling."""
    if not source.remote:
        # A listed name must be a regular file: a FIFO would block the read forever and
        # /dev/zero fill it; a file the user named (a pipe, <(zcat t.json.gz)) may be either.
        why = unreadable(source.location) if source.listed else None
        if why is not None:
            raise TraceError(f"{source.name}: {why}")
        return read_input(source.location, limit=limit, error=TraceError)
    fs, path = filesystem(source.location, timeout=timeout)
    # Given the size, the http backend does not ask the server for it a second time.
    http = _scheme(source.location) in _HTTP
    try:
        size = _size(fs, path)
        with fs.open(path, "rb", **({"size": size} if http and size else {})) as handle:
            return read_stream(handle, source.name, size=size, limit=limit, error=TraceError)
    except (TraceError, UsageError):
        raise
    except Exception as exc:  # network, permissions, ...: the backend's words, scrubbed
        if _missing(exc):
            raise TraceError(f"{source.name}: no such file") from None
        raise _remote_error(exc, source.location, "cannot read it", timeout) from None


def _size(fs: Any, path: str) -> int | None:
    """The file's size when the backend knows it (a server without Content-Length does
    not say: the file is then read as a stream)."""
    try:
        size = fs.size(path)
    except Exception as exc:
        if _missing(exc) or _cause(exc) is not exc:  # missing, or a reason (a timeout, a 403)
            raise
        return None
    return size if isinstance(size, int) and size >= 0 else None


def _missing(exc: BaseException) -> bool:
    """No such file: fsspec's http backend turns a 404 (and every other failure, a
    timeout too) into FileNotFoundError, so the cause decides."""
    cause = _cause(exc)
    return isinstance(exc, FileNotFoundError) and (
        cause is exc or getattr(cause, "status", None) == 404
    )


def _remote_error(exc: BaseException, url: str, what: str, timeout: float | None) -> TraceError:
    """One line naming the URL (no credentials): a timeout says how long was waited."""
    name = redact(url)
    if _timed_out(exc):
        wait = DEFAULT_TIMEOUT if timeout is None else timeout
        return TraceError(
            f"{name}: the server did not answer within {wait:g} s",
            hint="wait longer with --timeout SECONDS",
        )
    return TraceError(f"{name}: {what} ({scrub(_first_line(_cause(exc)), url)})")


def _timed_out(exc: BaseException) -> bool:
    import asyncio  # only here: 12 ms of every start (3.10's TimeoutError is its own)

    return isinstance(_cause(exc), (TimeoutError, asyncio.TimeoutError))


def _cause(exc: BaseException) -> BaseException:
    """The first error in the chain: fsspec wraps a timeout or an HTTP status in
    FileNotFoundError (and then says nothing of why)."""
    seen = {id(exc)}
    while (nxt := exc.__cause__ or exc.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        exc = nxt
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
