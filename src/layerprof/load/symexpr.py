"""What a ``torch.export`` archive may say where torch evaluates its text as Python.

``torch.export.load`` turns every symbolic-shape expression of the archive
(``{"as_expr": {"expr_str": ...}}``) into a sympy object with ``sympy.sympify``,
which ``eval``\\ s the string; ``ExportedProgram.module()`` pastes the archive's
``guards_code`` strings into a function and ``exec``\\ s it. A crafted archive
can put any Python there (``__import__('os').system(...)``), so each string is
checked against the grammar torch itself writes before torch sees the file:

* expressions: ``sympy.srepr`` output as torch >= 2.5 writes it
  (``Add(FloorDiv(Symbol('s77', positive=True, integer=True), Integer(2)), Integer(1))``)
  and the plain form older versions wrote (``s0 + 1``, ``2*s0``, ``FloorDiv(s0, 2)``):
  symbols, numbers, arithmetic and comparison operators, and calls of the sympy
  classes and ``torch.utils._sympy.functions`` the deserializer knows by name;
* guards: comparisons of input sizes as torch's ``ShapeGuardPythonPrinter``
  prints them (``1 + (L['x'].size()[0] // 2) <= L['y'].size()[0]``): ``L[...]``
  sources with ``.size()`` / ``.stride()`` / ``.storage_offset()``, arithmetic,
  ``math.floor`` and friends, ``max``/``min``/``abs``.

Arithmetic is bounded too, since sympy evaluates constant powers when it reads
an expression and a guard raises real sizes to its powers: an exponent or a shift
is a number written out (``Integer(2)``, ``-1``, ``Rational(1, 2)``), at most
:data:`MAX_EXPONENT` in size, the exponents nested along one path multiply to at
most :data:`MAX_EXPONENT`, and an integer constant is below ``2**64``
(``Pow(Integer(7), Integer(300000000))`` or ``s ** s ** 99999999`` would run until
killed; torch writes squares, inverses and square roots).

Both are parsed with :func:`ast.parse`, which runs nothing, and walked with an
allow-list: no attribute but the listed ones, no call but the listed names, no
string but a symbol name or an input key. :func:`check_text` is the rule for
text torch pastes inside a quoted literal (parameter paths, constant inputs).
Pure Python; torch is not imported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence

__all__ = ["UnsafeExpression", "check_guard", "check_sym_expr", "check_text"]

MAX_CHARS = 65_536
MAX_DEPTH = 200
#: Largest exponent or shift, and largest product of the exponents nested in one path.
MAX_EXPONENT = 64
#: Integer constants are below this in size (torch's sizes and bounds are int64).
_MAX_INTEGER = 2**64

#: Called names an expression may use: sympy classes ``srepr`` prints, and the
#: functions ``torch._export.serde.serialize`` puts in ``sympify``'s namespace.
_EXPR_CALLS = frozenset(
    {
        "Symbol", "Dummy", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min",
        "Abs", "Mod", "floor", "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality",
        "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan", "And",
        "Or", "Not", "Xor", "Piecewise", "ExprCondPair", "Half", "One", "Zero", "NegativeOne",
        "Infinity", "NegativeInfinity", "NaN", "BooleanTrue", "BooleanFalse", "IntInfinity",
        "NegativeIntInfinity",
        # torch.utils._sympy.functions, as the deserializer names them
        "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt",
        "FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow",
        "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat",
        "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
    }
)  # fmt: skip
#: Bare names an expression may use besides symbols.
_EXPR_CONSTANTS = frozenset({"oo", "zoo", "nan", "true", "false", "int_oo"})
#: Functions guard code may call by bare name (Python builtins and torch's SYMPY_INTERP).
_GUARD_CALLS = frozenset(
    {"abs", "max", "min", "int", "float", "round", "bool", "IsNonOverlappingAndDenseIndicator",
     "cast_symbool_to_symint_guardless"}
)  # fmt: skip
_GUARD_MODULE_ATTRS = {
    "math": frozenset(
        {"floor", "ceil", "trunc", "sqrt", "inf", "nan", "isnan", "isinf", "isfinite", "cos",
         "cosh", "acos", "sin", "sinh", "asin", "tan", "tanh", "atan", "log", "log2", "log10",
         "exp", "pow", "fabs"}
    ),
    "torch": frozenset(
        {"sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt",
         "_sym_sqrt", "sym_sum"}
    ),
}  # fmt: skip
#: Tensor methods a guard source may call (``L['x'].size()[0]``).
_GUARD_METHODS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})

# Symbols torch names by kind: s0, u3, zf1, zuf0, ps2, r0_1, indirect0, ...
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_BARE_SYMBOL = re.compile(r"[a-z][a-z0-9_]{0,99}[0-9]")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INPUT_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
# No quotes but ', no backslash, no '#', no newline: nothing can leave the expression.
_EXPR_CHARS = re.compile(r"[A-Za-z0-9_ .,()'+\-*/%<>=!&|~^]*")
_GUARD_CHARS = re.compile(r"[A-Za-z0-9_ .,()\[\]'+\-*/%<>=!&|~^]*")

_ARITH = (
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
    ast.BitXor, ast.LShift, ast.RShift,
)  # fmt: skip
_UNARY = (ast.USub, ast.UAdd, ast.Not, ast.Invert)
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


class UnsafeExpression(ValueError):
    """The string is not in the grammar torch writes; the message says what is not."""


def check_sym_expr(text: str) -> None:
    """Raise :class:`UnsafeExpression` unless ``text`` is a symbolic-shape expression."""
    root = _parse(text, _EXPR_CHARS)
    _walk(root, _expr_children)
    _check_powers(root)


def check_guard(text: str) -> None:
    """Raise :class:`UnsafeExpression` unless ``text`` is a shape guard as torch prints it."""
    root = _parse(text, _GUARD_CHARS)
    _walk(root, _guard_children)
    _check_powers(root)


def check_text(text: object) -> None:
    """Raise :class:`UnsafeExpression` unless ``text`` can sit inside a quoted Python
    string literal without ending it: no quote, backslash or control character."""
    if not isinstance(text, str):
        raise UnsafeExpression(f"a {type(text).__name__}, not a string")
    if len(text) > MAX_CHARS:
        raise UnsafeExpression(f"{len(text)} characters, more than {MAX_CHARS}")
    bad = next((c for c in text if c in "'\"\\" or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise UnsafeExpression(f"character {bad!r} is not allowed")


# ------------------------------------------------------------------ parsing


def _parse(text: str, chars: re.Pattern[str]) -> ast.expr:
    if not isinstance(text, str):
        raise UnsafeExpression(f"a {type(text).__name__}, not a string")
    if len(text) > MAX_CHARS:
        raise UnsafeExpression(f"{len(text)} characters, more than {MAX_CHARS}")
    if not chars.fullmatch(text):
        bad = next(c for c in text if not chars.fullmatch(c))
        raise UnsafeExpression(f"character {bad!r} is not allowed")
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeExpression(f"does not parse ({type(exc).__name__})") from None


def _walk(root: ast.expr, children: Callable[[ast.expr], Sequence[ast.expr]]) -> None:
    """Check every node from ``root`` down; ``children`` checks one node and returns
    the sub-expressions still to check (what it validated whole is not returned)."""
    stack: list[tuple[ast.expr, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsafeExpression(f"nested deeper than {MAX_DEPTH}")
        stack.extend((child, depth + 1) for child in children(node))


def _operator_children(node: ast.expr) -> Sequence[ast.expr] | None:
    """Operators both grammars share: their operands, or None for other nodes."""
    if isinstance(node, ast.BinOp):
        _allowed_op(node.op, _ARITH)
        return (node.left, node.right)
    if isinstance(node, ast.UnaryOp):
        _allowed_op(node.op, _UNARY)
        return (node.operand,)
    if isinstance(node, ast.Compare):
        for op in node.ops:
            _allowed_op(op, _COMPARE)
        return (node.left, *node.comparators)
    if isinstance(node, ast.BoolOp):
        return node.values
    if isinstance(node, ast.Constant):
        _check_number(node)
        return ()
    return None


def _allowed_op(op: ast.AST, allowed: tuple[type[ast.AST], ...]) -> None:
    if not isinstance(op, allowed):
        raise UnsafeExpression(f"operator {type(op).__name__} is not allowed")


def _check_number(node: ast.Constant) -> None:
    if not isinstance(node.value, (bool, int, float)):
        raise UnsafeExpression(f"constant {node.value!r} is not allowed here")
    if isinstance(node.value, int) and abs(node.value) >= _MAX_INTEGER:
        raise UnsafeExpression(f"integer {_short(node.value)} is not below 2**64")


def _short(value: int) -> str:
    digits = str(value)  # below Python's 4300-digit limit: longer literals do not parse
    return digits if len(digits) <= 24 else f"{digits[:10]}...({len(digits)} digits)"


# ------------------------------------------------------------------ powers

# Calls and operators that raise their first operand to (or shift it by) the second.
_POWER_CALLS = frozenset({"Pow", "PowByNatural", "FloatPow", "LShift", "RShift"})
_POWER_OPS = (ast.Pow, ast.LShift, ast.RShift)
_ONE_ARG_NUMBERS = frozenset({"Integer", "Float"})
_NAMED_NUMBERS = {"Half": 0.5, "One": 1, "Zero": 0, "NegativeOne": -1}


def _check_powers(root: ast.expr) -> None:
    """Every exponent and shift is a small number written out, and the exponents
    nested along one path multiply to at most ``MAX_EXPONENT``: sympy evaluates a
    power of constants as it reads it, and a guard evaluates one on real sizes."""
    stack: list[tuple[ast.AST, float]] = [(root, 1.0)]
    while stack:
        node, scale = stack.pop()
        operands = _power_operands(node)
        if operands is None:
            stack.extend((child, scale) for child in ast.iter_child_nodes(node))
            continue
        base, exponent = operands
        size = max(abs(_exponent_value(exponent)), 1.0)
        if scale * size > MAX_EXPONENT:
            raise UnsafeExpression(
                f"exponents nested to {scale * size:g}, more than {MAX_EXPONENT}"
            )
        stack.append((base, scale * size))


def _power_operands(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, _POWER_OPS):
        return node.left, node.right
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name) and func.id in _POWER_CALLS:
        if len(node.args) != 2 or node.keywords:
            raise UnsafeExpression(f"{func.id}() takes two arguments here")
        return node.args[0], node.args[1]
    if isinstance(func, ast.Attribute) and func.attr == "pow" and len(node.args) == 2:
        return node.args[0], node.args[1]  # math.pow
    return None


def _exponent_value(node: ast.expr) -> float:
    """The value of an exponent written as a number, or an error naming what it is."""
    value = _literal(node)
    if value is None:
        raise UnsafeExpression(f"exponent {_clip(ast.unparse(node))} is not a number")
    if abs(value) > MAX_EXPONENT:
        raise UnsafeExpression(f"exponent {_clip(ast.unparse(node))} is above {MAX_EXPONENT}")
    return value


def _literal(node: ast.expr) -> float | None:
    """``2``, ``-1``, ``2.0``, ``Integer(2)``, ``Float('0.5')``, ``Rational(1, 2)``, ``Half``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        try:
            return float(node.value)
        except (ValueError, OverflowError):
            return None
    if isinstance(node, ast.Name):
        return _NAMED_NUMBERS.get(node.id)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        values = [_literal(arg) for arg in node.args]
        if None in values or node.keywords:
            return None
        if node.func.id in _ONE_ARG_NUMBERS and len(values) == 1:
            return values[0]
        if node.func.id == "Rational" and len(values) == 2 and values[1]:
            return values[0] / values[1]  # type: ignore[operator]
    return None


def _clip(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


# -------------------------------------------------------------- expressions


def _expr_children(node: ast.expr) -> Sequence[ast.expr]:
    operands = _operator_children(node)
    if operands is not None:
        return operands
    if isinstance(node, ast.Name):
        known = node.id in _EXPR_CALLS or node.id in _EXPR_CONSTANTS
        if not known and not _BARE_SYMBOL.fullmatch(node.id):
            raise UnsafeExpression(f"name {node.id!r} is not a symbol")
        return ()
    if isinstance(node, ast.Call):
        return _expr_call_args(node)
    raise UnsafeExpression(f"{type(node).__name__} is not allowed")


def _expr_call_args(node: ast.Call) -> Sequence[ast.expr]:
    func = node.func
    if not isinstance(func, ast.Name) or func.id not in _EXPR_CALLS:
        raise UnsafeExpression(f"call of {ast.unparse(func)!r} is not allowed")
    for kw in node.keywords:
        if kw.arg is None or kw.arg.startswith("_"):
            raise UnsafeExpression(f"{func.id}(**...) is not allowed")
        if not isinstance(kw.value, ast.Constant) or not isinstance(kw.value.value, (bool, int)):
            raise UnsafeExpression(f"{func.id}({kw.arg}=...) must be a number or a boolean")
    first = node.args[0] if node.args else None
    if func.id in ("Symbol", "Dummy"):
        _check_text(func.id, first, _SYMBOL, "a symbol name")
        return node.args[1:]
    if func.id == "Float" and isinstance(first, ast.Constant) and isinstance(first.value, str):
        _check_text(func.id, first, _NUMBER_TEXT, "a number")
        return node.args[1:]
    return node.args


def _check_text(func: str, arg: ast.expr | None, pattern: re.Pattern[str], what: str) -> None:
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        raise UnsafeExpression(f"{func}() needs {what} as its first argument")
    if not pattern.fullmatch(arg.value):
        raise UnsafeExpression(f"{func}({arg.value!r}): not {what}")


# ------------------------------------------------------------------- guards


def _guard_children(node: ast.expr) -> Sequence[ast.expr]:
    operands = _operator_children(node)
    if operands is not None:
        return operands
    if isinstance(node, ast.Name):
        if node.id != "inf":
            raise UnsafeExpression(f"name {node.id!r} is not allowed")
        return ()
    if isinstance(node, ast.Call):
        return _guard_call_args(node)
    if isinstance(node, (ast.Subscript, ast.Attribute)):
        _check_source(node)
        return ()
    raise UnsafeExpression(f"{type(node).__name__} is not allowed")


def _guard_call_args(node: ast.Call) -> Sequence[ast.expr]:
    if node.keywords:
        raise UnsafeExpression("keyword arguments are not allowed")
    func = node.func
    if isinstance(func, ast.Name) and func.id in _GUARD_CALLS:
        return node.args
    if isinstance(func, ast.Attribute) and _is_module_attr(func):
        return node.args
    if isinstance(func, ast.Attribute) and func.attr in _GUARD_METHODS:
        if node.args:
            raise UnsafeExpression(f".{func.attr}() takes no arguments here")
        _check_source(func.value)
        return ()
    raise UnsafeExpression(f"call of {ast.unparse(func)!r} is not allowed")


def _is_module_attr(node: ast.Attribute) -> bool:
    """``math.floor``-style names: True when allowed, an error when not, False for others."""
    base = node.value
    if not (isinstance(base, ast.Name) and base.id in _GUARD_MODULE_ATTRS):
        return False
    if node.attr not in _GUARD_MODULE_ATTRS[base.id]:
        raise UnsafeExpression(f"{base.id}.{node.attr} is not allowed")
    return True


def _check_source(node: ast.expr) -> None:
    """``L['x']``, ``L['x'].size()[0]``, ``L['args'][0]['k']``, ``math.inf``: an input
    of the program (or one of its sizes), or an allowed module constant."""
    while True:
        if isinstance(node, ast.Name) and node.id == "L":
            return
        if isinstance(node, ast.Subscript):
            _check_key(node.slice)
            node = node.value
        elif isinstance(node, ast.Attribute):
            if _is_module_attr(node):
                return
            if node.attr.startswith("_"):
                raise UnsafeExpression(f"attribute {node.attr!r} is not allowed")
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in _GUARD_METHODS or node.args or node.keywords:
                raise UnsafeExpression(f"call of {ast.unparse(node.func)!r} is not allowed")
            node = node.func.value
        else:
            raise UnsafeExpression(f"{ast.unparse(node)!r} is not an input of the program")


def _check_key(key: ast.expr) -> None:
    if not isinstance(key, ast.Constant) or isinstance(key.value, bool):
        raise UnsafeExpression("an index must be an integer or a name")
    if isinstance(key.value, str):
        if not _INPUT_KEY.fullmatch(key.value):
            raise UnsafeExpression(f"input key {key.value!r} is not a name")
    elif not isinstance(key.value, int):
        raise UnsafeExpression(f"index {key.value!r} is not allowed")
