"""The operations pages' examples work as written: SQLite store, file broker, real workers."""

from __future__ import annotations

from tests.support.examples import run_example


def squeezed(printed: str) -> list[str]:
    """The printed lines with their runs of spaces made one (table columns vary in width)."""
    return [" ".join(line.split()) for line in printed.splitlines()]


def test_incident_example_finds_fixes_and_checks_failed_runs_with_the_cli(tmp_path):
    printed = run_example("incident.py", tmp_path)
    lines = squeezed(printed)
    # What is failing: two of eight orders failed, the refund waits.
    before = lines.index(
        "$ celery -A incident durable resume --workflow incident.checkout --since 1h --dry-run"
    )
    assert "incident.checkout 0 0 0 6 2 0 0" in lines[:before]
    assert "incident.refund 0 0 1 0 0 0 0" in lines[:before]
    failed = [line for line in lines[:before] if " FAILED 2/2 " in line]
    assert len(failed) == 2, printed
    assert all(
        line.endswith("ValueError: amount 2500 is over the card limit of 2000") for line in failed
    )
    [charge] = [line for line in lines[:before] if line.startswith("step 1: incident.charge")]
    assert charge.startswith("step 1: incident.charge error") and " attempt 2 " in charge
    # Fix it: the dry run names both, the resume resumes both, a second one nothing.
    assert "would resume 2 run(s) of incident.checkout" in lines
    assert "resumed 2 run(s) of incident.checkout" in lines
    assert "resumed 0 run(s) of incident.checkout" in lines
    # Check: the resumed run kept step 0 and ran the failed step again in a fresh attempt.
    after = lines[before:]
    assert any("incident.checkout SUCCEEDED attempt 1/2" in line for line in after), printed
    assert any(line.startswith("step 1: incident.charge ok") for line in after), printed
    assert "incident.checkout 0 0 0 8 0 0 0" in after
    assert "stored" in after
    assert "refund: refunded 9 (alice)" in lines
