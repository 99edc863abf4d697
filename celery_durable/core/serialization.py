"""JSON encoding of arguments, step outputs and errors.

JSON, not pickle: stored history must stay readable by a newer deploy and by people.

Example::

    encode_arguments("shop.checkout", fn, (42,), {})   # '[[42],{}]'
"""

from __future__ import annotations

import importlib
import inspect
import json
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
) -> str:
    """Encode ``[args, kwargs]``; a value JSON can't hold, or a string UTF-8 can't encode,
    raises ``NotSerialisable`` (a ``TypeError``) naming the argument; arguments over
    ``max_bytes`` as JSON raise ``PayloadTooLarge`` naming the largest."""
    try:
        text: str | None = _dumps_sorted([list(args), kwargs])
    except (TypeError, ValueError):
        text = None
    if text is not None and (text.isascii() or utf8_problem(text) is None):
        return check_arguments_size(owner, fn, args, kwargs, text, max_bytes)
    labelled = list(zip(_names(fn, len(args)), args, strict=True)) + list(kwargs.items())
    for name, value in labelled:
        try:
            text = _dumps_sorted(value)
        except (TypeError, ValueError) as exc:
            raise NotSerialisable(
                f"argument {name!r} of {owner} is not JSON serialisable ({_describe(value)}): {exc}"
            ) from None
        problem = utf8_problem(text) or utf8_problem(name)
        if problem is not None:
            raise NotSerialisable(
                f"argument {name!r} of {owner} can't be stored: not valid UTF-8 text: {problem}"
            )
    raise NotSerialisable(f"the arguments of {owner} are not JSON serialisable")


def encode_value(owner: str, value: Any, max_bytes: int | None = None) -> str:
    """Encode a step output or workflow result; raise ``NotSerialisable`` naming ``owner``
    (``PayloadTooLarge`` over ``max_bytes``)."""
    return encode_json(f"the return value of {owner}", value, max_bytes)


def encode_json(what: str, value: Any, max_bytes: int | None = None) -> str:
    """Encode ``value`` (a result, payload, state value); ``NotSerialisable`` names ``what``
    (``PayloadTooLarge`` when its JSON is over ``max_bytes``)."""
    try:
        text = _dumps(value)
    except (TypeError, ValueError) as exc:
        raise NotSerialisable(f"{what} is not JSON serialisable: {exc}") from None
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
    except (TypeError, ValueError):
        payload["args"] = None
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


def rebuild_exception(step_name: str, text: str) -> BaseException:
    """Rebuild a recorded step failure as its own type when possible, else ``StepFailed``."""
    data = decode_error(text)
    module_name, _, qualname = data["type"].rpartition(".")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        if (
            isinstance(target, type)
            and issubclass(target, BaseException)
            and data["args"] is not None
        ):
            return target(*data["args"])  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - any failure to rebuild falls back to StepFailed
        pass
    return StepFailed(step_name, data["type"], data["message"])
