"""Input the broker or the store can't carry is refused at the edge, naming the argument
and the rule, before anything is written or published (no raw driver errors)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery

import celery_durable as cd
from celery_durable import Durable, InvalidArgument, NotSerialisable
from celery_durable.core import validate
from celery_durable.core.serialization import decode_error, encode_arguments, encode_error
from tests.support.eager import eager_durable, failure_of
from tests.support.services import UNREACHABLE_BROKER_URL

# 100 characters but 400 bytes: passes a 255-character check, not AMQP's 255-byte
# correlation_id (Celery sets it to the task id, which is the run id).
EMOJI_ID = "\N{GRINNING FACE}" * 100
SURROGATE = "caf\udce9"  # what os.fsdecode makes of b"caf\xe9": UTF-8 can't encode it

BAD_IDS = [
    (EMOJI_ID, "400 bytes in UTF-8, over the limit of 255"),
    ("x" * 256, "256 bytes in UTF-8, over the limit of 255"),
    ("", "must not be empty"),
    ("run\x00one", "NUL"),
    (SURROGATE, "lone surrogate '\\udce9'"),
    (42, "must be a str, not int"),
]
BAD_ID_NAMES = ["100-emoji", "256-ascii", "empty", "nul", "surrogate", "not-a-str"]


@pytest.mark.parametrize(("bad", "rule"), BAD_IDS, ids=BAD_ID_NAMES)
def test_workflow_id_rules_name_the_argument_and_the_rule(bad, rule):
    with pytest.raises(InvalidArgument, match="^run_id=") as raised:
        validate.check_run_id(bad)
    assert rule in str(raised.value)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, cd.DurableError)


def test_ids_up_to_255_bytes_pass():
    for good in ("x" * 255, "\N{LATIN SMALL LETTER E WITH ACUTE}" * 127, "\N{GRINNING FACE}" * 63):
        assert validate.check_run_id(good) == good


def test_keys_and_names_count_characters():
    assert validate.check_idempotency_key("k" * 255) == "k" * 255
    assert validate.check_idempotency_key(None) is None
    with pytest.raises(InvalidArgument, match="idempotency_key=.*300 characters.*limit of 255"):
        validate.check_idempotency_key("k" * 300)
    assert validate.check_signal_name("s" * 200) == "s" * 200
    with pytest.raises(InvalidArgument, match="signal name=.*201 characters.*limit of 200"):
        validate.check_signal_name("s" * 201)
    for bad in ("a\x00b", SURROGATE, ""):
        with pytest.raises(InvalidArgument, match="signal name="):
            validate.check_signal_name(bad)


def test_arguments_utf8_cannot_encode_are_named():
    with pytest.raises(
        NotSerialisable, match="argument 'path' of step s can't be stored: .*surrogate"
    ):
        encode_arguments("step s", lambda path: path, (SURROGATE,), {})
    with pytest.raises(NotSerialisable, match="argument 'k\\\\udce9' of step s"):
        encode_arguments("step s", None, (), {"k\udce9": 1})
    assert encode_arguments("step s", None, ("caf\N{LATIN SMALL LETTER E WITH ACUTE}",), {})


def test_an_error_message_utf8_cannot_encode_is_stored_escaped():
    """Bug: an exception message with a lone surrogate made the run's settle fail."""
    text = encode_error(ValueError(f"no file {SURROGATE}"))
    text.encode("utf-8")  # storable
    assert decode_error(text)["message"] == "no file caf\\udce9"


# -- at the edges, against the session's Postgres store ------------------------------------


def count_rows(durable: Durable, table: str, run_id: str | None = None) -> int:
    store = durable.runtime.store
    rows = getattr(store.tables, table)
    query = sa.select(sa.func.count()).select_from(rows).where(rows.c.namespace == store.namespace)
    if run_id is not None:
        query = query.where((rows.c.id if table == "runs" else rows.c.run_id) == run_id)
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


@pytest.mark.parametrize(("bad", "rule"), BAD_IDS, ids=BAD_ID_NAMES)
@pytest.mark.parametrize("argument", ["run_id", "workflow_id", "task_id"])
def test_apply_async_refuses_ids_before_anything_is_written(basic_app, key, argument, bad, rule):
    """Bug: 100 emoji passed the 255-character check; every publish to RabbitMQ then
    failed with struct.error and the run stayed PENDING. NUL gave a psycopg.DataError."""
    before = count_rows(basic_app.durable, "runs")
    with pytest.raises(InvalidArgument, match=f"five_steps: {argument}=") as raised:
        basic_app.five_steps.apply_async(args=(key,), **{argument: bad})
    assert rule in str(raised.value)
    assert count_rows(basic_app.durable, "runs") == before


def test_a_queue_amqp_cannot_carry_is_refused(basic_app, key):
    before = count_rows(basic_app.durable, "runs")
    with pytest.raises(InvalidArgument, match="five_steps: queue=.*400 bytes"):
        basic_app.five_steps.apply_async(args=(key,), queue=EMOJI_ID)
    assert count_rows(basic_app.durable, "runs") == before


def test_handle_lookups_refuse_invalid_ids(basic_app):
    durable = basic_app.durable
    for bad, rule in BAD_IDS:
        with pytest.raises(InvalidArgument, match=f"run_id=.*{rule[:8]}"):
            durable.get_handle(bad)
        with pytest.raises(InvalidArgument, match="run_id="):
            cd.WorkflowHandle(durable, bad)


def test_a_lone_surrogate_argument_is_refused_naming_it(basic_app, key):
    """Bug: it reached psycopg, which raised a UnicodeEncodeError naming nothing."""
    with pytest.raises(NotSerialisable, match="argument 'key' of workflow .*five_steps.*udce9"):
        basic_app.five_steps.apply_async(args=(SURROGATE,), run_id=f"sur-{key}")
    assert count_rows(basic_app.durable, "runs", f"sur-{key}") == 0


def test_signal_input_is_checked_before_anything_is_stored(basic_app, key):
    """Bug: a 300-character idempotency key gave a SQLAlchemy DataError with the SQL."""
    handle = basic_app.cancellable.apply_async(args=(key,), queue=f"nobody-{key}")
    with pytest.raises(InvalidArgument, match="idempotency_key=.*300 characters.*255"):
        handle.signal("item", 1, idempotency_key="k" * 300)
    with pytest.raises(InvalidArgument, match="signal name=.*NUL"):
        handle.signal("it\x00em", 1)
    with pytest.raises(InvalidArgument, match="signal name=.*lone surrogate"):
        handle.signal(SURROGATE, 1)
    with pytest.raises(NotSerialisable, match="payload of signal 'item'.*lone surrogate"):
        handle.signal("item", {"name": SURROGATE})
    assert count_rows(basic_app.durable, "signals", handle.id) == 0
    with pytest.raises(InvalidArgument, match="cancel\\(reason\\)=.*NUL"):
        handle.cancel("no\x00reason")
    assert handle.status() is cd.WorkflowStatus.PENDING
    handle.cancel("test over")


@pytest.fixture
def producer(basic_app) -> Iterator[Durable]:
    """The test app's store and namespace, and a broker nobody listens on: a signal that
    got past validation would fail to publish instead of raising InvalidArgument."""
    app = Celery("producer", broker=UNREACHABLE_BROKER_URL)
    app.conf.update(
        task_publish_retry=False,
        broker_connection_retry=False,
        broker_connection_max_retries=0,
        broker_connection_timeout=1,
    )
    durable = Durable(app)
    yield durable
    durable.runtime.store.dispose()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (("x" * 300, "approval", None, None), InvalidArgument, "run_id=.*300 bytes"),
        ((EMOJI_ID, "approval", None, None), InvalidArgument, "run_id=.*400 bytes"),
        (("run", "approval", {"by": SURROGATE}, None), NotSerialisable, "payload of signal"),
        (("run", "approval", None, "k" * 300), InvalidArgument, "idempotency_key="),
        (("run", "x" * 201, None, None), InvalidArgument, "signal name=.*201 characters"),
    ],
    ids=["300-char-id", "100-emoji-id", "surrogate-payload", "300-char-key", "201-char-name"],
)
def test_broker_only_signals_are_checked_before_publishing(producer, call, error, match):
    """Bug: durable.send_signal() published a surrogate payload and a 300-character id;
    the worker then failed to store them."""
    with pytest.raises(error, match=match):
        producer.send_signal(*call)


# -- results, step outputs and state values, in eager mode on the same Postgres ------------


@pytest.fixture
def eager(basic_app) -> Iterator[Durable]:
    """A Durable running workflows in-process (eager), on the session's tables."""
    with eager_durable("eager", basic_app.durable.config.table_prefix) as durable:
        yield durable


def test_values_utf8_cannot_encode_fail_the_run_naming_their_owner(eager):
    """Bug: a step output, result or state value with a lone surrogate reached psycopg
    (UnicodeEncodeError); the run was left to its lease instead of failing."""

    @eager.step(name="v.output")
    def output() -> str:
        return SURROGATE

    @eager.step(name="v.takes")
    def takes(text: str) -> str:
        return text

    @eager.workflow(name="v.step_output", max_attempts=3)
    def step_output() -> str:
        return output()

    @eager.workflow(name="v.result", max_attempts=3)
    def result() -> Any:
        return {"file": SURROGATE}

    @eager.workflow(name="v.state", max_attempts=3)
    def state() -> None:
        cd.set_state({"file": SURROGATE})

    @eager.workflow(name="v.step_input", max_attempts=3)
    def step_input() -> str:
        return takes(SURROGATE)

    cases = [
        (step_output, "the return value of step v.output can't be stored"),
        (result, "the return value of workflow v.result can't be stored"),
        (state, "set_state('state') in workflow run"),
        (step_input, "argument 'text' of step v.takes can't be stored"),
    ]
    for workflow, owner in cases:
        handle = workflow.delay()
        failed = failure_of(handle)
        assert failed.error_type == "celery_durable.errors.NotSerialisable", failed
        assert owner in failed.error_message and "lone surrogate" in failed.error_message
        assert handle.record().attempts == 1  # permanent: not retried


def test_an_exception_message_utf8_cannot_encode_still_fails_the_run(eager):
    @eager.workflow(name="v.raises", max_attempts=1)
    def raises() -> None:
        raise ValueError(f"no file {SURROGATE}")

    failed = failure_of(raises.delay())
    assert failed.error_type == "builtins.ValueError"
    assert failed.error_message == "no file caf\\udce9"


def test_durations_and_moments_of_the_operations_commands():
    assert validate.parse_duration("90s", "x") == 90.0
    assert validate.parse_duration("2h", "x") == 7200.0
    assert validate.parse_duration("30d", "x") == 30 * 86400.0
    assert validate.parse_duration(15, "x") == 15.0
    now = 1_800_000_000.0
    assert validate.parse_moment("2h", "--since", now) == now - 7200
    assert validate.parse_moment("2026-12-01T10:00:00", "x", now) == 1796119200.0  # naive: UTC
    assert validate.parse_moment("2026-12-01T11:00:00+01:00", "x", now) == 1796119200.0
    for bad in ("", "soon", "-1h", "infd", True):
        with pytest.raises(InvalidArgument, match=r"--since=.* (duration|ISO 8601)"):
            validate.parse_moment(bad, "--since", now)
    with pytest.raises(InvalidArgument, match="not an ISO 8601 time"):
        validate.parse_moment("2026-13-01", "--since", now)


def test_statuses_and_cursors_of_list_runs_are_checked():
    from celery_durable.runs.stored_runs import cursor_of, parse_cursor, parse_statuses
    from celery_durable.store import RunSummary

    assert parse_statuses("failed, Waiting,failed") == ("FAILED", "WAITING")
    assert parse_statuses(["cancelled"]) == ("CANCELLED",)
    with pytest.raises(InvalidArgument, match="status='done' is not a run status: use pending"):
        parse_statuses("failed,done")
    nothing = ("started_at", "finished_at", "wait_signal", "error", "cancel_reason", "forked_from")
    run = RunSummary("r/1:é", "wf", "FAILED", 1, 3, 0, 1796119200.123456, **dict.fromkeys(nothing))
    assert parse_cursor(cursor_of(run)) == (1796119200.123456, "r/1:é")
    for bad in ("", "abc", cursor_of(run)[:-3] + "###"):
        with pytest.raises(InvalidArgument, match="is not a cursor given by list_runs"):
            parse_cursor(bad)
