"""Fixtures for the simulated-mesh tests: every test starts with an empty send/recv mailbox."""
import pytest

from tessera_ref.dist import collectives


@pytest.fixture(autouse=True)
def _empty_mailbox():
    yield
    collectives._MAILBOX.clear()
