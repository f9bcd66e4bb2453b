import pytest
from cryptography.fernet import Fernet

TEST_SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture(autouse=True)
def tool_secret_keys(settings):
    """Tests run with DEBUG off, where provider secrets need a configured key."""
    settings.TOOL_SECRET_KEYS = [TEST_SECRET_KEY]
