"""The console line saying which inputs a Recorder saw and how many forwards it recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

if TYPE_CHECKING:
    from layerprof.pivot.profile import Profile


def signature_lines(profile: Profile) -> list[Text]:
    """One line per profile with input signatures: forwards per signature, and which
    signature the table's shapes belong to (the others' are in the JSON)."""
    sigs = profile.signatures
    if not sigs or (profile.meta.inputs and profile.meta.inputs not in [s.inputs for s in sigs]):
        return []  # a profile whose meta names other inputs: the meta's line stands
    total = sum(s.forwards for s in sigs)
    main = max(sigs, key=lambda s: s.forwards)

    def label(inputs: tuple[str, ...]) -> str:
        return "; ".join(inputs) or "(no tensor inputs)"

    if len(sigs) == 1:
        return [Text(f"inputs {label(main.inputs)}  ({_forwards(total)} recorded)")]
    parts = ", ".join(f"{label(s.inputs)} x{s.forwards}" for s in sigs)
    return [
        Text(f"inputs: {len(sigs)} input signatures, {_forwards(total)} recorded: {parts}"),
        Text(
            f"  times are over all {_forwards(total)}; shapes in the table are those of"
            f" {label(main.inputs)} (per signature: JSON 'signatures')",
            style="dim",
        ),
    ]


def _forwards(n: int) -> str:
    return f"{n} forward{'s' if n != 1 else ''}"
