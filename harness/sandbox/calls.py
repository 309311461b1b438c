"""Calls from a tests' process into a solution's process, with values that cross as plain data.

Standalone, standard library only: `harness.sandbox.tested` embeds this file's source in both
sandboxed programs. The solution's program is the solution, then `serve(...)`, which answers the
tests' requests: "get" a global name of the solution, "call" a value it holds. The tests' program
is `check(...)`: it reads the tests from a pipe, binds each name they take from the solution to
the solution's answer, and runs them.

What crosses, either way: None, bool, int, float, complex, str, bytes, bytearray, range,
Decimal, Fraction, and tuples, lists, dicts, sets, frozensets and deques of these (a subclass
such as a namedtuple, OrderedDict or Counter crosses as its base type; a numpy scalar as its
Python value). An iterator (a generator, map, zip ...) crosses as its items and arrives as an
iterator over them; a dict's keys, values or items view arrives as the same view of a dict
rebuilt from them. A standard-library module a test takes by name crosses by name and is
imported on the other side. Anything else (a function, a class, an instance of the solution's
class) stays where it is and crosses as a `Handle`: the tests can call it or pass it back, and
it equals only itself. So every value the tests compare was rebuilt by the tests' process from
plain data: its type is exact and `==` is Python's own, which nothing the solution defines can
override.

Wire: a message is its length (8 bytes, big-endian) then JSON. In a value, JSON arrays are lists
and JSON objects are one-key tags: {"t": [...]} tuple, {"d": [[key, value], ...]} dict,
{"s": [...]} set, {"fs": [...]} frozenset, {"i": "0x..."} int beyond 64 bits, {"c": [re, im]},
{"b": hex} bytes, {"ba": hex} bytearray, {"r": [start, stop, step]}, {"n": [type, text]}
Decimal or Fraction, {"q": [...]} deque, {"it": [...]} iterator, {"dk": [...]}, {"dv": [...]},
{"di": [[key, value], ...]} dict views, {"m": name} module, {"h": [id, type name]} handle.
"""

from __future__ import annotations

import builtins
import collections
import ctypes
import importlib
import itertools
import json
import os
import sys
from collections.abc import Iterator

_LENGTH = 8  # bytes of a message's length prefix
_NUMBERS = ("decimal.Decimal", "fractions.Fraction")  # exact number types that cross by text
_VIEWS = {type({}.keys()): "dk", type({}.values()): "dv"}  # dict views that cross as their items
_ITEMS = type({}.items())  # a dict's items view crosses as its pairs
_MAX_ITEMS = 1_000_000  # items an iterator may yield when it crosses (an endless one cannot)
_PR_SET_DUMPABLE = 4


class SolutionError(Exception):
    """The solution's process gave no usable answer: it ended, or sent something malformed."""


def send(fd: int, message: object) -> None:
    data = json.dumps(message).encode()
    view = memoryview(len(data).to_bytes(_LENGTH, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd: int) -> object:
    """The next message on `fd`; None once the other side has closed it."""
    head = _read(fd, _LENGTH, may_end=True)
    return None if head is None else json.loads(_read(fd, int.from_bytes(head, "big")))


def _read(fd: int, size: int, may_end: bool = False) -> bytes | None:
    """Exactly `size` bytes; None at end of stream before the first byte if `may_end`."""
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            if data or not may_end:
                raise EOFError("a message was cut off")
            return None
        data += chunk
    return bytes(data)


def encode(value: object, keep) -> object:
    """`value` as JSON-ready data; what cannot cross becomes a handle numbered `keep(value)`."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        number = int(value)
        return number if abs(number) < 1 << 63 else {"i": hex(number)}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        return {"ba" if isinstance(value, bytearray) else "b": bytes(value).hex()}
    if isinstance(value, list):
        return [encode(item, keep) for item in value]
    if isinstance(value, tuple):
        return {"t": [encode(item, keep) for item in value]}
    if isinstance(value, dict) or type(value) is _ITEMS:
        tag, pairs = ("d", value.items()) if isinstance(value, dict) else ("di", value)
        return {tag: [[encode(k, keep), encode(v, keep)] for k, v in pairs]}
    if isinstance(value, (set, frozenset)):
        return {"s" if isinstance(value, set) else "fs": [encode(item, keep) for item in value]}
    if isinstance(value, range):
        return {"r": [value.start, value.stop, value.step]}
    if type(value) in _VIEWS:
        return {_VIEWS[type(value)]: [encode(item, keep) for item in value]}
    if isinstance(value, collections.deque):
        return {"q": [encode(item, keep) for item in value]}
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if kind in _NUMBERS:
        return {"n": [kind, str(value)]}
    if isinstance(value, type(sys)):
        return {"m": value.__name__}
    if isinstance(value, Iterator):
        items = list(itertools.islice(value, _MAX_ITEMS + 1))
        if len(items) > _MAX_ITEMS:
            raise ValueError(f"an iterator of more than {_MAX_ITEMS} items cannot be sent")
        return {"it": [encode(item, keep) for item in items]}
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return encode(value.item(), keep)  # a numpy scalar compares as its Python value
    return {"h": [keep(value), type(value).__name__]}


def decode(data: object, handle, module=None) -> object:
    """The value `encode` wrote, built from exact built-in types; handles become `handle(ref)`,
    and a module name `module(name)` where one may come (else it is refused)."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(item, handle) for item in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError("not an encoded value")
    ((tag, body),) = data.items()
    items = body if isinstance(body, list) else ()
    if tag in _SEQUENCES:
        return _SEQUENCES[tag]([decode(item, handle) for item in items])
    if tag in ("d", "di"):
        rebuilt = {decode(k, handle): decode(v, handle) for k, v in items}
        return rebuilt if tag == "d" else rebuilt.items()
    if tag == "i":
        return int(str(body), 16)
    if tag == "c":
        return complex(float(items[0]), float(items[1]))
    if tag in ("b", "ba"):
        return (bytes if tag == "b" else bytearray).fromhex(str(body))
    if tag == "r":
        return range(*(int(item) for item in items))
    if tag == "n" and len(items) == 2 and items[0] in _NUMBERS:
        module, name = items[0].rsplit(".", 1)
        return getattr(importlib.import_module(module), name)(str(items[1]))
    if tag == "m" and module is not None:
        return module(str(body))
    if tag == "h":
        return handle(items)
    raise ValueError(f"cannot decode {tag!r}")


_SEQUENCES = {  # tag -> how its decoded items become the value
    "t": tuple,
    "s": set,
    "fs": frozenset,
    "q": collections.deque,
    "it": iter,
    "dk": lambda items: dict.fromkeys(items).keys(),
    "dv": lambda items: dict(enumerate(items)).values(),
}


def stdlib_module(name: str) -> object:
    """A standard-library module the tests take by name (the solution's `import math`)."""
    if name.partition(".")[0] not in getattr(sys, "stdlib_module_names", ()):
        raise ValueError(f"{name} is not a standard-library module")
    return importlib.import_module(name)


# ---- The solution's side -------------------------------------------------------------------


def serve(namespace: dict, requests: int, replies: int) -> None:
    """Answer requests on `requests` from the solution's globals `namespace` until the tests'
    process closes its end. Whatever a request raises (SystemExit included) is its answer."""
    kept: list = []

    def keep(value: object) -> int:
        kept.append(value)
        return len(kept) - 1

    def find(ref: list) -> object:
        return kept[int(ref[0])]

    while (request := receive(requests)) is not None:
        try:
            reply = {"ok": encode(_answer(request, namespace, find), keep)}
        except BaseException as exc:  # noqa: BLE001 - the tests' side decides what it means
            reply = {"raised": [type(exc).__name__, _message(exc)]}
        send(replies, reply)


def _answer(request: dict, namespace: dict, find) -> object:
    if request["op"] == "get":
        if request["name"] not in namespace:
            raise NameError(f"name {request['name']!r} is not defined")
        return namespace[request["name"]]
    args = decode(request["args"], find)
    kwargs = {name: decode(value, find) for name, value in request["kwargs"].items()}
    return find(request["h"])(*args, **kwargs)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)[:2000]
    except Exception:  # noqa: BLE001 - a broken __str__ still leaves the exception's type
        return ""


# ---- The tests' side -----------------------------------------------------------------------


class Handle:
    """A value that stayed in the solution's process: calling it calls it there (the arguments
    cross as plain data); it equals only itself."""

    __slots__ = ("_link", "_ref", "_type")

    def __init__(self, link: _Link, ref: list, type_name: str) -> None:
        self._link, self._ref, self._type = link, ref, type_name

    def __call__(self, *args, **kwargs):
        return self._link.ask({"op": "call", "h": self._ref, **self._link.arguments(args, kwargs)})

    def __repr__(self) -> str:
        return f"<{self._type} in the solution's process>"


class _Link:
    """The tests' end of the two pipes to the solution's process."""

    def __init__(self, requests: int, replies: int) -> None:
        self.requests, self.replies = requests, replies

    def arguments(self, args: tuple, kwargs: dict) -> dict:
        def keep(value: object) -> list:
            if isinstance(value, Handle):
                return value._ref[0]
            raise TypeError(f"a {type(value).__name__} cannot be passed to the solution")

        encoded = {name: encode(value, keep) for name, value in kwargs.items()}
        return {"args": encode(list(args), keep), "kwargs": encoded}

    def ask(self, request: dict) -> object:
        """The solution's answer to `request`: its value, or what it raised, raised here."""
        try:
            send(self.requests, request)
            reply = receive(self.replies)
        except (OSError, ValueError, EOFError) as exc:
            raise SolutionError(f"no readable answer from the solution: {exc}") from None
        if reply is None:
            raise SolutionError("the solution's process ended before answering")
        if isinstance(reply, dict) and "ok" in reply:
            module = stdlib_module if request["op"] == "get" else None
            try:
                return decode(reply["ok"], lambda ref: Handle(self, ref[:1], str(ref[1])), module)
            except Exception as exc:  # noqa: BLE001 - whatever it sent, it is not a value
                raise SolutionError(f"a malformed value from the solution: {exc!r}") from None
        if isinstance(reply, dict) and isinstance(reply.get("raised"), list):
            raise _raised(*map(str, reply["raised"][:2]))
        raise SolutionError("a malformed reply from the solution")


def _raised(name: str, message: str) -> Exception:
    """What to raise in the tests for the solution's exception: the same built-in type where
    there is one (a test may expect a ValueError), else SolutionError. Never a BaseException
    that is not an Exception: the solution's SystemExit must not end the tests."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError wants five arguments
            pass
    return SolutionError(f"{name}: {message}")


def check(source: int, ready: int, requests: int, replies: int) -> None:
    """Run the tests written to the `source` pipe ({"prelude", "imports", "code"}), then return.

    First this process makes itself non-dumpable (its memory and file descriptors can no longer
    be opened through /proc or ptrace by a process without privileges), reads its tests and
    writes a byte to `ready`: only then does the harness start the solution's process. The
    prelude runs here (HumanEval's stub: imports, helpers); each name in "imports" is then bound
    to the solution's value of it, or left unbound where the solution has none.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    with open(source, "rb") as f:
        spec = json.loads(f.read())
    os.write(ready, b"r")
    os.close(ready)
    link = _Link(requests, replies)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(spec["prelude"], "prelude.py", "exec"), namespace)
    for name in spec["imports"]:
        namespace.pop(name, None)
        try:
            namespace[name] = link.ask({"op": "get", "name": name})
        except Exception:  # noqa: BLE001, S110 - not in the solution: the tests' NameError says so
            pass
    exec(compile(spec["code"], "tests.py", "exec"), namespace)
