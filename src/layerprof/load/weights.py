"""A state dict into the ``--arch`` model: where a checkpoint keeps it, prefixes
(``module.``, ``_orig_mod``) stripped, strict key matching with errors that list the
missing, unexpected and mis-shaped keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from layerprof.errors import ModelLoadError
from layerprof.load.messages import type_name
from layerprof.pivot.notes import Note

if TYPE_CHECKING:
    import torch
    from torch import nn


_SHOWN_KEYS = 5


#: Keys under which training checkpoints commonly keep the model weights.
CHECKPOINT_KEYS: tuple[str, ...] = ("state_dict", "model_state_dict", "model", "module")


def find_state_dict(obj: Any, file: Path) -> tuple[dict[str, torch.Tensor], str]:
    """The weights in ``obj`` and where they were (``"['state_dict']"`` or ``""``)."""
    if not isinstance(obj, Mapping):
        raise ModelLoadError(
            f"{file} holds {type_name(obj)}, not a model, state_dict or checkpoint dict"
        )
    for key in CHECKPOINT_KEYS:
        inner = obj.get(key)
        if isinstance(inner, Mapping) and inner:
            return _checked_state_dict(inner, file, f"[{key!r}]"), f"[{key!r}]"
    return _checked_state_dict(obj, file, ""), ""


def _checked_state_dict(obj: Mapping[Any, Any], file: Path, where: str) -> dict[str, torch.Tensor]:
    import torch

    if not obj:
        raise ModelLoadError(f"{file}{where} is an empty dict: no weights to load")
    for key, value in obj.items():
        if not isinstance(key, str):
            raise ModelLoadError(f"{file}{where} is not a state_dict: key {key!r} is not a string")
        # get_extra_state() may store anything under "<module>._extra_state".
        if not isinstance(value, torch.Tensor) and not key.endswith("_extra_state"):
            raise ModelLoadError(
                f"{file}{where} is not a state_dict: {key!r} is {type_name(value)}, not a tensor",
                hint="expected parameter names -> tensors, or a checkpoint with them under "
                + ", ".join(repr(k) for k in CHECKPOINT_KEYS),
            )
    return dict(obj)


def load_weights(
    model: nn.Module,
    state: dict[str, torch.Tensor],
    *,
    file: Path,
    arch: str,
    strict: bool,
) -> tuple[Note, ...]:
    expected = model.state_dict()
    state, notes = _strip_prefixes(state, expected)
    match = _KeyMatch.compare(state, expected)
    if match.clean:
        model.load_state_dict(state, strict=True)
        return notes
    if strict:
        raise ModelLoadError(
            f"state_dict {file} does not match --arch {arch}: {match.describe()}",
            hint="pass --non-strict to load the tensors that match and keep the rest "
            "as initialised",
        )
    loadable = {k: v for k, v in state.items() if k in match.loadable}
    model.load_state_dict(loadable, strict=False)
    loaded = Note(
        "non-strict-load",
        f"non-strict: loaded {len(loadable)} of {len(expected)} tensors; {match.counts()}",
        {"loaded": len(loadable), "tensors": len(expected)},
    )
    return (*notes, loaded)


def _strip_prefixes(
    state: dict[str, torch.Tensor], expected: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor], tuple[Note, ...]]:
    """Undo the key prefixes DataParallel/DDP (``module.``) and torch.compile add."""
    notes: list[Note] = []
    wanted = set(expected)
    while _all_prefixed(state, "module.") and not _all_prefixed(wanted, "module."):
        state = {k.removeprefix("module."): v for k, v in state.items()}
        text = "stripped 'module.' key prefix (DataParallel/DDP)"
        notes.append(Note("stripped-prefix", text, {"prefix": "module."}))
    if not any("_orig_mod" in k.split(".") for k in wanted) and any(
        "_orig_mod" in k.split(".") for k in state
    ):
        # torch.compile wraps a module as OptimizedModule(_orig_mod=module), at any depth.
        state = {_drop_segment(k, "_orig_mod"): v for k, v in state.items()}
        text = "stripped '_orig_mod.' key segments (torch.compile)"
        notes.append(Note("stripped-prefix", text, {"prefix": "_orig_mod."}))
    return state, tuple(notes)


def _all_prefixed(keys: Mapping[str, Any] | set[str], prefix: str) -> bool:
    return bool(keys) and all(k.startswith(prefix) for k in keys)


def _drop_segment(key: str, segment: str) -> str:
    return ".".join(part for part in key.split(".") if part != segment)


@dataclass(frozen=True)
class _KeyMatch:
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    mismatched: tuple[str, ...]  # "name: file [a, b] vs model [c, d]"
    loadable: frozenset[str]

    @classmethod
    def compare(cls, state: Mapping[str, Any], expected: Mapping[str, Any]) -> _KeyMatch:
        missing = tuple(k for k in expected if k not in state)
        unexpected = tuple(k for k in state if k not in expected)
        mismatched: list[str] = []
        loadable: set[str] = set()
        for key in state.keys() & expected.keys():
            have, want = _shape(state[key]), _shape(expected[key])
            if have == want:
                loadable.add(key)
            else:
                mismatched.append(f"{key}: file {have} vs model {want}")
        return cls(missing, unexpected, tuple(sorted(mismatched)), frozenset(loadable))

    @property
    def clean(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def counts(self) -> str:
        return (
            f"{len(self.missing)} missing, {len(self.unexpected)} unexpected, "
            f"{len(self.mismatched)} size mismatch(es) skipped"
        )

    def describe(self) -> str:
        parts = [
            _listing("missing key", self.missing),
            _listing("unexpected key", self.unexpected),
            _listing("size mismatch", self.mismatched, plural="size mismatches"),
        ]
        return "; ".join(p for p in parts if p)


def _listing(what: str, items: tuple[str, ...], *, plural: str | None = None) -> str:
    if not items:
        return ""
    label = what if len(items) == 1 else (plural or f"{what}s")
    shown = ", ".join(items[:_SHOWN_KEYS])
    more = f", ... ({len(items) - _SHOWN_KEYS} more)" if len(items) > _SHOWN_KEYS else ""
    return f"{len(items)} {label} ({shown}{more})"


def _shape(value: Any) -> list[int] | None:
    shape = getattr(value, "shape", None)
    return list(shape) if shape is not None else None
