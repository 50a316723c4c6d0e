"""What the server writes, the client reads: error bodies (one builder, one parser), the
Authorization header (one parser on the server) and case-insensitive `X-Xet-*` lookups."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

import pytest

from git_xet.client.errors import TransferError, error_from_body
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.http_errors import refusal_error
from git_xet.core.http_headers import CAS_URL, FILE_HASH, LFS_MEDIA_TYPE, bearer, header_value
from git_xet.server.auth import presented_token
from git_xet.server.errors import RequestRefused, error_frame, error_response, lfs_error_response, retryable

MESSAGES = st.text(min_size=1, max_size=300)
CODES = st.none() | st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=20)


STATUSES = st.sampled_from([400, 401, 403, 404, 409, 413, 416, 500, 503, 507])


@given(STATUSES, MESSAGES, CODES)
def test_cas_error_bodies_read_back(status: int, message: str, code: str | None) -> None:
    response = error_response(RequestRefused(status, message, code))
    assert response.status_code == status and response.headers["cache-control"] == "no-store"
    body = error_from_body(bytes(response.body))
    assert (body.message, body.code) == (message, code)


@given(STATUSES, MESSAGES)
def test_lfs_error_bodies_read_back_in_git_lfs_shape(status: int, message: str) -> None:
    response = lfs_error_response(status, message)
    assert json.loads(response.body) == {"message": message}  # what git-lfs prints
    assert response.headers["content-type"].startswith(LFS_MEDIA_TYPE)
    assert ("lfs-authenticate" in response.headers) == (status == 401)
    assert error_from_body(bytes(response.body)).message == message


@given(STATUSES, MESSAGES, CODES)
def test_a_refusal_is_the_same_client_error_as_an_answer_and_as_a_stream_frame(status: int, message: str, code: str | None) -> None:
    """A refusal before the status line (a JSON answer) and after it (an NDJSON frame of
    POST /v2/shards) raise the same client error class with the same code."""
    refused = RequestRefused(status, message, code)
    answered = refusal_error("shard upload", status, bytes(error_response(refused).body), "")
    frame = error_frame(refused)
    assert frame["retryable"] is retryable(refused)
    with pytest.raises(TransferError) as streamed:
        HttpCasBackend._read_shard_frames(json.dumps(frame) + "\n")
    assert type(streamed.value) is type(answered) and streamed.value.code == answered.code == code
    assert message[:100] in str(streamed.value) and message[:100] in str(answered)


def test_an_unexpected_error_is_a_retryable_frame_without_details() -> None:
    frame = error_frame(None, "internal error registering the shard")
    assert frame == {"type": "error", "message": "internal error registering the shard", "retryable": True}
    with pytest.raises(TransferError) as streamed:
        HttpCasBackend._read_shard_frames(json.dumps(frame))
    assert streamed.value.retryable


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


@given(st.text(max_size=1000).filter(_not_json))
def test_bodies_that_are_not_json_are_kept_as_short_text(text: str) -> None:
    body = error_from_body(text.encode())
    assert body.message == text.strip()[:200] and body.code is None


@given(st.lists(st.integers()) | st.integers() | st.text())
def test_json_that_is_not_an_object_is_kept_as_text(value: object) -> None:
    raw = json.dumps(value)
    assert error_from_body(raw.encode()) == error_from_body(raw)
    assert error_from_body(raw).message == raw.strip()[:200]


TOKENS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", min_size=1, max_size=80)


@given(TOKENS, st.sampled_from(["Bearer", "bearer", "BEARER"]))
def test_bearer_tokens_are_presented_whatever_the_scheme_case(token: str, scheme: str) -> None:
    value = bearer(token)["Authorization"].replace("Bearer", scheme, 1)
    assert presented_token(value) == token
    assert presented_token(value, basic=True) == token


@given(st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), max_size=20), st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_basic_auth_presents_its_password_only_where_allowed(user: str, password: str) -> None:
    value = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    assert presented_token(value, basic=True) == password
    assert presented_token(value) is None  # CAS routes take bearer tokens only


@given(st.sampled_from(["", "Basic !!!", "Digest abc", "Token xyz", "Bearer"]))
def test_other_credentials_present_nothing(value: str) -> None:
    assert presented_token(value, basic=True) in (None, "")


@given(st.sampled_from([CAS_URL, FILE_HASH]), st.data())
def test_xet_headers_are_found_in_any_case(name: str, data: st.DataObject) -> None:
    spelled = "".join(c.upper() if data.draw(st.booleans()) else c.lower() for c in name)
    assert header_value({spelled: "v", "Other": "w"}, name) == "v"
    assert header_value({"Other": "w"}, name) is None and header_value(None, name) is None
