"""unicore_devcluster.launcher.free_port: ports for the control plane's and the real node's components."""

from __future__ import annotations

import socket

from unicore_devcluster.launcher import EPHEMERAL_RANGE, free_port


def test_ports_come_from_below_the_ephemeral_range_and_are_free_on_every_address() -> None:
    """A component binds its port seconds after the pick; in the ephemeral range an outgoing connection of this busy
    host could take it meanwhile ("address already in use": the scheduler of a real-node test run failed so)."""
    low = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= port < min(low, 30000) for port in ports), ports
    assert len(ports) > 1  # not one fixed sequence
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", port))  # noqa: S104
