"""Every condition reason, status reason and phase the function can write, found by
reading its source with ``ast`` (issue 16: the README's troubleshooting table must list
them all).

Sinks (where a value is written):

- the third argument of ``<outcome>.condition(type, status, reason, message)``;
- ``set_phase(phase, reason, message)`` calls;
- writes of a ``phase`` or ``reason`` field: ``x["phase"] = v``, ``x.phase = v``, a dict
  literal's ``"phase": v``, and ``phase=v`` / ``reason=v`` keyword arguments of calls that
  are not events (``warning``, ``normal``, ``fatal``, ``transition``, ``changed`` take event
  reasons, which are not written to status).

Each written expression is resolved to string values: a literal; a module constant (also
through ``from function... import NAME`` and tuple assignments); a local variable (every
assignment to it in the function, tuple unpacking of a tuple or of a module function's
``return`` tuples); a parameter (the argument at every call site of that function in the
module, and its default); ``a if c else b``, ``a or b`` and ``str(a)``; ``x.get(k, default)``
(the default); and a field read (``x.reason``, ``x["reason"]``: every write of that field,
by the sinks above, in any module). What cannot be resolved is reported as *opaque*
with its file, line and source text, so a test can require each one to be explained.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "function"
WORD = re.compile(r"^[A-Z][A-Za-z0-9]*$")  # CamelCase, as Kubernetes reasons and phases are
# Calls whose reason= is an event's or a metric label's, not written to status.
EVENT_CALLS = frozenset(
    {"warning", "normal", "fatal", "transition", "changed", "observe", "_observe"}
)
# Modules that write no status (the metric catalogue names its label vocabularies).
# (function.core.outcome is the plumbing of condition() itself: its call sites are the sinks.)
NOT_STATUS = frozenset({"function.ops.metrics", "function.core.outcome"})
TYPES = frozenset({"str", "bool", "int", "float", "dict", "list"})
FIELDS = ("phase", "reason")


@dataclass
class Found:
    """Values by kind of sink (``reason`` or ``phase``), and what could not be resolved."""

    values: dict[str, set[str]] = field(default_factory=lambda: {"reason": set(), "phase": set()})
    opaque: set[tuple[str, str]] = field(default_factory=set)  # (file, source)


class _Module:
    def __init__(self, path: Path, package: Path) -> None:
        self.path = path
        self.name = "function." + ".".join(path.relative_to(package).with_suffix("").parts)
        self.name = self.name.removesuffix(".__init__")
        self.tree = ast.parse(path.read_text())
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.consts: dict[str, ast.expr] = {}
        self.imports: dict[str, tuple[str, str]] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._bind(node.target, node.value)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module, alias.name)
        self.functions: dict[str, list[ast.FunctionDef]] = {}
        # Classes with annotated fields (dataclasses, NamedTuples): name -> field names.
        self.records: dict[str, list[str]] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef):
                self.functions.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.ClassDef):
                fields = [
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign)
                    and isinstance(s.target, ast.Name)
                    and "ClassVar" not in ast.unparse(s.annotation)
                ]
                if fields:
                    self.records[node.name] = fields

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.consts[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts, strict=False):
                self._bind(t, v)

    def enclosing(self, node: ast.AST) -> ast.FunctionDef | None:
        p = self.parent.get(node)
        while p is not None and not isinstance(p, ast.FunctionDef):
            p = self.parent.get(p)
        return p


class Inventory:
    """Resolve the sinks of every module under ``function/``."""

    def __init__(self, package: Path = PACKAGE) -> None:
        paths = sorted(package.rglob("*.py"))
        self.modules = {m.name: m for m in (_Module(p, package) for p in paths)}
        self.found = Found()
        self._field_cache: dict[str, set[str] | None] = {}
        self._stack: set[int] = set()

    # ---- sinks ------------------------------------------------------------------------

    def sinks(self, mod: _Module) -> Iterator[tuple[str, ast.expr, int | None]]:
        """(kind, written expression, tuple index or None) for every sink in ``mod``."""
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call):
                fname = _callee(node)
                fields = self.record(mod, fname)
                if fields:  # a record built with a phase or reason field
                    for i, arg in enumerate(node.args):
                        if i < len(fields) and fields[i] in FIELDS:
                            yield fields[i], arg, None
                if fname == "condition" and len(node.args) >= 3:
                    yield "reason", node.args[2], None
                elif fname == "set_phase" and len(node.args) >= 2:
                    yield "phase", node.args[0], None
                    yield "reason", node.args[1], None
                elif fname not in EVENT_CALLS:
                    for kw in node.keywords:
                        if kw.arg in FIELDS:
                            yield kw.arg, kw.value, None
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    name = _field_of(target)
                    if name in FIELDS:
                        yield name, node.value, None
                    elif isinstance(target, ast.Tuple):  # a.reason, a.message = pair
                        for i, elt in enumerate(target.elts):
                            name = _field_of(elt)
                            if name in FIELDS:
                                yield name, node.value, i
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value in FIELDS:
                        yield k.value, v, None

    def run(self) -> Found:
        for mod in self.modules.values():
            if mod.name in NOT_STATUS:
                continue
            for kind, expr, index in self.sinks(mod):
                if index is None:
                    values = self.resolve(mod, expr)
                else:
                    values = self.element(mod, expr, index, expr)
                if values is None:
                    self.found.opaque.add((mod.path.name, ast.unparse(expr)))
                else:
                    self.found.values[kind] |= {v for v in values if WORD.match(v)}
        return self.found

    # ---- resolution -------------------------------------------------------------------

    def resolve(self, mod: _Module, expr: ast.expr) -> set[str] | None:
        """The string values ``expr`` can have, or None when that cannot be traced."""
        key = id(expr)  # nodes live as long as their module's tree: ids are stable
        if key in self._stack:
            return set()  # a cycle adds nothing new
        self._stack.add(key)
        try:
            return self._resolve(mod, expr)
        finally:
            self._stack.discard(key)

    def _resolve(self, mod: _Module, expr: ast.expr) -> set[str] | None:
        if isinstance(expr, ast.Constant):
            return {expr.value} if isinstance(expr.value, str) else set()
        if isinstance(expr, ast.JoinedStr):
            return set()  # a sentence, not a reason (a message, such as a Usage's reason)
        if isinstance(expr, ast.IfExp):
            return _union(self.resolve(mod, expr.body), self.resolve(mod, expr.orelse))
        if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            return _union(*(self.resolve(mod, v) for v in expr.values))
        if isinstance(expr, ast.Call):
            fname = _callee(expr)
            if fname == "str" and len(expr.args) == 1:
                return self.resolve(mod, expr.args[0])
            if fname == "get" and expr.args and isinstance(expr.func, ast.Attribute):
                key = expr.args[0]
                if isinstance(key, ast.Constant) and key.value in FIELDS:
                    default = [self.resolve(mod, a) for a in expr.args[1:2]]
                    return _union(self.field(key.value), *default)
                return None
            if fname in ("get_str", "sval") and expr.args:
                last = expr.args[-1]
                if isinstance(last, ast.Constant) and last.value in FIELDS:
                    return self.field(last.value)  # read back from status
            return None
        if isinstance(expr, ast.Attribute) and expr.attr in FIELDS:
            return self.field(expr.attr)
        if isinstance(expr, ast.Attribute) and expr.attr == "string_value":
            return self.resolve(mod, expr.value)  # x["reason"].string_value: a field read
        if (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"
        ):
            return self.instance_attribute(mod, expr.attr)
        if isinstance(expr, ast.Subscript):
            sl = expr.slice
            if isinstance(sl, ast.Constant) and sl.value in FIELDS:
                return self.field(sl.value)
            return None
        if isinstance(expr, ast.Name):
            if expr.id in TYPES:
                return set()  # a type in a shape description, not a value
            return self.name(mod, expr)
        return None

    def instance_attribute(self, mod: _Module, attr: str) -> set[str] | None:
        """Every value assigned to ``self.<attr>`` in the module."""
        out: list[set[str] | None] = []
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and t.attr == attr
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        and node.value is not None
                    ):
                        out.append(self.resolve(mod, node.value))
        return _union(*out) if out else None

    def name(self, mod: _Module, expr: ast.Name) -> set[str] | None:
        func = mod.enclosing(expr)
        while func is not None:
            got = self.local(mod, func, expr.id, expr)
            if got is not False:
                return got  # type: ignore[return-value]
            func = mod.enclosing(func)
        return self.constant(mod, expr.id)

    def local(
        self, mod: _Module, func: ast.FunctionDef, name: str, use: ast.AST
    ) -> set[str] | bool | None:
        """Values of ``name`` at ``use`` inside ``func``; False when ``func`` does not bind it.

        The definitions that reach ``use``: those before it, from the last one that runs
        unconditionally before it (in a block that contains ``use``) on; all of them when
        none comes before (a loop).
        """
        defs: list[tuple[int, ast.AST, Callable[[], set[str] | None]]] = []
        args = func.args
        if name in [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]:
            defs.append((func.lineno, func, lambda: self.parameter(mod, func, name)))
        for node in ast.walk(func):
            if mod.enclosing(node) is not func:
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if _binds(target, name):
                        defs.append(
                            (
                                node.lineno,
                                node,
                                partial(self._unpack, mod, target, node.value, name),
                            )
                        )
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                if isinstance(node.target, ast.Name) and node.target.id == name:
                    defs.append((node.lineno, node, partial(self.resolve, mod, node.value)))
            elif isinstance(node, (ast.For, ast.comprehension)) and _binds(node.target, name):
                line = getattr(node, "lineno", getattr(node.target, "lineno", 0))
                defs.append((line, node, partial(self._loop, mod, node, name)))
        if not defs:
            return False
        before = sorted((d for d in defs if d[0] < getattr(use, "lineno", 0)), key=lambda d: d[0])
        chosen = before or defs
        for k in range(len(before) - 1, -1, -1):
            if before[k][1] is func or _dominates(mod, before[k][1], use):
                chosen = before[k:]
                break
        return _union(*(resolve() for _, _, resolve in chosen))  # type: ignore[misc]

    def constant(self, mod: _Module, name: str) -> set[str] | None:
        if name in mod.consts:
            return self.resolve(mod, mod.consts[name])
        if name in mod.imports:
            module, original = mod.imports[name]
            other = self.modules.get(module)
            if other is not None:
                return self.constant(other, original)
        return None

    def _loop(self, mod: _Module, node: ast.For | ast.comprehension, name: str) -> set[str] | None:
        target, it = node.target, node.iter
        if isinstance(target, ast.Name):
            if isinstance(it, (ast.Tuple, ast.List)):
                return _union(*(self.resolve(mod, e) for e in it.elts))
            return None
        if isinstance(target, ast.Tuple) and isinstance(it, (ast.Name, ast.Attribute)):
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name) and elt.id == name:  # for a, b in rows
                    key = it.id if isinstance(it, ast.Name) else it.attr
                    return self.appended_element(mod, key, i)
        return None

    def _unpack(
        self, mod: _Module, target: ast.expr, value: ast.expr, name: str
    ) -> set[str] | bool | None:
        if isinstance(target, ast.Name):
            return self.resolve(mod, value) if target.id == name else False
        if isinstance(target, ast.Tuple):
            for i, t in enumerate(target.elts):
                if isinstance(t, ast.Name) and t.id == name:
                    return self.element(mod, value, i, target)
        return False

    def element(self, mod: _Module, value: ast.expr, i: int, at: ast.AST) -> set[str] | None:
        """Element ``i`` of the tuple ``value`` evaluates to."""
        if isinstance(value, ast.Tuple):
            return self.resolve(mod, value.elts[i]) if i < len(value.elts) else None
        if isinstance(value, ast.Call):
            return self.returned(mod, value, i)
        if isinstance(value, ast.Attribute):  # a record's tuple field: its writes here
            return self.field_element(mod, value.attr, i)
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute):
            return self.appended_element(mod, value.value.attr, i)
        if isinstance(value, ast.Name):  # a local bound to a call: what that call returns
            func = mod.enclosing(at)
            if func is None:
                return None
            sources = [
                node.value
                for node in ast.walk(func)
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)
            ]
            if sources:
                return _union(*(self.element(mod, v, i, at) for v in sources))
            if value.id in mod.consts:  # a module constant tuple
                return self.element(mod, mod.consts[value.id], i, at)
        return None

    def field_element(self, mod: _Module, name: str, i: int) -> set[str] | None:
        """Element ``i`` of every tuple written to field ``name`` in ``mod`` (the module that
        reads a record's field is the one that builds it); None values are skipped."""
        out: list[set[str] | None] = []
        for node in ast.walk(mod.tree):
            written: list[ast.expr] = []
            if isinstance(node, ast.Call):
                fields = self.record(mod, _callee(node))
                if fields and name in fields:
                    k = fields.index(name)
                    if k < len(node.args):
                        written.append(node.args[k])
                written += [kw.value for kw in node.keywords if kw.arg == name]
            elif isinstance(node, ast.Assign):
                written += [node.value for t in node.targets if _field_of(t) == name]
            for v in written:
                if isinstance(v, ast.Constant) and v.value is None:
                    continue
                out.append(self.element(mod, v, i, v))
        return _union(*out) if out else None

    def appended_element(self, mod: _Module, name: str, i: int) -> set[str] | None:
        """Element ``i`` of every tuple appended to a list ``name`` (a field or a local
        of that name) in ``mod``."""
        out: list[set[str] | None] = []
        for node in ast.walk(mod.tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and (
                    (isinstance(node.func.value, ast.Attribute) and node.func.value.attr == name)
                    or (isinstance(node.func.value, ast.Name) and node.func.value.id == name)
                )
                and node.args
            ):
                out.append(self.element(mod, node.args[0], i, node))
        return _union(*out) if out else None

    def record(self, mod: _Module, name: str | None) -> list[str] | None:
        """The fields of record class ``name`` as ``mod`` sees it (its own or imported)."""
        if name is None:
            return None
        if name in mod.records:
            return mod.records[name]
        if name in mod.imports:
            module, original = mod.imports[name]
            other = self.modules.get(module)
            if other is not None:
                return other.records.get(original)
        return None
        return False

    def returned(self, mod: _Module, call: ast.Call, index: int) -> set[str] | None:
        """Element ``index`` of the tuples a module function called by ``call`` returns
        (its own, or one imported with ``from function... import NAME``)."""
        name = _callee(call) or ""
        funcs = mod.functions.get(name, [])
        if not funcs and name in mod.imports:
            module, original = mod.imports[name]
            other = self.modules.get(module)
            if other is not None and other.functions.get(original):
                same = ast.Call(func=ast.Name(id=original), args=[], keywords=[])
                return self.returned(other, same, index)
        if not funcs:
            return None
        out: list[set[str] | None] = []
        for func in funcs:
            for node in ast.walk(func):
                if isinstance(node, ast.Return) and mod.enclosing(node) is func:
                    v = node.value
                    if v is None or (isinstance(v, ast.Constant) and v.value is None):
                        continue
                    out.append(self.element(mod, v, index, node))
        return _union(*out)

    def parameter(self, mod: _Module, func: ast.FunctionDef, name: str) -> set[str] | None:
        """Every argument passed for parameter ``name`` of ``func`` in its module."""
        args = func.args
        positional = [a.arg for a in [*args.posonlyargs, *args.args]]
        method = bool(positional) and positional[0] in ("self", "cls")
        out: list[set[str] | None] = []
        defaults = dict(
            zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
        )
        defaults |= {a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d}
        if name in defaults:
            out.append(self.resolve(mod, defaults[name]))
        calls = 0
        for site in self.siblings(mod):
            for node in ast.walk(site.tree):
                if not isinstance(node, ast.Call) or _callee(node) != func.name:
                    continue
                if method and isinstance(node.func, ast.Name):
                    continue  # a method is called on an object; set(...) is the builtin
                if site is not mod and _own_method_call(site, node):
                    continue  # self.<name>() in another module calls that module's own method
                if not args.vararg and len(node.args) > len(positional) - (1 if method else 0):
                    continue  # more arguments than it takes: another function of that name
                calls += 1
                kw = {k.arg: k.value for k in node.keywords if k.arg}
                if name in kw:
                    out.append(self.resolve(site, kw[name]))
                    continue
                if name in positional:
                    i = positional.index(name) - (1 if method else 0)
                    if 0 <= i < len(node.args) and not any(
                        isinstance(a, ast.Starred) for a in node.args[: i + 1]
                    ):
                        out.append(self.resolve(site, node.args[i]))
        if not calls:
            return None
        return _union(*out)

    def siblings(self, mod: _Module) -> list[_Module]:
        """``mod`` and, when it is in a composer's package, the package's other modules.

        A composer split into a package (``function.composers.backfill.*``) calls its
        helpers across modules: a parameter's arguments are found at those call sites too.
        """
        package = mod.name.rpartition(".")[0]
        if package.count(".") < 2:  # function.<layer>: modules of a layer are not one unit
            return [mod]
        return [mod] + [
            m for m in self.modules.values() if m is not mod and m.name.startswith(package + ".")
        ]

    def field(self, name: str) -> set[str] | None:
        """Every value written to a ``name`` field by the sinks, in any module."""
        if name in self._field_cache:
            return self._field_cache[name]
        self._field_cache[name] = set()  # while resolving: a read of itself adds nothing
        out: set[str] = set()
        for mod in self.modules.values():
            if mod.name in NOT_STATUS:
                continue
            for kind, expr, index in self.sinks(mod):
                if kind == name and not _reads_field(expr, name):
                    if index is None:
                        got = self.resolve(mod, expr)
                    else:
                        got = self.element(mod, expr, index, expr)
                    if got is not None:
                        out |= got
        self._field_cache[name] = out
        return out


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, ast.Tuple):
        return any(isinstance(t, ast.Name) and t.id == name for t in target.elts)
    return False


def _dominates(mod: _Module, stmt: ast.AST, use: ast.AST) -> bool:
    """Whether ``stmt`` sits directly in a block that contains ``use`` (so it ran first)."""
    block = mod.parent.get(stmt)
    p = mod.parent.get(use)
    while p is not None:
        if p is block:
            return True
        p = mod.parent.get(p)
    return False


def _union(*parts: set[str] | None) -> set[str] | None:
    if any(p is None for p in parts):
        return None
    out: set[str] = set()
    for p in parts:
        out |= p  # type: ignore[operator]
    return out


def _callee(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _field_of(target: ast.expr) -> str | None:
    if isinstance(target, ast.Attribute) and target.attr == "string_value":
        return _field_of(target.value)  # f["phase"].string_value = v (a protobuf Value)
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
        v = target.slice.value
        return v if isinstance(v, str) else None
    return None


def _reads_field(expr: ast.expr, name: str) -> bool:
    return (isinstance(expr, ast.Attribute) and expr.attr == name) or (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.slice, ast.Constant)
        and expr.slice.value == name
    )


def _own_method_call(site: _Module, call: ast.Call) -> bool:
    """Whether ``call`` is ``self.<name>(...)`` and ``site`` defines a ``<name>`` itself."""
    f = call.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
        return False
    return f.value.id == "self" and f.attr in site.functions


def inventory(package: Path = PACKAGE) -> Found:
    """Every reason and phase the function can write, and the sinks it cannot trace.

    Args:
        package: The ``function`` package directory (a copy, in tests of this module).
    """
    return Inventory(package).run()
