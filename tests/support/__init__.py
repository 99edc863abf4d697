"""Test support: real services, real worker subprocesses, deadline-based waiting."""
