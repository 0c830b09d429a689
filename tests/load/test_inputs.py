"""--input specs: grammar, generated tensors, files, errors."""

from __future__ import annotations

import pickle
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof.errors import DeviceError, InputSpecError, UsageError
from layerprof.load.inputs import (
    DEFAULT_INT_RANGE,
    DTYPES,
    BuiltInputs,
    InputSpec,
    build_inputs,
    describe_value,
    move_inputs,
    parse_input_spec,
)

# A config object, as training scripts save next to tensors: weights_only refuses it.
Cfg = namedtuple("Cfg", "a")
Pair = namedtuple("Pair", "a b")

# ------------------------------------------------------------------ grammar


@pytest.mark.parametrize(
    ("text", "name", "shape", "dtype", "low", "high", "explicit"),
    [
        ("1x3x224x224", None, (1, 3, 224, 224), "float32", None, None, False),
        ("7", None, (7,), "float32", None, None, False),
        ("2x2:float16", None, (2, 2), "float16", None, None, True),
        ("2x2:bf16", None, (2, 2), "bfloat16", None, None, True),
        ("2:double", None, (2,), "float64", None, None, True),
        ("ids=4x128:int64[0,30000)", "ids", (4, 128), "int64", 0, 30000, True),
        ("mask=4x128:int64[0,2)", "mask", (4, 128), "int64", 0, 2, True),
        ("4:int32[-5,5)", None, (4,), "int32", -5, 5, True),
        ("4:int64", None, (4,), "int64", *DEFAULT_INT_RANGE, True),
        ("4:long", None, (4,), "int64", *DEFAULT_INT_RANGE, True),
        ("m=3x3:bool", "m", (3, 3), "bool", None, None, True),
        ("3:float32[-1.5,2e3)", None, (3,), "float32", -1.5, 2000.0, True),
        ("  x = 2x3 : FLOAT16 ", "x", (2, 3), "float16", None, None, True),
        ("8x128:uint8[0,256)", None, (8, 128), "uint8", 0, 256, True),
    ],
)
def test_parse_valid(
    text: str,
    name: str | None,
    shape: tuple[int, ...],
    dtype: str,
    low: float | None,
    high: float | None,
    explicit: bool,
) -> None:
    spec = parse_input_spec(text)
    assert (spec.name, spec.shape, spec.dtype, spec.low, spec.high) == (
        name,
        shape,
        dtype,
        low,
        high,
    )
    assert spec.dtype_explicit is explicit
    assert spec.file is None and spec.text == text
    assert parse_input_spec(spec.canonical) == InputSpec(**{**vars(spec), "text": spec.canonical})


@pytest.mark.parametrize(
    ("text", "name", "file"),
    [
        ("@batch.pt", None, "batch.pt"),
        ("x=@batch.pt", "x", "batch.pt"),
        ("@dir/a=b.pt", None, "dir/a=b.pt"),
        ("@ C:/data/x:1.pt", None, "C:/data/x:1.pt"),
    ],
)
def test_parse_file_specs(text: str, name: str | None, file: str) -> None:
    spec = parse_input_spec(text)
    assert (spec.name, spec.file, spec.shape, spec.dtype) == (name, file, None, "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("3xax4", "'a' is not a dimension"),
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("3x", "empty dimension (two 'x' in a row, or one at an end)"),
        ("3xx4", "empty dimension (two 'x' in a row, or one at an end)"),
        ("1x0", "dimension 0 must be at least 1"),
        ("-1x3", "'-1' is not a dimension"),
        ("1.5x3", "'1.5' is not a dimension"),
        ("٣x3", "'٣' is not a dimension"),
        (":float16", "no shape before the dtype (write e.g. 1x3x224x224)"),
        ("2:foo", "'foo' is not a dtype (one of float32, float16, bfloat16, float64, "),
        ("2:", "'' is not a dtype"),
        ("2:int64[0,10]", "ranges are half-open: write [low,high)"),
        ("2:int64[0,10", "range must end with ')', as in [0,30000)"),
        ("2:int64[0)", "a range has two ends: [low,high)"),
        ("2:int64[0,1,2)", "a range has two ends: [low,high)"),
        ("2:int64[0,1.5)", "'1.5' is not an integer"),
        ("2:float32[0,nan)", "'nan' is not a number"),
        ("2:float32[0,1e999)", "'1e999' is out of range"),
        ("2:int64[5,5)", "empty range: low 5 must be below high 5"),
        ("2:int8[0,300)", "range [0,300) does not fit int8 [-128,128)"),
        ("2:uint8[-1,3)", "range [-1,3) does not fit uint8 [0,256)"),
        ("2:bool[0,1)", "bool takes no range"),
        ("x y=3", "'x y' is not a valid argument name"),
        ("1x=3", "'1x' is not a valid argument name"),
        ("=3", "'' is not a valid argument name"),
        ("@", "'@' needs a file name, e.g. @inputs.pt"),
        ("x=@ ", "'@' needs a file name, e.g. @inputs.pt"),
    ],
)
def test_parse_errors_name_spec_and_problem(text: str, problem: str) -> None:
    with pytest.raises(InputSpecError) as info:
        parse_input_spec(text)
    assert str(info.value).startswith(f"bad input spec {text!r}: {problem}")
    assert info.value.hint is not None and "1x3x224x224" in info.value.hint


def test_error_message_exact() -> None:
    with pytest.raises(InputSpecError, match=r"^bad input spec '3xax4': 'a' is not a dimension$"):
        parse_input_spec("3xax4")


# --------------------------------------------------------------- properties

INT_BOUNDS = {
    "int64": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31),
    "int16": (-(2**15), 2**15),
    "int8": (-128, 128),
    "uint8": (0, 256),
}
names = st.none() | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
shapes = st.lists(st.integers(1, 10**6), min_size=1, max_size=6).map(tuple)


@st.composite
def valid_specs(draw: st.DrawFn) -> tuple[str, str | None, tuple[int, ...], str]:
    name, shape = draw(names), draw(shapes)
    dtype = draw(st.sampled_from([None, *DTYPES]))
    text = (f"{name}=" if name else "") + "x".join(map(str, shape))
    if dtype is None:
        return text, name, shape, "float32"
    text += f":{dtype}"
    kind = DTYPES[dtype]
    if kind == "int" and draw(st.booleans()):
        floor, ceiling = INT_BOUNDS[dtype]
        low = draw(st.integers(floor, ceiling - 1))
        text += f"[{low},{draw(st.integers(low + 1, ceiling))})"
    elif kind == "float" and draw(st.booleans()):
        low = draw(st.floats(-1e6, 1e6))
        text += f"[{low!r},{low + draw(st.floats(1, 1e6))!r})"
    return text, name, shape, dtype


@given(valid_specs())
@settings(max_examples=300, deadline=None)
def test_valid_specs_round_trip(case: tuple[str, str | None, tuple[int, ...], str]) -> None:
    text, name, shape, dtype = case
    spec = parse_input_spec(text)
    assert (spec.name, spec.shape, spec.dtype) == (name, shape, dtype)
    again = parse_input_spec(spec.canonical)
    assert (again.name, again.shape, again.dtype, again.low, again.high) == (
        spec.name,
        spec.shape,
        spec.dtype,
        spec.low,
        spec.high,
    )


grammar_chars = st.sampled_from(list("0123456789x:=@[](),.-+e_ abfilnotu٣²"))
garbage = st.text(grammar_chars, max_size=30) | st.text(max_size=30)


@given(garbage)
@settings(max_examples=500, deadline=None)
def test_garbage_raises_only_input_spec_error(text: str) -> None:
    try:
        spec = parse_input_spec(text)
    except InputSpecError as exc:
        assert repr(text) in str(exc)
    else:
        assert isinstance(spec, InputSpec)


# ----------------------------------------------------------------- building


def test_build_shapes_dtypes_and_descriptions() -> None:
    built = build_inputs(
        [
            "2x3",
            "ids=2x5:int64[0,30000)",
            "mask=2x5:bool",
            "4:int32[-3,3)",
            "h=2:float16",
            "u=1000:float64[2,3)",
        ]
    )
    assert isinstance(built, BuiltInputs)
    x, small = built.args
    assert (x.shape, x.dtype) == (torch.Size([2, 3]), torch.float32)
    assert small.dtype == torch.int32 and small.min() >= -3 and small.max() < 3
    ids, mask = built.kwargs["ids"], built.kwargs["mask"]
    assert ids.dtype == torch.int64 and ids.min() >= 0 and ids.max() < 30000
    assert mask.dtype == torch.bool and mask.shape == (2, 5)
    assert built.kwargs["h"].dtype == torch.float16
    u = built.kwargs["u"]
    assert u.dtype == torch.float64 and u.min() >= 2 and u.max() < 3
    assert built.descriptions == (
        "args[0]: float32[2, 3]",
        "ids: int64[2, 5]",
        "mask: bool[2, 5]",
        "args[1]: int32[4]",
        "h: float16[2]",
        "u: float64[1000]",
    )


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8", "uint8"])
def test_widest_int_ranges_build(dtype: str) -> None:
    low, high = INT_BOUNDS[dtype]
    (t,) = build_inputs([f"1000:{dtype}[{low},{high})"]).args
    values = t.tolist()  # Python ints: comparing int32 tensors with 2**31 would overflow
    assert t.dtype == getattr(torch, dtype) and min(values) >= low and max(values) < high


def test_int64_top_value_is_refused() -> None:
    with pytest.raises(InputSpecError, match="does not fit int64"):
        parse_input_spec(f"2:int64[0,{2**63})")


def test_default_int_range() -> None:
    (t,) = build_inputs(["10000:int64"]).args
    assert set(t.unique().tolist()) == set(range(*DEFAULT_INT_RANGE))


def test_deterministic_per_seed() -> None:
    specs = ["3x4", "k=8:int64[0,100)", "b=16:bool"]
    a, b = build_inputs(specs, seed=3), build_inputs(specs, seed=3)
    c = build_inputs(specs, seed=4)
    assert torch.equal(a.args[0], b.args[0]) and torch.equal(a.kwargs["k"], b.kwargs["k"])
    assert not torch.equal(a.args[0], c.args[0])


def test_same_numbers_across_float_dtypes() -> None:
    # Drawn in float32 then cast: --dtype changes precision, not the data.
    (x32,) = build_inputs(["64:float32"]).args
    (x16,) = build_inputs(["64:float16"]).args
    assert torch.equal(x32.to(torch.float16), x16)


def test_float_dtype_casts_only_unstated_dtypes() -> None:
    built = build_inputs(["2x2", "keep=2:float32", "ids=2:int64[0,5)"], float_dtype="bfloat16")
    assert built.args[0].dtype == torch.bfloat16
    assert built.kwargs["keep"].dtype == torch.float32
    assert built.kwargs["ids"].dtype == torch.int64
    assert built.descriptions[0] == "args[0]: bfloat16[2, 2]"


def test_float_dtype_must_be_floating() -> None:
    with pytest.raises(UsageError, match=r"^--dtype int64 is not a floating dtype"):
        build_inputs(["2"], float_dtype="int64")


def test_accepts_parsed_specs() -> None:
    spec = parse_input_spec("x=3")
    assert build_inputs([spec]).kwargs["x"].shape == (3,)


def test_keyword_given_twice() -> None:
    with pytest.raises(InputSpecError, match=r"^bad input spec 'x=4': keyword argument 'x' is"):
        build_inputs(["x=3", "x=4"])


def test_bad_spec_raises_from_build() -> None:
    with pytest.raises(InputSpecError, match="'q' is not a dimension"):
        build_inputs(["2xq"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_unavailable_device() -> None:
    with pytest.raises(DeviceError, match=r"^cannot put inputs on device 'cuda'"):
        build_inputs(["2"], device="cuda")


def test_meta_device() -> None:
    (x,) = build_inputs(["2x3"], device="meta").args
    assert x.device.type == "meta" and x.shape == (2, 3)


# -------------------------------------------------------------------- files


def test_file_tensor(tmp_path: Path) -> None:
    saved = torch.arange(6.0).reshape(2, 3)
    torch.save(saved, tmp_path / "x.pt")
    built = build_inputs([f"@{tmp_path / 'x.pt'}"])
    assert torch.equal(built.args[0], saved)
    assert built.descriptions == (f"args[0]: float32[2, 3] (from {tmp_path / 'x.pt'})",)


def test_file_tuple_becomes_positional(tmp_path: Path) -> None:
    path = tmp_path / "pair.pt"
    torch.save((torch.zeros(2), torch.ones(3, dtype=torch.int64)), path)
    built = build_inputs(["1x1", f"@{path}"])
    assert len(built.args) == 3 and built.kwargs == {}
    assert built.descriptions[1:] == (
        f"args[1]: float32[2] (from {path})",
        f"args[2]: int64[3] (from {path})",
    )


def test_file_list_becomes_positional(tmp_path: Path) -> None:
    path = tmp_path / "list.pt"
    torch.save([torch.zeros(1), torch.zeros(2)], path)
    assert len(build_inputs([f"@{path}"]).args) == 2


def test_file_dict_becomes_kwargs(tmp_path: Path) -> None:
    path = tmp_path / "batch.pt"
    torch.save({"input_ids": torch.zeros(2, 4, dtype=torch.int64), "mask": torch.ones(2, 4)}, path)
    built = build_inputs([f"@{path}"])
    assert built.args == () and set(built.kwargs) == {"input_ids", "mask"}
    assert built.descriptions == (
        f"input_ids: int64[2, 4] (from {path})",
        f"mask: float32[2, 4] (from {path})",
    )


def test_named_file_keeps_whole_value(tmp_path: Path) -> None:
    path = tmp_path / "batch.pt"
    torch.save({"a": torch.zeros(1)}, path)
    built = build_inputs([f"batch=@{path}"])
    assert list(built.kwargs) == ["batch"] and isinstance(built.kwargs["batch"], dict)
    assert built.descriptions == (f"batch: {{a: float32[1]}} (from {path})",)


def test_file_floats_follow_float_dtype(tmp_path: Path) -> None:
    path = tmp_path / "mixed.pt"
    torch.save({"x": torch.zeros(2), "ids": torch.zeros(2, dtype=torch.int64)}, path)
    built = build_inputs([f"@{path}"], float_dtype="float16")
    assert built.kwargs["x"].dtype == torch.float16
    assert built.kwargs["ids"].dtype == torch.int64


def test_file_dict_with_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.pt"
    torch.save({0: torch.zeros(1)}, path)
    with pytest.raises(InputSpecError, match=r"dict key 0 cannot be a keyword argument"):
        build_inputs([f"@{path}"])


def test_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "nope.pt"
    with pytest.raises(InputSpecError) as info:
        build_inputs([f"x=@{path}"])
    assert str(info.value) == f"bad input spec 'x=@{path}': no such file {path}"


def test_file_is_directory(tmp_path: Path) -> None:
    with pytest.raises(InputSpecError, match="is a directory, not a file"):
        build_inputs([f"@{tmp_path}"])


def test_file_not_torch(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("1 2 3\n")
    with pytest.raises(InputSpecError) as info:
        build_inputs([f"@{path}"])
    assert str(info.value) == f"bad input spec '@{path}': {path} is not a torch.save file"


def test_file_with_objects_refused(tmp_path: Path) -> None:
    path = tmp_path / "obj.pt"
    torch.save({"x": torch.zeros(1), "cfg": Cfg(1)}, path)
    with pytest.raises(InputSpecError) as info:
        build_inputs([f"@{path}"])
    assert f"{path} was refused (it contains {Cfg.__module__}.Cfg)" in str(info.value)
    assert "only tensors, numbers, tuples, lists and dicts load" in str(info.value)


def test_file_pickle_payload_not_executed(tmp_path: Path) -> None:
    import os

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(InputSpecError):
        build_inputs([f"@{path}"])
    assert not marker.exists()


# ------------------------------------------------------------------ helpers


def test_describe_value() -> None:
    assert describe_value(torch.zeros(1, 3, 224, 224)) == "float32[1, 3, 224, 224]"
    assert describe_value(torch.tensor(2.0)) == "float32[]"
    assert describe_value((torch.zeros(2), torch.zeros(1, dtype=torch.bool))) == (
        "(float32[2], bool[1])"
    )
    assert describe_value([1, 2.5, None]) == "[1, 2.5, None]"
    assert describe_value({"a": torch.zeros(1)}) == "{a: float32[1]}"
    assert describe_value(list(range(10)), limit=3) == "[0, 1, 2, ... (7 more)]"
    assert describe_value("x" * 50) == "str '" + "x" * 39 + "..."


def test_move_inputs_nested_keeps_containers() -> None:
    obj = {"p": Pair(torch.zeros(1), [torch.ones(1, dtype=torch.int64), 3]), "s": "keep"}
    moved = move_inputs(obj, "meta", float_dtype=torch.float16)
    assert isinstance(moved["p"], Pair)
    assert moved["p"].a.device.type == "meta" and moved["p"].a.dtype == torch.float16
    assert moved["p"].b[0].dtype == torch.int64 and moved["p"].b[1] == 3
    assert moved["s"] == "keep"
