"""Check that a model's cad program stays inside the documented Python subset.

Allowed: assignments (plain and augmented) to plain names, ``for`` loops over
``range(...)``, expressions made of numbers, names, arithmetic (``+ - * / // % **``),
``&``, unary ``-``/``+``, tuples/lists, calls of the language's functions
(``dsl.NAMES``) and of the methods ``translate``/``rotate``/``scale``, and ``pass``.
Names starting with ``_`` are refused, and so is reading a name that is neither the
language's nor assigned by the program (``chr``, ``exec``, ``print``, ``emit``, ``np``
of the prelude's scope) and rebinding a language name (``box = chr`` then ``box(..)``
called any builtin, so ``chr``/``exec`` ran arbitrary code and printed any mesh). The sandbox is the real isolation; this
check keeps programs to the language the prompt documents.
"""

from __future__ import annotations

import ast

METHODS = frozenset({"translate", "rotate", "scale"})
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd)
MAX_PROGRAM_BYTES = 20_000


def check_program(source: str, allowed_names: frozenset[str]) -> str | None:
    """None when ``source`` is in the subset, else the first reason it is not.

    Args:
        source: the program text.
        allowed_names: the language's predefined names (``dsl.NAMES``).
    """
    if len(source.encode()) > MAX_PROGRAM_BYTES:
        return f"program longer than {MAX_PROGRAM_BYTES} bytes"
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return f"syntax error line {e.lineno}: {e.msg}"
    assigned = False
    own = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AugAssign | ast.For)
           for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
           if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) \
                and node.id in allowed_names:
            return f"line {node.lineno}: {node.id!r} is a language name and cannot be reassigned"
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                and node.id not in allowed_names and node.id not in own:
            return f"line {node.lineno}: unknown name {node.id!r}"
        reason = _check_node(node, allowed_names)
        if reason:
            return f"line {getattr(node, 'lineno', '?')}: {reason}"
        if isinstance(node, ast.Name) and node.id == "result" and isinstance(node.ctx, ast.Store):
            assigned = True
    return None if assigned else "the program never assigns `result`"


def _check_node(node: ast.AST, allowed: frozenset[str]) -> str | None:
    ok_types = (
        ast.Module, ast.Assign, ast.AugAssign, ast.For, ast.Expr, ast.Pass, ast.Constant,
        ast.Name, ast.BinOp, ast.UnaryOp, ast.Call, ast.Attribute, ast.Tuple, ast.List,
        ast.keyword, ast.Load, ast.Store, ast.USub, ast.UAdd, *_BINOPS,
    )
    if not isinstance(node, ok_types):
        return f"{type(node).__name__} is not part of the modelling language"
    if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
        return "only numeric constants are allowed"
    if isinstance(node, ast.Name) and node.id.startswith("_"):
        return f"name {node.id!r} starts with '_'"
    if isinstance(node, ast.Attribute) and node.attr not in METHODS:
        return f"attribute .{node.attr} is not allowed (only {sorted(METHODS)})"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id not in allowed:
            return f"unknown function {func.id}()"
        if not isinstance(func, ast.Name | ast.Attribute):
            return "only named functions and methods can be called"
    if isinstance(node, ast.For):
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id == "range" and isinstance(node.target, ast.Name)):
            return "for-loops must be `for name in range(...)`"
        if node.orelse:
            return "for-else is not allowed"
    if isinstance(node, ast.Assign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return "assign to plain names only"
    return None
