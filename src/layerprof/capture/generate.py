"""``profile(model, inputs, generate=N)``: a language model's ``generate()`` of N new
tokens, prefill and decode apart (see :mod:`layerprof.pivot.sections.generation`).

Two passes, as for a forward. The clean pass runs warm-up generates, then the timed
ones with nothing on the model but a logits processor that reads the clock when
each token's logits are ready: time to first token, the gaps between tokens, the
whole call. The per-layer pass runs a few generates under a Recorder, which tags
each of the model's forwards with its phase (``prefill``: the forward that takes the
prompt, each generate's first; ``decode``: one new token against the cache) and
assembles the generation section as it does around a user's own generate
(``layerprof.pivot.sections.generation``: one rule for the Recorder, this pass and a
trace); this module adds to it what only it measures: the clean pass's times, the
KV cache, each phase's work and the allocator's peaks.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from layerprof.capture.calls import guarded
from layerprof.capture.flops.counter import count_flops
from layerprof.capture.flops.peaks import device_peak
from layerprof.capture.memory.allocator import CudaMemory
from layerprof.capture.options import GivenPeak, RunOptions
from layerprof.capture.platform.device import device_of
from layerprof.capture.platform.hostload import host_load
from layerprof.capture.recording.forwards import per_forward
from layerprof.errors import UsageError
from layerprof.pivot.notes import Note
from layerprof.pivot.profile import Profile
from layerprof.pivot.sections.flops import Peak
from layerprof.pivot.sections.generation import (
    DECODE,
    ENCODE,
    PREFILL,
    Generation,
    KvCache,
    Phase,
)
from layerprof.stats import Series

if TYPE_CHECKING:
    from layerprof.capture.memory.allocator import MemoryCounter
    from layerprof.capture.platform.clocks import Clock
    from layerprof.capture.recording.recorder import Recorder

#: Generates the per-layer pass runs (each one gives one prefill and N - 1 decode steps).
LAYER_GENERATES = 3


def profile_generate(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], new_tokens: int, *,
    warmup: int, iters: int, threads: int | None = None, counter: MemoryCounter | None = None,
    inference_mode: bool = True, correct: bool = True, peak: GivenPeak | None = None,
    model_name: str | None = None, clock: Clock | None = None,
) -> Profile:  # fmt: skip
    """``model.generate(*args, **kwargs)`` of exactly ``new_tokens`` greedy tokens, with
    ``threads`` CPU threads (None: torch's own; restored after).

    ``counter`` is the allocator's (by default CUDA's on a CUDA model, none on CPU):
    one more generate reads its peak at the first token and at the end, for the
    memory each phase holds above the start (``Generation.peak_bytes``).
    ``inference_mode=False`` runs under ``torch.no_grad()`` instead; ``correct=False``
    leaves the hooks' calibrated cost in the per-layer times; ``peak`` (``--peak``) is
    the device's peak for the phases' roofline. A model's own error names its layer.
    ``clock`` is the per-layer pass's (a test's fake clock; default the host's)."""
    import torch

    device = device_of(model)
    if counter is None and device.startswith("cuda"):
        counter = CudaMemory(device)

    if not callable(getattr(model, "generate", None)):
        raise UsageError(
            f"generate={new_tokens}: {type(model).__name__} has no generate() method (a"
            " Hugging Face causal LM has one); for a decode loop of your own, record it with"
            " layerprof.Recorder"
        )
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise UsageError(f"generate={new_tokens!r}: the number of new tokens must be >= 1")
    # the counts and the thread number checked as RunOptions checks them (one line each)
    checked = RunOptions(warmup=warmup, iters=iters, threads=threads)
    warmup, iters = checked.warmup, checked.iters
    prompt = _prompt(args, kwargs)
    batch, prompt_tokens = int(prompt.shape[0]), int(prompt.shape[-1])  # a 2-d tensor
    check_positions(model, new_tokens, prompt_tokens)
    was_training, before = model.training, torch.get_num_threads()
    model.eval()
    if threads is not None:
        torch.set_num_threads(threads)
    used_threads = torch.get_num_threads()
    grad_mode = torch.inference_mode() if inference_mode else torch.no_grad()
    try:
        with grad_mode:
            for _ in range(warmup):
                _guarded_generate(model, args, kwargs, new_tokens, None)
            ttft, itl, whole = [], [], []
            out = None
            for _ in range(iters):
                stamps: list[int] = []
                t0 = time.perf_counter_ns()
                out = _guarded_generate(model, args, kwargs, new_tokens, stamps)
                t1 = time.perf_counter_ns()
                if len(stamps) != new_tokens:
                    raise UsageError(
                        f"generate={new_tokens}: the model made {len(stamps)} tokens (its"
                        " generate() stopped early or ignored min_new_tokens)"
                    )
                ttft.append(stamps[0] - t0)
                itl += [b - a for a, b in itertools.pairwise(stamps)]
                whole.append(t1 - t0)
            recorded, of_model = _layer_pass(model, args, kwargs, new_tokens, correct, clock)
            phases = _encoded(_assembled(recorded).phases, prompt_tokens * batch)
            phases, found_peak = _with_work(model, args, kwargs, phases, peak)
            peaks = (
                _phase_peaks(model, args, kwargs, new_tokens, counter)
                if counter is not None
                else ()
            )
    finally:
        model.train(was_training)
        torch.set_num_threads(before)
    # the per-layer pass's section, with what the clean pass and the request know
    generation = replace(
        _assembled(recorded),
        new_tokens=new_tokens,
        prompt_tokens=prompt_tokens,  # an encoder-decoder's: the encoder's prompt
        batch=batch,
        generates=len(whole),
        ttft_ns=Series(ttft),
        itl_ns=Series(itl) if itl else None,
        generate_ns=Series(whole),
        phases=phases,
        kv_cache=_kv_cache(out),
        peak=found_peak,
        peak_bytes=peaks,
    )
    recorded, folded = per_forward(recorded, of_model)
    recorded = recorded.with_notes(*_shared_modules(model, recorded))
    note = Note(
        "generation-phases",
        f"the layer table is per forward of the model over {LAYER_GENERATES} generates"
        " (prefill and decode together"
        + (
            "; the encoder, which generate() runs before the first forward, is counted in"
            " that forward: its calls are a fraction of one per forward"
            if folded
            else ""
        )
        + "); the generation section has each phase apart",
    )
    meta = replace(
        recorded.meta, source="layerprof.generate", warmup=warmup, iters=len(whole),
        inputs=(f"input_ids: {batch}x{prompt_tokens}", f"generate {new_tokens} new tokens"),
        model=model_name or recorded.meta.model, dtype=_dtype_of(model), threads=used_threads,
        host=socket.gethostname(), mode="eval", grad=False,
        extra={**recorded.meta.extra, **host_load()},
    )  # fmt: skip
    return replace(recorded, meta=meta, generation=generation, notes=(*recorded.notes, note))


def check_positions(model: Any, new_tokens: int, prompt_tokens: int) -> None:
    """A generate longer than the model's position table, refused in one line before it
    runs: past it a learned table raises IndexError and a rotary model runs on (slowly,
    far outside what it was trained for). An encoder-decoder's prompt is the encoder's;
    its decoder takes a start token and the new ones."""
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return  # no table to run past (T5's relative positions)
    if getattr(config, "is_encoder_decoder", False):
        need, room = max(prompt_tokens, new_tokens + 1), limit - 1
        what = f"a {prompt_tokens}-token prompt and a decoder of {new_tokens + 1} tokens"
    else:
        need, room = prompt_tokens + new_tokens, limit - prompt_tokens
        what = f"a {prompt_tokens}-token prompt and {new_tokens} new tokens"
    if need > limit:
        raise UsageError(
            f"generate={new_tokens}: {what} need {need} positions, more than the model's"
            f" max_position_embeddings ({limit})",
            hint=f"generate at most {max(room, 0)} new tokens after this prompt",
        )


def _shared_modules(model: Any, recorded: Profile) -> tuple[Note, ...]:
    """A note for each layer that never ran while the module or the weights it holds ran
    under other paths: T5's ``shared`` embedding holds the weight its encoder's and
    decoder's ``embed_tokens`` use (tied; in older transformers the same module), and
    reads 0 calls though its weight did the work."""
    samples = recorded.samples
    ran_paths = {p for p, s in samples.items() if s.calls > 0}
    owners: dict[int, list[str]] = {}  # a module's or a weight's id -> the paths that hold it
    modules = list(model.named_modules(remove_duplicate=False))
    for path, module in modules:
        owners.setdefault(id(module), []).append(path)
        for weight in module.parameters(recurse=False):
            owners.setdefault(id(weight), []).append(path)
    notes, seen = [], set()
    for path, module in modules:
        if path in ran_paths or path in seen or not path:
            continue
        keys = [id(module), *(id(w) for w in module.parameters(recurse=False))]
        ran = list(dict.fromkeys(o for k in keys for o in owners[k] if o in ran_paths))
        if not ran:
            continue
        seen.add(path)
        notes.append(
            Note(
                "shared-module",
                f"{path} did not run itself: its module or weights ran as {', '.join(ran)}"
                " (shared or tied), whose rows hold the calls and times",
                {"path": path, "ran_as": tuple(ran)},
            )
        )
    return tuple(notes)


def _prompt(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:  # a 2-d token tensor
    import torch

    ids = kwargs.get("input_ids")  # the Recorder's order (ForwardPhases.see)
    if ids is None and args:
        ids = args[0]
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2:
        raise UsageError(
            "generate: the prompt is the first input (or input_ids=), a batch x tokens tensor"
            f" of token ids; found {type(ids).__name__}"
        )
    return ids


def _phase_peaks(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], n: int, counter: MemoryCounter
) -> tuple[tuple[str, int], ...]:
    """Allocated memory's peak above the start in the prefill (up to the first token's
    logits) and in the decode steps after it, from the allocator's host-side counters
    (no synchronize), in a generate of its own."""
    base = counter.allocated()
    counter.reset_peak()
    first: list[int] = []

    def at_token() -> None:
        if not first:
            first.append(counter.peak() - base)
            counter.reset_peak()

    guarded(lambda: _generate(model, args, kwargs, n, None, at_token), model)
    decode = counter.peak() - base
    if not first:
        return ()
    out = [(PREFILL, max(first[0], 0))]
    return (*out, (DECODE, max(decode, 0))) if n > 1 else tuple(out)


def _guarded_generate(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    n: int,
    stamps: list[int] | None,
    rec: Recorder | None = None,
) -> Any:
    """``_generate``; a model's own error is one line naming the layer it raised in (as a
    forward's is), not an internal error."""
    return guarded(lambda: _generate(model, args, kwargs, n, stamps), model, rec)


def _pad_token(eos: Any) -> int:
    """A pad token for a model that has none: its end-of-sequence token, the first of
    several (Llama 3 lists two), else 0. Any id will do: greedy and unpadded, the
    generate never pads."""
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return eos if isinstance(eos, int) and not isinstance(eos, bool) and eos >= 0 else 0


def _generate(
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    n: int,
    stamps: list[int] | None,
    at_token: Callable[[], None] | None = None,
) -> Any:
    """Greedy, exactly ``n`` new tokens; ``stamps`` gets the clock at each token's logits,
    ``at_token`` is called there."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Stamp(LogitsProcessor):  # type: ignore[misc]  # untyped base
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            if stamps is not None:
                stamps.append(time.perf_counter_ns())
            if at_token is not None:
                at_token()
            return scores

    options: dict[str, Any] = {
        "max_new_tokens": n, "min_new_tokens": n, "do_sample": False,
        "logits_processor": LogitsProcessorList([Stamp()]), "return_dict_in_generate": True,
    }  # fmt: skip
    config = getattr(model, "generation_config", None)
    if config is not None and getattr(config, "pad_token_id", None) is None:
        options["pad_token_id"] = _pad_token(getattr(config, "eos_token_id", None))
    return model.generate(*args, **{**kwargs, **options})


def _layer_pass(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], n: int, correct: bool,
    clock: Clock | None,
) -> tuple[Profile, list[int]]:  # fmt: skip
    """A few generates under the Recorder, each begun as a generate (its first forward is
    the prefill, a one-token prompt too): the per-iteration record with its generation
    section, and which iterations are the model's forwards."""
    from layerprof.capture.recording.recorder import Recorder

    with Recorder(model, clock=clock) as rec:
        for _ in range(LAYER_GENERATES):
            rec.generate_phases.begin_generate()
            _guarded_generate(model, args, kwargs, n, None, rec)
    # per iteration: the phases read the encoder's own call; per_forward folds it after
    profile = rec.profile_per_iteration(correct=None if correct else False)  # None: fake clock's
    of_model, _ = rec.model_forwards()
    return profile, of_model.tolist()


def _assembled(recorded: Profile) -> Generation:
    """The generation section the Recorder assembled (always one: each generate was begun)."""
    if recorded.generation is None:  # only if a forward raised, which raised here already
        raise RuntimeError("generate: the per-layer pass recorded no whole generate")
    return recorded.generation


def _encoded(phases: tuple[Phase, ...], prompt: int) -> tuple[Phase, ...]:
    """An encoder-decoder's ``encode`` phase with the prompt's tokens (batch x prompt): the
    Recorder does not see them (the encoder's call is not the model's forward)."""
    return tuple(replace(p, tokens_per_forward=prompt) if p.name == ENCODE else p for p in phases)


def _with_work(
    model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], phases: tuple[Phase, ...],
    given: GivenPeak | None,
) -> tuple[tuple[Phase, ...], Peak | None]:  # fmt: skip
    """Each phase's layers with the FLOPs and bytes of one forward of that phase, counted
    (``layerprof.capture.flops``) over a generate of one new token (the prefill alone)
    and one of two (a prefill and one decode step: the decode's work is the difference),
    and the device's peak for the roofline."""
    import torch

    def generates(n: int) -> Callable[[], Any]:
        return lambda: _guarded_generate(model, args, kwargs, n, None)

    one, two = (count_flops(model, generates(n)) for n in (1, 2))
    work = {
        PREFILL: {p: (one.flops[p], info.bytes) for p, info in one.layers.items()},
        DECODE: {
            p: (two.flops[p] - one.flops.get(p, 0),
                info.bytes - (one.layers[p].bytes if p in one.layers else 0))
            for p, info in two.layers.items()
        },
    }  # fmt: skip
    work[ENCODE] = work[PREFILL]  # an encoder's layers run in the first generate only
    out = []
    for phase in phases:
        found = work.get(phase.name, {})
        layers = tuple(
            replace(x, flops=found[x.path][0], bytes=found[x.path][1]) if x.path in found else x
            for x in phase.layers
        )
        out.append(replace(phase, layers=layers))
    peak = device_peak(device_of(model), _dtype_of(model), torch.get_num_threads(), given=given)
    return tuple(out), peak


def _kv_cache(out: Any) -> KvCache | None:
    """Bytes of the key/value cache a generate returned (a transformers Cache with
    per-layer ``keys``/``values``: dynamic or static; an encoder-decoder cache's
    self-attention part, with its cross-attention part apart), or None when it has
    none that can be read."""
    # ``cache`` since transformers 5 (``past_key_values`` warns there), before it the other
    keys = out.keys() if hasattr(out, "keys") else ()
    cache: Any = out["cache"] if "cache" in keys else getattr(out, "past_key_values", None)
    cross = 0
    if hasattr(cache, "self_attention_cache"):  # encoder-decoder (T5, BART, Whisper)
        cross_sizes = _layer_bytes(getattr(cache, "cross_attention_cache", None))
        cross = sum(cross_sizes) if cross_sizes else 0
        cache = cache.self_attention_cache
    sizes = _layer_bytes(cache)
    if sizes is None:
        return None
    positions = int(cache.get_seq_length()) if hasattr(cache, "get_seq_length") else 0
    return KvCache(layers=tuple(sizes), positions=positions, cross_bytes=cross)


def _layer_bytes(cache: Any) -> list[int] | None:
    """Keys plus values bytes of each layer of a transformers Cache, or None."""
    layers = getattr(cache, "layers", None)
    if cache is None or layers is None:
        return None
    sizes = []
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is None or values is None or not hasattr(keys, "nbytes"):
            return None
        sizes.append(int(keys.nbytes) + int(values.nbytes))
    return sizes


def _dtype_of(model: Any) -> str:
    """The model's floating dtype (its first floating parameter's), as it ran."""
    for p in model.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"
