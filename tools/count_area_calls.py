"""Count the call sites converting the store's wing mixins into store areas would touch.

Per wing: calls of its mixins' methods (and the kernel methods that move with it) on a
store (a receiver whose last name contains "store"), calls on ``self`` from another
module of the store's mixins (they become calls through the area or the kernel), and uses
of the wing's statement groups (``sql.<group>``) outside the wing.

Run from the repository's root: ``python tools/count_area_calls.py``.
"""

from __future__ import annotations

import ast
import pathlib
import sys

WINGS: dict[str, dict[str, list[str]]] = {
    "waits": {
        "mixins": ["waits/signal_store.py:SignalOps", "waits/timer_store.py:TimerOps"],
        "moved": ["set_state", "get_state"],
        "groups": ["signals", "state", "timers"],
    },
    "fanout": {
        "mixins": ["fanout/items.py:ItemOps", "fanout/batches.py:BatchOps"],
        "moved": [],
        "groups": ["items", "open_items", "batches"],
    },
    "limiters": {
        "mixins": [
            "limiters/store.py:LimiterOps",
            "limiters/kept_slots.py:KeptSlotOps",
            "limiters/usage.py:LimiterUsageOps",
        ],
        "moved": [],
        "groups": ["limiters", "limited_runs", "kept_slots"],
    },
    "sagas": {"mixins": ["sagas/store.py:LongLivedOps"], "moved": [], "groups": ["long_lived"]},
    "schedules": {
        "mixins": ["schedules/store.py:ScheduleOps"],
        "moved": [],
        "groups": ["schedules"],
    },
    "canvas": {"mixins": ["canvas/outbox.py:OutboxOps"], "moved": [], "groups": ["outbox"]},
}
ROOT = pathlib.Path("celery_durable")


def methods_of(spec: str) -> set[str]:
    path, name = spec.split(":")
    tree = ast.parse((ROOT / path).read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                f.name
                for f in node.body
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")
            }
    raise SystemExit(f"no class {spec}")


def last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return last_name(node.func)
    return ""


def count(wing: str, spec: dict[str, list[str]], files: list[pathlib.Path]) -> dict[str, int]:
    names = set(spec["moved"]).union(*(methods_of(m) for m in spec["mixins"]))
    on_store = on_self = groups = 0
    for file in files:
        text = file.read_text()
        own = str(file).startswith(f"celery_durable/{wing}/")
        mixin_module = str(file).startswith("celery_durable/store/") or any(
            str(file) == f"celery_durable/{m.split(':')[0]}"
            for w in WINGS.values()
            for m in w["mixins"]
        )
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr not in names:
                    continue
                receiver = last_name(node.func.value)
                if "store" in receiver.lower() or receiver == "STATE_READS":
                    on_store += 1
                elif receiver == "self" and mixin_module and not own:
                    on_self += 1
            elif isinstance(node, ast.Attribute) and node.attr in spec["groups"]:
                if last_name(node.value) == "sql" and not own:
                    groups += 1
    return {"on a store": on_store, "on self, cross-mixin": on_self, "sql groups": groups}


def main() -> None:
    files = sorted(
        p
        for top in ("celery_durable", "tests", "examples", "benchmarks")
        for p in pathlib.Path(top).rglob("*.py")
    )
    total = 0
    for wing, spec in WINGS.items():
        for top in ("celery_durable", "tests", "examples", "benchmarks"):
            found = count(wing, spec, [f for f in files if f.parts[0] == top])
            total += sum(found.values())
            if any(found.values()):
                shown = ", ".join(f"{k}: {v}" for k, v in found.items())
                print(f"{wing:10} {top:15} {shown}")
    print(f"{'all':10} {total}", file=sys.stdout)


if __name__ == "__main__":
    main()
