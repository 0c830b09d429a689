"""A graph replay read through its capture, in the console (``Profile.graph_replay``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from layerprof.render.replay_text import missed_lines, replay_lines, title

if TYPE_CHECKING:
    from rich.console import Console

    from layerprof.pivot.profile import Profile


def print_graph_replay(p: Profile, console: Console, top: int) -> None:
    r = p.graph_replay
    if r is None:
        return
    console.print(Text(title(r), style="bold"))
    for line in replay_lines(r):
        console.print(Text("  " + line))
    if r.missed:
        console.print(Text(f"  unmatched device ops (on no layer; {len(r.missed)} names):"))
        for line in missed_lines(r, top):
            console.print(Text("    " + line, style="dim"))
