"""docker-compose.yml publishes its services on this machine only: Postgres's password is
``postgres``, Redis has none and Flower's API is unauthenticated."""

from __future__ import annotations

import yaml

from tests.support.workers import ROOT


def published_ports() -> dict[str, list[object]]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {name: list(service.get("ports", [])) for name, service in compose["services"].items()}


def host_ip(port: object) -> str | None:
    """The address a published port is bound to (None: every interface)."""
    if isinstance(port, dict):  # the long syntax
        return port.get("host_ip")
    parts = str(port).split(":")
    return parts[0] if len(parts) == 3 else None


def test_every_published_port_is_bound_to_loopback():
    ports = published_ports()
    assert {"postgres", "redis", "flower"} <= {name for name, listed in ports.items() if listed}
    unbound = {
        name: [port for port in listed if host_ip(port) != "127.0.0.1"]
        for name, listed in ports.items()
    }
    assert {name: listed for name, listed in unbound.items() if listed} == {}
