"""What kind of torch file a path holds, told from its bytes before anything is unpickled.

A file's name says nothing here: ``.pt`` is used for state dicts, whole modules,
TorchScript and exports alike.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Literal

from layerprof.errors import ModelLoadError
from layerprof.load.archive import member_names

_FileFormat = Literal["torchscript", "export", "torch", "pickle", "damaged-zip", "other"]


def checked_file(path: str | os.PathLike[str]) -> Path:
    file = Path(path)
    if file.is_dir():
        raise ModelLoadError(f"model file {file} is a directory, not a file")
    if not file.exists():
        raise ModelLoadError(f"model file {file} does not exist")
    return file


def torch_file_format(file: Path) -> _FileFormat:
    """Tell torch file kinds apart by their layout, before any unpickling.

    ``"torch"`` is a ``torch.save`` zip, ``"pickle"`` a legacy (pre-1.6)
    ``torch.save`` stream, ``"damaged-zip"`` a zip header without a readable
    directory (cut short in transfer), ``"other"`` anything else. Raises
    ``OSError`` when the file cannot be read.
    """
    if zipfile.is_zipfile(file):
        try:
            with zipfile.ZipFile(file) as archive:
                return _zip_kind(member_names(archive, file))
        except zipfile.BadZipFile:
            return "damaged-zip"
    with file.open("rb") as handle:
        head = handle.read(2)
    if head == b"PK":
        return "damaged-zip"
    # A pickle stream starts with the protocol opcode 0x80.
    return "pickle" if head[:1] == b"\x80" else "other"


def sniff_archive(file: Path) -> _FileFormat:
    try:
        kind = torch_file_format(file)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {file}: {exc.strerror or exc}") from exc
    if kind == "damaged-zip":
        raise ModelLoadError(f"{file} is a damaged zip archive (truncated or corrupt?)")
    if kind == "other":
        raise ModelLoadError(
            f"{file} is not a torch file (neither a torch.save zip archive nor a pickle)",
            hint="expected a state_dict / checkpoint (.pt, .pth), TorchScript or .pt2 file",
        )
    return kind


def _zip_kind(names: list[str]) -> Literal["torchscript", "export", "torch"]:
    # torch zips put every entry under one top folder: "<stem>/...".
    inner = {name.split("/", 1)[1] if "/" in name else name for name in names}
    if "constants.pkl" in inner and any(n.startswith("code/") for n in inner):
        return "torchscript"
    if (
        "archive_format" in inner
        or "models/model.json" in inner
        or any(n.endswith("serialized_exported_program.json") for n in inner)
    ):
        return "export"
    return "torch"
