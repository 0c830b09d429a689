"""Live torchrun: two gloo processes train a DDP-wrapped model under ``layerprof run``;
the per-rank profiles and traces merge into one view of the ranks. DDP and other
wrappers are left out of layer paths, so they are the user's model's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import torch
from torch import nn

import layerprof
from layerprof.capture.platform.distributed import unwrap, user_modules, wrapper_note
from layerprof.cli import main
from layerprof.cli.sources import load_ranks
from layerprof.pivot.profile import Profile
from layerprof.trace import analyze
from tests.support.cli_models import Net
from tests.support.paths import ROOT

USER_PATHS = ["", "fc1", "block2", "block2.0", "block2.1"]


def _gloo_problem() -> str | None:
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_gloo_available():
        return "this torch build has no gloo backend"
    return None


needs_gloo = pytest.mark.skipif(_gloo_problem() is not None, reason=str(_gloo_problem()))


class CheckpointWrapper(nn.Module):
    """Named like torch's activation-checkpoint wrapper: holds the real module under
    ``_checkpoint_wrapped_module`` and calls it."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self._checkpoint_wrapped_module = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._checkpoint_wrapped_module(x)


def test_nested_wrappers_leave_the_user_paths() -> None:
    net = Net()
    net.block2 = CheckpointWrapper(net.block2)  # type: ignore[assignment]
    outer = CheckpointWrapper(net)
    paths = [p for p, _ in user_modules(outer)]
    assert paths == USER_PATHS
    assert unwrap(outer) is net
    note = wrapper_note(outer)
    assert note is not None and note.kind == "wrapper"
    assert note.data == {"wrappers": ("CheckpointWrapper",), "wrapped": "Net"}
    prof = layerprof.profile(outer, torch.randn(8, 4), warmup=1, iters=3)
    assert [i.path for i in prof.layers] == USER_PATHS
    assert prof.layers[0].type == "Net"


@needs_gloo
def test_ddp_in_one_process_profiles_the_users_layers(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(Net())
        prof = layerprof.profile(ddp, torch.randn(8, 4), warmup=1, iters=3, backward=True)
    finally:
        dist.destroy_process_group()
    assert [i.path for i in prof.layers] == USER_PATHS
    assert prof.meta.model == "Net"
    rows = {r.path: r for r in prof.rows()}
    assert rows["fc1"].flops and rows["fc1"].flops > 0  # FLOPs keyed by the user's paths
    assert rows["fc1"].backward_total_ns is not None
    assert any(
        n.kind == "wrapper" and "DistributedDataParallel" in n.data["wrappers"] for n in prof.notes
    )


@needs_gloo
@pytest.mark.slow
def test_torchrun_two_ranks_ddp_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "layerprof", "run", "--arch", "tests.support.cli_models:Net", "--input", "8x4",
        "--ops", "--train", "--backward", "--ddp", "--warmup", "1", "--iters", "3",
        "--json", "p.json", "--trace", "t.json.gz", "-q",
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    except OSError as exc:  # pragma: no cover - platforms that cannot spawn
        pytest.skip(f"cannot start torchrun here: {exc}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["p.rank-0.json", "p.rank-1.json", "t.rank-0.json.gz", "t.rank-1.json.gz"]

    profiles = [Profile.load(tmp_path / f"p.rank-{r}.json") for r in (0, 1)]
    for rank, p in enumerate(profiles):
        assert [i.path for i in p.layers] == USER_PATHS
        assert p.meta.extra["rank"] == rank and p.meta.extra["world_size"] == 2
        assert p.samples["fc1"].backward_total_ns is not None
    # the gradients were all-reduced over gloo: DDP's collectives are in the ops
    assert any(o.name.startswith("c10d::") for o in profiles[0].ops)

    # the traces: one rank each (distributedInfo.rank), layer x rank table on user paths
    run = analyze(tmp_path, executor="serial")
    assert [p.rank for p in run.ranks] == [0, 1]
    assert run.rank_source == "distributedInfo.rank"
    assert len(run.skipped) == 2  # the saved profiles next to the traces
    assert [r.path for r in run.layer_ranks] == USER_PATHS
    assert all([k for k, _ in r.ns_by_rank] == [0, 1] for r in run.layer_ranks)
    # DDP's gloo collectives on every rank, matched across the ranks (stragglers)
    kinds = [
        [c.kind for c in p.trace.communication.collectives]
        for p in run.ranks
        if p.trace.communication
    ]
    assert len(kinds) == 2 and kinds[0] == kinds[1] and "all_reduce" in kinds[0]
    assert run.stragglers is not None and run.stragglers.matched == len(kinds[0])
    assert [r.rank for r in run.stragglers.ranks] == [0, 1]

    # the saved profiles: the same merged view
    merged = load_ranks([str(tmp_path / f"p.rank-{r}.json") for r in (0, 1)])
    assert merged.rank_source == "the profile's meta rank"
    assert [r.path for r in merged.layer_ranks] == USER_PATHS
    fc1 = next(r for r in merged.layer_ranks if r.path == "fc1")
    times = [ns for _, ns in fc1.ns_by_rank]
    assert fc1.min_ns == min(times) and fc1.max_ns == max(times)
    assert dict(fc1.ns_by_rank)[fc1.slowest_rank] == max(times)
    # the live profiles carry the same collectives (no steps: no step table of dashes)
    assert merged.cross is None
    assert merged.stragglers is not None and merged.stragglers.matched == len(kinds[0])
    assert main(["report", *(str(tmp_path / f"p.rank-{r}.json") for r in (1, 0))]) == 0
    text = capsys.readouterr().out
    assert "layers across 2 ranks" in text and "collectives matched across ranks" in text
    assert "step time per rank" not in text


@needs_gloo
def test_report_merges_rank_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (1, 0):
        prof = layerprof.profile(Net(), torch.randn(8, 4), warmup=1, iters=3)
        prof = Profile.from_dict(
            {**prof.to_dict(), "meta": {**prof.to_dict()["meta"], "rank": rank}}
        )
        prof.save(tmp_path / f"p.rank-{rank}.json")
    out = tmp_path / "merged.json"
    files = [str(tmp_path / "p.rank-1.json"), str(tmp_path / "p.rank-0.json")]
    assert main(["report", *files, "--html", str(tmp_path / "r.html")]) == 0
    text = capsys.readouterr().out
    assert "layers across 2 ranks" in text
    html = (tmp_path / "r.html").read_text()
    assert "Layers across 2 ranks" in html and 'id="lp-layer-ranks"' in html
    assert "slowest" in text
    run = load_ranks(files)
    assert [p.rank for p in run.ranks] == [0, 1]
    run.save(out)
    doc = orjson.loads(out.read_bytes())
    assert [r["path"] for r in doc["layers_across_ranks"]] == USER_PATHS


def test_report_refuses_to_merge_a_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = layerprof.profile(Net(), torch.randn(8, 4), warmup=1, iters=3)
    a.save(tmp_path / "a.json")
    d = layerprof.diff(a, a)
    d.save(tmp_path / "d.json")
    assert main(["report", str(tmp_path / "a.json"), str(tmp_path / "d.json")]) == 2
    err = capsys.readouterr().err
    assert "only saved profiles are merged" in err
