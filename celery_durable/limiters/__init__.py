"""Limiters: fleet-wide concurrency and rate limits on steps and workflows (slots, tokens,
waiters), from the statements to the ``durable limiters`` report."""
