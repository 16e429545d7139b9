import pytest
from toy_helpers import write_toy_distribution


@pytest.fixture(scope="session")
def toy_path(tmp_path_factory):
    return write_toy_distribution(tmp_path_factory.mktemp("site"))
