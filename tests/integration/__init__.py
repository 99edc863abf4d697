"""Integration tests: real worker subprocesses of tests/apps, the session's broker, outages
(proxies, killed connections), Flower, the browser, PgBouncer, the examples, and smoke runs
of the benchmark and the chaos run."""
