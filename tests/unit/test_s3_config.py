"""S3Config holds credentials: its text form (repr, str, a traceback's locals) shows which
settings are set, never the secret key or the session token."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from git_xet.storage.s3 import S3Config

_secrets = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", min_size=12, max_size=40)


@given(secret=_secrets, token=_secrets)
def test_the_text_of_a_config_names_no_secret(secret: str, token: str) -> None:
    config = S3Config(endpoint_url="http://127.0.0.1:8333", access_key="AKIDEXAMPLE", secret_key=secret, region="us-east-1", session_token=token)
    for text in (repr(config), str(config), f"{config}", repr([config])):
        assert secret not in text and token not in text
        assert "AKIDEXAMPLE" in text and "http://127.0.0.1:8333" in text  # what is not secret still helps debugging
    assert config.secret_key == secret and config.session_token == token  # hidden from text only


def test_unset_secrets_show_as_unset() -> None:
    assert "secret_key=None" in repr(S3Config(access_key="AKIDEXAMPLE"))
