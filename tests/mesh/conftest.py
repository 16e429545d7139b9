"""Fixtures for the simulated-mesh tests: every test runs in a send/recv mailbox of its own,
and a send it leaves unreceived fails it."""
import pytest

from tessera_ref import dist


@pytest.fixture(autouse=True)
def _own_mailbox():
    with dist.mailbox_scope():
        yield
