"""``layerprof analyze REPLAY --capture CAPTURE`` and a folder that pairs itself, from the
command line: the files it writes, and one-line errors with nothing half-written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from layerprof import Run
from layerprof.cli import main
from tests.support.graph_traces import capture_events, replay_events, write_trace
from tests.support.paths import DATA

SGLANG = DATA / "serving" / "sglang_decode"


def test_a_folder_with_capture_traces_pairs_itself(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    assert main(["analyze", str(SGLANG), "-q", "--json", str(out)]) == 0
    rank = json.loads(out.read_text())["ranks"][0]
    replay = rank["graph_replay"]
    assert (replay["kernels"], replay["matched"]) == (544, 544)
    assert replay["captures"][0]["batch"] == 32 and replay["captures"][0]["mode"] == "FULL"
    paths = [layer["path"] for layer in rank["layers"]]
    assert "Qwen3Model.Qwen3DecoderLayer[35].Qwen2MLP.MergedColumnParallelLinear" in paths
    # the saved analysis reads back with the same section (report and diff read it so)
    back = Run.load(out).rank()
    assert back.graph_replay is not None and back.graph_replay.matched == 544
    assert main(["report", str(out), "-q"]) == 0


def test_capture_flag_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replay = write_trace(tmp_path / "replay.json.gz", replay_events())
    capture = write_trace(tmp_path / "capture.json.gz", capture_events())
    html = tmp_path / "r.html"
    assert main(["analyze", str(replay), "--capture", str(capture), "--html", str(html)]) == 0
    printed = capsys.readouterr().out
    assert "graph replay read through its capture" in printed
    assert "device ops on layers 14 of 14" in printed
    page = html.read_text()
    assert 'id="graph-replay"' in page
    # the launch tables say how many device ops the graph launch replayed
    assert "cudaGraphLaunch" in printed and "(1; replayed 14 device ops)" in printed
    assert "Replayed device ops" in page


def test_a_capture_of_another_model_fails_in_one_line_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = write_trace(tmp_path / "replay.json.gz", replay_events())
    other = write_trace(tmp_path / "other.json.gz", capture_events(prefix="x_"))
    out = tmp_path / "a.json"
    rc = main(["analyze", str(replay), "--capture", str(other), "--json", str(out)])
    err = capsys.readouterr().err
    assert rc != 0 and not out.exists()
    assert err.count("\n") == 1 and "no capture matches" in err and "other.json.gz" in err


def test_a_folder_whose_details_name_a_missing_file_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(SGLANG / "sglang_Qwen3-8B_decode.json.gz", tmp_path)
    (tmp_path / "capture_traces").mkdir()
    (tmp_path / "capture_traces" / "execution_details.json").write_text(
        json.dumps([{"file": "gone.json.gz", "batch_size": 32, "mode": "FULL"}])
    )
    assert main(["analyze", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "gone.json.gz" in err and err.count("\n") == 1


def test_capture_with_a_url_says_it_reads_local_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = write_trace(tmp_path / "capture.json.gz", capture_events())
    assert main(["analyze", "s3://bucket/replay.json.gz", "--capture", str(capture)]) != 0
    assert "--capture reads a local replay trace" in capsys.readouterr().err
