"""Settings: precedence, clamping with a warning, and fail-fast validation."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import AsyncIterator

import pytest
from celery import Celery

from celery_durable import ConfigurationError, Durable
from celery_durable.core.config import DurableConfig
from celery_durable.core.settings import SETTINGS

DURATIONS = [s.name for s in SETTINGS if s.duration]


def test_defaults():
    config = DurableConfig.from_sources({}, {}, {})
    assert (
        config.lock_timeout,
        config.poll_interval,
        config.max_attempts,
        config.retry_backoff,
    ) == (30.0, 1.0, 3, 5.0)
    assert config.namespace == "default" and config.table_prefix == "durable_"
    assert config.database_url.startswith("sqlite:///")
    assert config.signal_queue == "celery_durable.signals"


def test_signal_queue_follows_the_namespace_unless_set():
    assert DurableConfig.from_sources({"namespace": "shop"}, {}, {}).signal_queue == (
        "celery_durable.signals.shop"
    )
    explicit = DurableConfig.from_sources({"namespace": "shop", "signal_queue": "sig"}, {}, {})
    assert explicit.signal_queue == "sig"


def test_keywords_beat_env_beat_app_conf():
    conf = {"durable_lock_timeout": 40, "durable_max_attempts": 7, "durable_namespace": "conf"}
    env = {"CELERY_DURABLE_LOCK_TIMEOUT": "50", "CELERY_DURABLE_NAMESPACE": "env"}
    config = DurableConfig.from_sources({"namespace": "kw"}, conf, env)
    assert config.namespace == "kw"
    assert config.lock_timeout == 50.0
    assert config.max_attempts == 7


def test_out_of_range_values_are_clamped_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="celery_durable.config"):
        config = DurableConfig.from_sources(
            {}, {"durable_poll_interval": 0.0001}, {"CELERY_DURABLE_MAX_ATTEMPTS": "0"}
        )
    assert config.poll_interval == 0.05 and config.max_attempts == 1
    assert "CELERY_DURABLE_MAX_ATTEMPTS" in caplog.text
    assert "app.conf.durable_poll_interval" in caplog.text


def test_bad_values_name_the_setting():
    with pytest.raises(ConfigurationError, match="CELERY_DURABLE_LOCK_TIMEOUT"):
        DurableConfig.from_sources({}, {}, {"CELERY_DURABLE_LOCK_TIMEOUT": "soon"})
    with pytest.raises(ConfigurationError, match="durable_table_prefix"):
        DurableConfig.from_sources({"table_prefix": "drop table;"}, {}, {})
    with pytest.raises(ConfigurationError, match="unknown celery_durable setting.*lock_timout"):
        DurableConfig.from_sources({"lock_timout": 3}, {}, {})


def test_validate_fails_fast_on_a_config_built_in_code():
    with pytest.raises(ConfigurationError, match="durable_lock_timeout=0.5"):
        DurableConfig(lock_timeout=0.5).validate()
    with pytest.raises(ConfigurationError, match="durable_max_attempts must be a int"):
        DurableConfig(max_attempts="3").validate()  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="must exceed durable_poll_interval"):
        DurableConfig(lock_timeout=2, poll_interval=5).validate()


def test_validate_judges_the_values_given_not_the_clamped_ones(monkeypatch, caplog):
    """Bug: poll_interval=0 and max_attempts=0 were clamped with a warning, then validate()
    passed, judging the clamped 0.05 and 1, although the README says it fails fast."""
    for name in ("POLL_INTERVAL", "MAX_ATTEMPTS", "LOCK_TIMEOUT"):
        monkeypatch.delenv(f"CELERY_DURABLE_{name}", raising=False)
    app = Celery("conf-clamped", broker="memory://")
    app.conf.durable_poll_interval = 0
    app.conf.durable_max_attempts = 0
    durable = Durable(app, database_url="sqlite:///:memory:")
    with caplog.at_level(logging.WARNING, logger="celery_durable.config"):
        config = durable.config  # built as the README says: clamped, with a warning
    assert (config.poll_interval, config.max_attempts) == (0.05, 1)
    assert "app.conf.durable_poll_interval=0" in caplog.text
    with pytest.raises(ConfigurationError) as refused:
        config.validate()
    message = str(refused.value)
    # Every value out of range, as given, with where it came from and what is allowed.
    assert "durable_poll_interval=0 (app.conf.durable_poll_interval=0)" in message
    assert "at least 0.05 s" in message
    assert "durable_max_attempts=0 (app.conf.durable_max_attempts=0)" in message
    assert "at least 1" in message
    assert "durable_poll_interval=0.05" not in message  # never the clamped values
    assert "durable_max_attempts=1" not in message
    # A value set in code after the merge is what validate() judges.
    config.poll_interval, config.max_attempts = 0.5, 2
    assert config.validate() is config


def test_a_lock_timeout_out_of_range_is_named_as_given(caplog):
    """Bug: lock_timeout=-5 was clamped to 1.0, then refused as "durable_lock_timeout=1.0
    must exceed durable_poll_interval=1.0", a value nobody gave."""
    with pytest.raises(ConfigurationError) as refused:
        DurableConfig.from_sources({"lock_timeout": -5}, {}, {})
    message = str(refused.value)
    assert "durable_lock_timeout=-5 (Durable(lock_timeout=-5), clamped to 1)" in message
    assert "must exceed durable_poll_interval=1" in message
    assert "1.0 must exceed" not in message
    # In range once clamped, so it is built (with a warning); validate() still refuses it.
    with caplog.at_level(logging.WARNING, logger="celery_durable.config"):
        config = DurableConfig.from_sources(
            {"poll_interval": 0.5}, {}, {"CELERY_DURABLE_LOCK_TIMEOUT": "-5s"}
        )
    assert config.lock_timeout == 1.0 and "CELERY_DURABLE_LOCK_TIMEOUT='-5s'" in caplog.text
    given = r"durable_lock_timeout=-5 \(CELERY_DURABLE_LOCK_TIMEOUT='-5s'\)"
    with pytest.raises(ConfigurationError, match=given + " is out of range: .* at least 1 s"):
        config.validate()


def test_every_duration_setting_takes_the_same_forms():
    """Bug: durable_lock_timeout="30s" was refused while durable_retention took "30d"."""
    assert {"lock_timeout", "poll_interval", "dispatch_grace", "retention"} <= set(DURATIONS)
    assert {"retry_backoff", "max_retry_backoff", "deferred_max_age"} <= set(DURATIONS)
    forms = [
        (120, 120.0),
        (120.0, 120.0),
        ("120", 120.0),
        (" 120s ", 120.0),
        ("2m", 120.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("2h", 7200.0),
        ("30d", 30 * 86400.0),
        ("1w", 7 * 86400.0),
        (dt.timedelta(minutes=2), 120.0),
    ]
    for name in DURATIONS:
        minimum = next(s.minimum for s in SETTINGS if s.name == name) or 0.0
        for given, seconds in forms:
            # lock_timeout must stay over poll_interval, so both move together.
            other = {"poll_interval": 0.05} if name == "lock_timeout" else {}
            other = {"lock_timeout": 10**7} if name == "poll_interval" else other
            sources = [({name: given, **other}, {}, {}), (other, {f"durable_{name}": given}, {})]
            if isinstance(given, str):
                sources.append((other, {}, {f"CELERY_DURABLE_{name.upper()}": given}))
            for keywords, app_conf, environ in sources:
                config = DurableConfig.from_sources(keywords, app_conf, environ)
                assert config.given[name].value == seconds, (name, given, config.given[name])
                assert getattr(config, name) == max(seconds, minimum)


@pytest.mark.parametrize("given", ["soon", "30x", "s", "5 minutes", float("nan"), "inf", True, []])
def test_a_value_that_is_not_a_duration_names_the_setting_and_the_forms(given):
    for name in DURATIONS:
        with pytest.raises(ConfigurationError) as refused:
            DurableConfig.from_sources({}, {f"durable_{name}": given}, {})
        message = str(refused.value)
        assert f"app.conf.durable_{name}=" in message and f"durable_{name}" in message
        assert "30s" in message and "timedelta" in message


def test_counts_refuse_fractions_instead_of_truncating_them():
    with pytest.raises(ConfigurationError, match=r"durable_max_attempts=2.5.*whole number"):
        DurableConfig.from_sources({}, {"durable_max_attempts": 2.5}, {})
    assert DurableConfig.from_sources({}, {"durable_max_attempts": 4.0}, {}).max_attempts == 4


def test_every_setting_is_a_field_with_its_default():
    # signal_queue's empty default means "derive it from the namespace" (from_sources).
    fields = {f.name: f.default for f in dataclasses.fields(DurableConfig) if f.init}
    settings = {s.name: s.default for s in SETTINGS}
    assert fields.pop("signal_queue") == "celery_durable.signals"
    assert settings.pop("signal_queue") == ""
    assert fields == settings
    assert all(s.kind is float for s in SETTINGS if s.duration)


def test_durable_reads_app_conf_on_first_use(monkeypatch):
    monkeypatch.delenv("CELERY_DURABLE_NAMESPACE", raising=False)
    app = Celery("conf-test", broker="memory://")
    durable = Durable(app, database_url="sqlite:///:memory:")
    app.conf.durable_namespace = "late"  # set after Durable(): still taken
    assert durable.config.namespace == "late"
    with pytest.raises(ConfigurationError, match="lock_timout"):
        Durable(app, lock_timout=3)


def test_keywords_are_checked_against_the_merged_sources(monkeypatch):
    """Bug: Durable(app, poll_interval=40) raised although lock_timeout=120 came from
    app.conf or the environment: the cross-field check ran on the keywords alone."""
    monkeypatch.delenv("CELERY_DURABLE_LOCK_TIMEOUT", raising=False)
    monkeypatch.delenv("CELERY_DURABLE_POLL_INTERVAL", raising=False)
    app = Celery("conf-merge", broker="memory://")
    app.conf.durable_lock_timeout = 120
    durable = Durable(app, poll_interval=40)
    assert (durable.config.lock_timeout, durable.config.poll_interval) == (120.0, 40.0)
    monkeypatch.setenv("CELERY_DURABLE_LOCK_TIMEOUT", "90")
    from_env = Durable(Celery("conf-env", broker="memory://"), poll_interval=40)
    assert from_env.config.lock_timeout == 90.0
    both = (
        r"durable_lock_timeout=90 \(CELERY_DURABLE_LOCK_TIMEOUT='90'\) must exceed "
        r"durable_poll_interval=95 \(Durable\(poll_interval=95\)\)"
    )
    with pytest.raises(ConfigurationError, match=both):
        _ = Durable(Celery("conf-bad", broker="memory://"), poll_interval=95).config
    with pytest.raises(ConfigurationError, match="poll_interval"):
        Durable(Celery("conf-type", broker="memory://"), poll_interval="soon")


def test_database_urls_that_cannot_work_name_the_fix(monkeypatch):
    from celery_durable.store.db import connections

    app = Celery("urls", broker="memory://")
    with pytest.raises(ConfigurationError, match=r"use a postgresql\+psycopg:// URL"):
        _ = Durable(app, database_url="postgres://postgres@127.0.0.1/test").runtime.store
    with pytest.raises(ConfigurationError, match="only postgresql"):
        _ = Durable(app, database_url="mysql://root@127.0.0.1/test").runtime.store
    # Without the postgres extra, psycopg is missing: the error names the extra to install.
    monkeypatch.setattr(connections, "psycopg", None)
    with pytest.raises(ConfigurationError, match=r"celery-durable\[postgres\]"):
        _ = Durable(app, database_url="postgresql+psycopg://postgres@127.0.0.1/test").runtime.store


def test_async_generators_are_refused_at_registration_and_async_defs_are_not():
    durable = Durable(Celery("asyncs", broker="memory://"))

    async def stream() -> AsyncIterator[int]:
        yield 1

    async def fetch() -> int:
        return 1

    with pytest.raises(TypeError, match="an async generator can't be a workflow or a step"):
        durable.step(stream)
    with pytest.raises(TypeError, match=r"workflow .*stream: an async generator"):
        durable.workflow(stream)
    assert not durable.steps and not durable.workflows
    assert durable.step(fetch).is_async
    assert durable.workflow(fetch).definition.is_async


def test_a_framework_s_database_setting_gives_the_url_only_when_no_source_does(monkeypatch):
    from celery_durable.core import config as config_module  # noqa: PLC0415

    def framework(alias: str) -> tuple[str, str]:
        return f"sqlite:////tmp/{alias}.sqlite3", f"DATABASES[{alias!r}]"

    monkeypatch.setattr(config_module, "DATABASE_URL_SOURCES", [framework])
    monkeypatch.delenv("CELERY_DURABLE_DATABASE_URL", raising=False)
    found = DurableConfig.from_sources({}, {"durable_database": "reports"}, {})
    assert found.database_url == "sqlite:////tmp/reports.sqlite3"
    assert found.given["database_url"].origin == "DATABASES['reports']"
    given = DurableConfig.from_sources({"database_url": "sqlite:////tmp/mine.sqlite3"}, {}, {})
    assert given.database_url == "sqlite:////tmp/mine.sqlite3"
    # A producer whose store comes from the framework's settings has a database: its
    # signals are stored first, not sent through the broker alone.
    app = Celery("framework", broker="memory://")
    app.conf.durable_database = "reports"
    assert Durable(app).database_configured
