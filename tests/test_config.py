"""Settings: precedence, clamping with a warning, and fail-fast validation."""

from __future__ import annotations

import logging

import pytest
from celery import Celery

from celery_durable import ConfigurationError, Durable
from celery_durable.config import DurableConfig


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
    with pytest.raises(ConfigurationError, match="durable_lock_timeout=90.0 must exceed"):
        _ = Durable(Celery("conf-bad", broker="memory://"), poll_interval=95).config
    with pytest.raises(ConfigurationError, match="poll_interval"):
        Durable(Celery("conf-type", broker="memory://"), poll_interval="soon")


def test_database_urls_that_cannot_work_name_the_fix(monkeypatch):
    from celery_durable.store import connections

    app = Celery("urls", broker="memory://")
    with pytest.raises(ConfigurationError, match=r"use a postgresql\+psycopg:// URL"):
        _ = Durable(app, database_url="postgres://postgres@127.0.0.1/test").store
    with pytest.raises(ConfigurationError, match="only postgresql"):
        _ = Durable(app, database_url="mysql://root@127.0.0.1/test").store
    # Without the postgres extra, psycopg is missing: the error names the extra to install.
    monkeypatch.setattr(connections, "psycopg", None)
    with pytest.raises(ConfigurationError, match=r"celery-durable\[postgres\]"):
        _ = Durable(app, database_url="postgresql+psycopg://postgres@127.0.0.1/test").store


def test_async_workflows_and_steps_are_refused_at_registration():
    durable = Durable(Celery("asyncs", broker="memory://"))

    async def fetch() -> int:
        return 1

    with pytest.raises(TypeError, match="async def functions are not supported"):
        durable.step(fetch)
    with pytest.raises(TypeError, match=r"workflow .*fetch: async def"):
        durable.workflow(fetch)
    assert not durable.steps and not durable.workflows
