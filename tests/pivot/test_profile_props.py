"""Property tests: the derived tree adds up for any per-iteration samples."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.pivot.profile import Profile, TraceSections
from layerprof.pivot.records import LayerInfo, LayerSamples, Meta

PATHS = ["", "a", "b", "a.x", "a.y", "b.z"]
PARENT = {"": None, "a": "", "b": "", "a.x": "a", "a.y": "a", "b.z": "b"}


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    n = draw(st.integers(1, 7))
    present = [p for p in PATHS if p == "" or draw(st.booleans())]
    order = draw(st.permutations(present))
    samples = {}
    for path in present:
        if draw(st.booleans()) or path == "":
            selfs = tuple(draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)))
            calls = draw(st.sampled_from([1.0, 2.0, 0.5]))
            samples[path] = LayerSamples(selfs, selfs, calls, calls_vary=calls == 0.5)
    layers = tuple(LayerInfo(p, "T", PARENT[p]) for p in order)
    return Profile(meta=Meta(model="m"), layers=layers, samples=samples)


@settings(max_examples=150, deadline=None)
@given(profiles())
def test_tree_adds_up_and_shares_sum_to_one(prof: Profile) -> None:
    roots = prof.tree()
    for root in roots:
        root.self_check(tolerance_ns=1e-6)
    rows = prof.rows()
    assert all(r.self_ns >= 0 and r.total_ns >= r.self_ns for r in rows)
    total = sum(r.row.total_ns for r in roots)
    if total > 0:
        assert abs(sum(r.row.share for r in roots) - 1.0) < 1e-9


@settings(max_examples=50, deadline=None)
@given(profiles())
def test_json_round_trip_keeps_rows(prof: Profile) -> None:
    again = Profile.from_dict(prof.to_dict(), source="mem")
    for a, b in zip(prof.rows(), again.rows(), strict=True):
        assert a.path == b.path and abs(a.total_ns - b.total_ns) <= 1e-6 * max(1, a.total_ns) + 1


@settings(max_examples=60, deadline=None)
@given(profiles(), profiles())
def test_rows_follow_every_replaced_field(prof: Profile, other: Profile) -> None:
    """A Profile is frozen and derives its rows once: a copy with other layers or
    samples (``dataclasses.replace``) derives its own, never the original's cached ones,
    and the rows are those of a Profile built afresh from the same fields."""

    def fresh(p: Profile) -> list[object]:
        return Profile(meta=p.meta, layers=p.layers, samples=dict(p.samples)).rows()

    first = prof.rows()
    first.clear()  # a caller's list is its own
    assert prof.rows() == fresh(prof)
    relaid = dataclasses.replace(prof, layers=other.layers)
    assert relaid.rows() == fresh(relaid)
    resampled = dataclasses.replace(prof, samples={**prof.samples, **other.samples})
    assert resampled.rows() == fresh(resampled)
    assert prof.rows() == fresh(prof)  # the original keeps its own


def test_a_profile_is_frozen() -> None:
    prof = Profile(meta=Meta(model="m"), layers=(LayerInfo("", "T", None),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        prof.layers = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        prof.kernels = ()  # type: ignore[attr-defined]  # trace sections: prof.trace.kernels
    assert prof.trace == TraceSections() and prof.trace.kernels == ()


def test_derived_rows_are_not_a_field_nor_pickled() -> None:
    import pickle

    prof = Profile(
        meta=Meta(model="m"),
        layers=(LayerInfo("", "T", None),),
        samples={"": LayerSamples((5,), (5,), 1.0)},
    )
    rows = prof.rows()
    copy = pickle.loads(pickle.dumps(prof))
    assert "_rows" in prof.__dict__ and "_rows" not in copy.__dict__
    assert copy == prof and copy.rows() == rows
    assert "_rows" not in dataclasses.replace(prof).__dict__
    assert dataclasses.replace(prof).rows() == rows
