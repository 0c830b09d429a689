"""Saved sections whose numbers crash or mislead are one-line errors naming the field
(issue 43, item 14): a summary median of 1e308 (every diff raised OverflowError), a
summary of -7 samples, a recompute list shorter than the steps, negative time to first
token, inter-token latency and latency summaries (read as "faster -105 %", passing the
gate). The documents are real profiles of tiny models (tests/support/saved_sections.py),
changed in one place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layerprof import codec, sinks
from layerprof.analysis.diff import diff
from layerprof.analysis.gate import gate as gate_of
from layerprof.cli import main
from layerprof.errors import LayerprofError
from tests.support.saved_sections import DOCUMENTS, document

#: the times of a summary (``std`` and ``mad`` are spreads, checked apart)
_TIMES = ("median", "mean", "p90", "p99", "min", "max", "ci_low", "ci_high")


def fails_in_one_line(
    bad: dict[str, Any], good: dict[str, Any], said: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``report`` (console and HTML) and ``diff`` of the changed file exit 2 with one line
    naming the field; no half-written HTML is left."""
    bad_path, good_path = tmp_path / "bad.json", tmp_path / "good.json"
    bad_path.write_text(json.dumps(bad))
    good_path.write_text(json.dumps(good))
    html = tmp_path / "r.html"
    for argv in (
        ["report", str(bad_path)],
        ["report", str(bad_path), "--html", str(html)],
        ["diff", str(good_path), str(bad_path), "--fail-above", "5%", "-q"],
        ["diff", str(bad_path), str(good_path)],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert "internal error" not in err and "Traceback" not in err, err
        assert err.startswith("layerprof: error: ") and said in err, err
        assert len(err.strip().splitlines()) <= 2, err  # the error, and a hint at most
    assert not html.exists()


def test_a_summary_median_of_1e308_ms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = document("repeated-summaries")
    doc["latency_ms"].pop("samples")  # a file saved without them: the summary is read
    doc["latency_ms"]["median"] = 1e308
    said = "latency_ms.median: 1e+308 is not a usable time"
    fails_in_one_line(doc, document("repeated-summaries"), said, tmp_path, capsys)


def test_a_summary_of_minus_7_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = document("generated-summaries")
    doc["generation"]["itl_ms"].pop("samples", None)
    doc["generation"]["itl_ms"]["summary"]["n"] = -7
    said = "generation.itl_ms.summary.n: expected a count of samples >= 1, found -7"
    fails_in_one_line(doc, document("generated-summaries"), said, tmp_path, capsys)


@pytest.mark.parametrize("key", ["ttft_ms", "itl_ms"])
def test_negative_generate_summaries(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = document("generated-summaries")
    doc["generation"][key].pop("samples", None)
    summary = doc["generation"][key]["summary"]
    for name in _TIMES:
        summary[name] = -0.05 * summary[name]
    said = f"generation.{key}.summary.median: expected a time >= 0"
    fails_in_one_line(doc, document("generated-summaries"), said, tmp_path, capsys)


def test_a_negative_latency_summary_does_not_pass_as_faster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = document("repeated-summaries")
    doc["latency_ms"].pop("samples")
    for name in _TIMES:
        doc["latency_ms"][name] = -0.05 * doc["latency_ms"][name]
    good = document("repeated-summaries")
    fails_in_one_line(doc, good, "latency_ms.median: expected a time >= 0", tmp_path, capsys)
    doc = document("repeated-summaries")
    doc["latency_ms"]["samples"][0] = -1.0
    said = "latency_ms.samples: expected a list of numbers >= 0"
    fails_in_one_line(doc, good, said, tmp_path, capsys)


@pytest.mark.parametrize(("key", "value"), [("std", -1.0), ("mad", -0.5)])
def test_a_negative_spread(
    key: str, value: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = document("generated-summaries")
    doc["generation"]["ttft_ms"].pop("samples", None)
    doc["generation"]["ttft_ms"]["summary"][key] = value
    said = f"generation.ttft_ms.summary.{key}: expected a time >= 0"
    fails_in_one_line(doc, document("generated-summaries"), said, tmp_path, capsys)


def test_an_operator_time_beyond_int64(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = document("ops")
    doc["ops"][0]["self_ms"] = 1e308
    said = "ops[0].self_ms: 1e+308 is not a usable time"
    fails_in_one_line(doc, document("ops"), said, tmp_path, capsys)


# ---- any one saved number changed ---------------------------------------------------------


def _numbers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where the document holds a number (the first 3 items of each list)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _numbers(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value[:3]) for p in _numbers(v, (*path, i))]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and path[0] != "meta":
        return [path]
    return []


_PLACES = {name: _numbers(document(name)) for name in DOCUMENTS}
_HOSTILE = (-7, -1e-3, 0, 0.5, 1e308, -1e308, 2**63)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(DOCUMENTS),
    pick=st.integers(min_value=0, max_value=10**6),
    value=st.sampled_from(_HOSTILE),
)
def test_any_changed_number_loads_or_fails_in_one_line(name: str, pick: int, value: Any) -> None:
    """A saved number set to a hostile value either fails to load with the codec's
    one-line error, or loads into a profile that diffs, gates and renders (console,
    Markdown) without any other exception."""
    doc = document(name)
    path = _PLACES[name][pick % len(_PLACES[name])]
    at = doc
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    try:
        profile = codec.from_dict(doc, source="changed.json")
    except LayerprofError:
        return
    good = codec.from_dict(document(name), source="good.json")
    for a, b in ((good, profile), (profile, good)):
        d = diff(a, b)
        gate_of(d, 5.0)
        sinks.render(d, "console")
        sinks.render(d, "md")
    sinks.render(profile, "console")


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        (("evidence", "runs_base"), -7, "diff.evidence.runs_base: expected a count >= 0"),
        (("evidence", "runs_new"), 0, "diff.evidence.runs_new: expected a count >= 1"),
        (("latency", "p_value"), 2.5, "diff.latency.p_value: expected a number from 0 to 1"),
        (("latency", "ci_ms"), -1.0, "diff.latency.ci_ms: expected a time >= 0"),
        (("latency", "noise_ms"), 1e308, "diff.latency.noise_ms: 1e+308 ms is not a usable time"),
    ],
)
def test_a_saved_diff_outside_its_domain(
    where: tuple[str, str], value: float, said: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``report diff.json`` re-renders a saved diff: its counts and spreads are checked."""
    base = codec.from_dict(document("repeated"), source="a.json")
    d = diff(base, base).to_dict()
    d["latency"]["p_value"] = 0.5  # a between-run row (gathered sides)
    d[where[0]][where[1]] = value
    path = tmp_path / "d.json"
    path.write_text(json.dumps(d))
    code = main(["report", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "internal error" not in err, err


@pytest.mark.parametrize("kept", [[0.002], []])
def test_a_recompute_list_shorter_than_the_steps(
    kept: list[float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = document("looped")
    assert len(doc["loop"]["steps"]) == 3
    doc["loop"]["recompute"][0]["per_step_ms"] = kept
    said = f"loop.recompute[0].per_step_ms: expected one time per step (3), found {len(kept)}"
    fails_in_one_line(doc, document("looped"), said, tmp_path, capsys)
