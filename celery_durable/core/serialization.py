"""JSON encoding of arguments, step outputs and errors.

JSON, not pickle: stored history must stay readable by a newer deploy and by people.

Example::

    encode_arguments("shop.checkout", fn, (42,), {})   # '[[42],{}]'
"""

from __future__ import annotations

import inspect
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from celery_durable.core.validate import utf8_problem
from celery_durable.errors import NotSerialisable, PayloadTooLarge, StepFailed

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_dumps_sorted = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
).encode
loads = json.loads


def dumps(value: Any) -> str:
    """JSON text of ``value``; ``ValueError`` if JSON can't hold it or UTF-8 can't encode it
    (a lone surrogate in a string: the store could not take it)."""
    text = _dumps(value)
    if text.isascii():  # O(1): the common case costs nothing
        return text
    problem = utf8_problem(text)
    if problem is not None:
        raise ValueError(f"not valid UTF-8 text: {problem}")
    return text


def _describe(value: Any) -> str:
    return f"object of type {type(value).__name__}"


MAX_PAYLOAD_SETTING = "durable_max_payload_bytes"
MAX_DEPTH_SETTING = "durable_max_payload_depth"
# Well below what kills a prefork worker: its main process pickles a delivery's arguments
# for the pool, and a RecursionError there ends the whole worker (depth 500 did; 350 not).
DEFAULT_MAX_DEPTH = 100
_CONTAINERS = (list, tuple, dict)
# A bound on the measure itself: a value that refers to itself would nest forever.
_MEASURED_DEPTH = 100_000


def nesting_depth(value: Any) -> int:
    """How deeply ``value``'s lists, tuples and dicts nest: 0 for a scalar, 2 for
    ``[[1]]``. Level by level, without recursion: a value too deep for it is measured too."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level and depth < _MEASURED_DEPTH:
        depth += 1
        inner: list[Any] = []
        for item in level:
            members = item.values() if isinstance(item, dict) else item
            inner.extend(member for member in members if isinstance(member, _CONTAINERS))
        level = inner
    return depth


def may_nest_deeper(text: str | bytes, max_depth: int) -> bool:
    """False when JSON ``text`` can't nest deeper than ``max_depth``: it has no more
    brackets than that (counted in C, so the common case costs next to nothing)."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") > max_depth
    return text.count("[") + text.count("{") > max_depth


def depth_problem(value: Any, max_depth: int) -> str | None:
    """Why ``value`` nests too deeply to be taken, or None."""
    depth = nesting_depth(value)
    if depth <= max_depth:
        return None
    return f"nested {depth} levels deep, over the limit of {max_depth} ({MAX_DEPTH_SETTING})"


def _check_depth(what: str, value: Any, max_depth: int) -> None:
    problem = depth_problem(value, max_depth)
    if problem is not None:
        raise NotSerialisable(f"{what} is {problem}; nothing was stored")


def json_depth_problem(text: str, max_depth: int) -> str | None:
    """Why JSON ``text`` (a payload off the broker) nests too deeply, or None."""
    if not may_nest_deeper(text, max_depth):
        return None
    try:
        return depth_problem(loads(text), max_depth)
    except RecursionError:
        return f"nested too deeply to read, over the limit of {max_depth} ({MAX_DEPTH_SETTING})"
    except ValueError:
        return None  # not JSON: the caller's own check names that


def payload_size(text: str, max_bytes: int | None) -> int | None:
    """The UTF-8 size of ``text`` when it is over ``max_bytes``, else None (no limit: None).

    Measured on the JSON already encoded, in O(1) for ASCII (``isascii`` and ``len`` are)
    and for text too short to reach the limit; only long non-ASCII text is encoded again.
    """
    if max_bytes is None or len(text) * 4 <= max_bytes:
        return None  # a character is at most 4 bytes in UTF-8
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return size if size > max_bytes else None


def check_size(what: str, text: str, max_bytes: int | None) -> str:
    """``text``, or ``PayloadTooLarge`` naming ``what``, its size and the setting."""
    size = payload_size(text, max_bytes)
    if size is not None:
        raise PayloadTooLarge(f"{what} is {_too_large(size, max_bytes)}")
    return text


def _too_large(size: int, max_bytes: int | None) -> str:
    return (
        f"{size} bytes as JSON, over the limit of {max_bytes} bytes ({MAX_PAYLOAD_SETTING}); "
        "nothing was stored"
    )


def _names(fn: Callable[..., Any] | None, count: int) -> list[str]:
    names: list[str] = [f"#{i}" for i in range(count)]
    if fn is not None:
        try:
            params = list(inspect.signature(fn).parameters)
            names = [params[i] if i < len(params) else f"#{i}" for i in range(count)]
        except (TypeError, ValueError):
            pass
    return names


def check_arguments_size(
    owner: str,
    fn: Callable[..., Any] | None,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    text: str,
    max_bytes: int | None,
) -> str:
    """``text`` (the encoded ``[args, kwargs]``), or ``PayloadTooLarge`` naming the
    largest argument, its size, the arguments' size and the setting."""
    size = payload_size(text, max_bytes)
    if size is None:
        return text
    labelled = list(zip(_names(fn, len(args)), args, strict=True)) + list(kwargs.items())
    # Only on the way to an error: encode each argument again to find the culprit.
    sizes = {name: len(_dumps_sorted(value).encode("utf-8")) for name, value in labelled}
    largest = max(sizes, key=sizes.__getitem__, default=None)
    if largest is None:
        raise PayloadTooLarge(f"the arguments of {owner} are {_too_large(size, max_bytes)}")
    raise PayloadTooLarge(
        f"argument {largest!r} of {owner} is {sizes[largest]} bytes as JSON (all the "
        f"arguments: {_too_large(size, max_bytes)})"
    )


def encode_arguments(
    owner: str,
    fn: Callable[..., Any] | None,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    max_bytes: int | None = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> str:
    """Encode ``[args, kwargs]``; a value JSON can't hold, a string UTF-8 can't encode, or
    a value nested deeper than ``max_depth`` raises ``NotSerialisable`` (a ``TypeError``)
    naming the argument; arguments over ``max_bytes`` as JSON raise ``PayloadTooLarge``
    naming the largest."""
    try:
        text: str | None = _dumps_sorted([list(args), kwargs])
    except (TypeError, ValueError, RecursionError):
        text = None
    labelled = list(zip(_names(fn, len(args)), args, strict=True)) + list(kwargs.items())
    if text is not None and (text.isascii() or utf8_problem(text) is None):
        if may_nest_deeper(text, max_depth):
            for name, value in labelled:
                _check_depth(f"argument {name!r} of {owner}", value, max_depth)
        return check_arguments_size(owner, fn, args, kwargs, text, max_bytes)
    for name, value in labelled:
        _check_depth(f"argument {name!r} of {owner}", value, max_depth)
        try:
            text = _dumps_sorted(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise NotSerialisable(
                f"argument {name!r} of {owner} is not JSON serialisable ({_describe(value)}): {exc}"
            ) from None
        problem = utf8_problem(text) or utf8_problem(name)
        if problem is not None:
            raise NotSerialisable(
                f"argument {name!r} of {owner} can't be stored: not valid UTF-8 text: {problem}"
            )
    raise NotSerialisable(f"the arguments of {owner} are not JSON serialisable")


def encode_value(
    owner: str, value: Any, max_bytes: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH
) -> str:
    """Encode a step output or workflow result; raise ``NotSerialisable`` naming ``owner``
    (``PayloadTooLarge`` over ``max_bytes``)."""
    return encode_json(f"the return value of {owner}", value, max_bytes, max_depth)


def encode_json(
    what: str, value: Any, max_bytes: int | None = None, max_depth: int = DEFAULT_MAX_DEPTH
) -> str:
    """Encode ``value`` (a result, payload, state value); ``NotSerialisable`` names ``what``
    (also when it nests deeper than ``max_depth``; ``PayloadTooLarge`` when its JSON is
    over ``max_bytes``)."""
    try:
        text = _dumps(value)
    except RecursionError as exc:
        _check_depth(what, value, max_depth)
        raise NotSerialisable(f"{what} is not JSON serialisable: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise NotSerialisable(f"{what} is not JSON serialisable: {exc}") from None
    if may_nest_deeper(text, max_depth):
        _check_depth(what, value, max_depth)
    if not text.isascii():  # O(1): the common case costs nothing
        problem = utf8_problem(text)
        if problem is not None:
            raise NotSerialisable(f"{what} can't be stored: not valid UTF-8 text: {problem}")
    return check_size(what, text, max_bytes)


_NOT_GIVEN: Any = object()


def encode_error(exc: BaseException, step: int | None = _NOT_GIVEN) -> str:
    """Encode an exception's type, message, args (when JSON holds them) and traceback.

    ``step`` (a run's error): the index of the step whose failure ended the run, or None
    when none did (its body failed elsewhere); a resume runs that step again.
    """
    cls = type(exc)
    trace = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    # A remote step's or a child's failure replayed here: keep where it really happened.
    origin = getattr(exc, "error_traceback", "")
    if isinstance(origin, str) and origin:
        trace += "\nThe original traceback (where the remote step or child failed):\n" + origin
    payload: dict[str, Any] = {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "message": str(exc),
        "traceback": trace,
    }
    if step is not _NOT_GIVEN:
        payload["step"] = step
    try:
        payload["args"] = loads(dumps(list(exc.args)))
    except (TypeError, ValueError, RecursionError):
        payload["args"] = None
    if depth_problem(payload["args"], DEFAULT_MAX_DEPTH) is not None:
        payload["args"] = None  # kept as the message only: never a payload too deep
    text = _dumps(payload)
    if utf8_problem(text) is not None:
        # A message with a lone surrogate must still be storable: escape it.
        for field in ("message", "traceback"):
            payload[field] = payload[field].encode("utf-8", "backslashreplace").decode("utf-8")
        text = _dumps(payload)
    return text


def decode_error(text: str) -> dict[str, Any]:
    data: dict[str, Any] = loads(text)
    return data


def exception_class(type_name: str) -> type[BaseException] | None:
    """The exception class a stored error names (``module.Qualified.Name``), or None.

    Stored errors are data: rebuilding one never imports a module (an import runs its
    code). The class is looked up in the modules this process has already imported, by
    their attributes as stored (no ``__getattr__``, no descriptor runs), and it must be
    an exception class; anything else is None.
    """
    module_name, _, qualname = type_name.rpartition(".")
    module = sys.modules.get(module_name or "builtins")
    if module is None or not qualname:
        return None
    found: Any = module
    for part in qualname.split("."):
        found = inspect.getattr_static(found, part, None)
        if found is None:
            return None
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return None


def rebuild_exception(step_name: str, text: str) -> BaseException:
    """Rebuild a recorded step failure as its own type when possible (see
    ``exception_class``), else ``StepFailed``."""
    data = decode_error(text)
    target = exception_class(str(data.get("type") or ""))
    if target is not None and isinstance(data.get("args"), list):
        try:
            return target(*data["args"])
        except Exception:  # noqa: BLE001 - any failure to rebuild falls back to StepFailed
            pass
    return StepFailed(step_name, data["type"], data["message"])
