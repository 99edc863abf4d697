"""Cron syntax (celery_durable/schedules/cron_syntax.py): the values each field lists, the
aliases, the Vixie day rule's flag, and bad expressions refused naming the argument, the
field and the value."""

from __future__ import annotations

import pytest

from celery_durable.errors import InvalidArgument
from celery_durable.schedules.cron_syntax import parse_fields


@pytest.mark.parametrize(
    ("expression", "field", "values"),
    [
        ("* * * * *", "minutes", tuple(range(60))),
        ("* * * * *", "seconds", (0,)),
        ("5 * * * *", "minutes", (5,)),
        ("1-5 * * * *", "minutes", (1, 2, 3, 4, 5)),
        ("*/15 * * * *", "minutes", (0, 15, 30, 45)),
        ("10-30/10 * * * *", "minutes", (10, 20, 30)),
        ("5/20 * * * *", "minutes", (5, 25, 45)),
        ("1,15,30 * * * *", "minutes", (1, 15, 30)),
        ("0,*/20,7-8 * * * *", "minutes", (0, 7, 8, 20, 40)),
        ("0 */6 * * *", "hours", (0, 6, 12, 18)),
        ("0 0 1,15 * *", "days", (1, 15)),
        ("0 0 * JAN,jul,Dec *", "months", (1, 7, 12)),
        ("0 0 * mar-may *", "months", (3, 4, 5)),
        ("0 0 * */3 *", "months", (1, 4, 7, 10)),
        ("0 0 * * MON-FRI", "weekdays", (1, 2, 3, 4, 5)),
        ("0 0 * * sun", "weekdays", (0,)),
        ("0 0 * * 7", "weekdays", (0,)),
        ("0 0 * * 0,7", "weekdays", (0,)),
        ("0 0 * * 5-7", "weekdays", (0, 5, 6)),
        ("0 0 * * *", "weekdays", (0, 1, 2, 3, 4, 5, 6)),
        ("*/10 * * * * *", "seconds", (0, 10, 20, 30, 40, 50)),
        ("*/10 * * * * *", "minutes", tuple(range(60))),
        ("  30   0  12 * * *  ", "hours", (12,)),
    ],
)
def test_each_field_lists_the_values_its_syntax_names(
    expression: str, field: str, values: tuple[int, ...]
) -> None:
    assert getattr(parse_fields(expression, "cron"), field) == values


@pytest.mark.parametrize(
    ("alias", "expression"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_an_alias_is_its_five_fields(alias: str, expression: str) -> None:
    assert parse_fields(alias, "cron") == parse_fields(expression, "cron")


def test_a_day_field_is_restricted_unless_it_starts_with_a_star() -> None:
    # Both restricted: a day matches if either does (Vixie); see test_cron.py for the days.
    assert parse_fields("0 0 13 * FRI", "cron").either_day
    assert not parse_fields("0 0 13 * *", "cron").either_day
    assert not parse_fields("0 0 */2 * MON", "cron").either_day
    assert not parse_fields("0 0 * * FRI", "cron").either_day


# Bad input: InvalidArgument naming the argument, the field and the value.


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "cron='61 * * * *': minute field '61' is out of range 0-59"),
        ("1-61 * * * *", "cron='1-61 * * * *': minute field '1-61': '61' is out of range 0-59"),
        ("60 * * * * *", "second field '60' is out of range 0-59"),
        ("* 24 * * *", "hour field '24' is out of range 0-23"),
        ("* * 0 * *", "day-of-month field '0' is out of range 1-31"),
        ("* * 32 * *", "day-of-month field '32' is out of range 1-31"),
        ("* * * 13 *", "month field '13' is out of range 1-12"),
        ("* * * 0 *", "month field '0' is out of range 1-12"),
        ("* * * * 8", "day-of-week field '8' is out of range 0-7"),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        ("1, * * * *", "minute field '1,' has an empty list item"),
        ("*/0 * * * *", "minute field '*/0' has the step 0"),
        ("1-5/0 * * * *", "minute field '1-5/0' has the step 0"),
        ("*/x * * * *", "minute field '*/x' has the step 'x', which is not a number"),
        ("*/ * * * *", "minute field '*/' has the step '', which is not a number"),
        ("a * * * *", "minute field 'a' is not a number"),
        ("-1 * * * *", "minute field '-1': '' is not a number"),
        ("* * JAN * *", "day-of-month field 'JAN' is not a number"),
        ("* * * FOO *", "month field 'FOO' is not a number or a name such as JAN"),
        ("* * * * MON-FOO", "day-of-week field 'MON-FOO': 'FOO' is not a number or a name"),
        ("5-2 * * * *", "minute field '5-2' is a backwards range (5 comes after 2)"),
        ("* * * * FRI-MON", "day-of-week field 'FRI-MON' is a backwards range"),
        ("* * * *", "cron='* * * *' has 4 fields: write 5 (minute hour"),
        ("* * * * * * *", "has 7 fields"),
        ("", "cron='' has 0 fields"),
        ("@often", "cron='@often' is not a known alias: write one of @yearly"),
        ("@reboot", "is not a known alias"),
    ],
)
def test_a_bad_cron_is_refused_naming_the_field_and_value(expression: str, message: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_fields(expression, "cron")
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_the_error_names_the_argument_given() -> None:
    with pytest.raises(InvalidArgument, match=r"^schedule\(cron\)='61 \* \* \* \*': minute"):
        parse_fields("61 * * * *", "schedule(cron)")
    with pytest.raises(InvalidArgument, match="^cron=5 must be a str"):
        parse_fields(5, "cron")  # type: ignore[arg-type]
