"""Run one function in several threads at once, for the tests of concurrent writers."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(
    work: Callable[[int], None], count: int, timeout: float = 60.0
) -> list[BaseException]:
    """``work(n)`` for each ``n`` below ``count``, each in a thread of its own, joined within
    ``timeout`` seconds each; what they raised (an assert in a thread fails nothing by itself)."""
    errors: list[BaseException] = []

    def guarded(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller to assert on
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    return errors
