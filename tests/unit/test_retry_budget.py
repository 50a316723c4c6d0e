"""client/retry.py: every call to one store draws on one retry budget (an Outage), and gives up
with advice; client/diagnosis.py: the advice, from the error's chain.

Time is simulated: `time.sleep` advances a fake clock the Outage reads, so a 35 s budget costs
nothing to test and no assertion depends on the machine's speed."""

from __future__ import annotations

import socket
import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.client import retry
from git_xet.client.diagnosis import CERTIFICATE, NAME, REFUSED, TIMEOUT, diagnose, failure_kind
from git_xet.client.errors import TransferError
from git_xet.client.http_types import ConnectError, ReadError
from git_xet.client.retry import Outage, RetryPolicy, with_retries


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(retry.time, "sleep", fake.sleep)
    return fake


def _refused() -> ConnectError:
    """A transport error as the HTTP client raises it: its own class, the OS error only in the
    chain (raised `from None` inside the handler, as client/http_client.py does)."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except OSError as exc:
            raise ConnectError(f"cannot connect to 127.0.0.1:9: {exc}") from None
    except ConnectError as err:
        return err


def _failing(exc: BaseException, log: list[float], clock: FakeClock):
    def call() -> None:
        log.append(clock.now)
        raise exc

    return call


@given(calls=st.integers(1, 12), budget=st.floats(1, 60), base=st.floats(0.01, 3))
def test_all_calls_to_a_store_give_up_once_the_outage_has_used_its_budget(calls: int, budget: float, base: float) -> None:
    clock = FakeClock()
    retry.time.sleep, saved = clock.sleep, retry.time.sleep  # (the fixture is function-scoped; hypothesis runs many examples)
    try:
        outage = Outage(clock)
        outage.reached = True  # the store answered earlier in this push
        policy = RetryPolicy(max_attempts=1000, base_delay=base, budget_seconds=budget)
        started = clock.now
        for _ in range(calls):  # one call after another, as a push's dedup query then its xorbs
            with pytest.raises(TransferError, match="failed after"):
                with_retries("a call", _failing(ReadError("reset"), [], clock), policy, outage)
        # The whole push, not each call, is bounded by the budget.
        assert clock.now - started <= budget + 1e-6
    finally:
        retry.time.sleep = saved


def test_a_store_never_reached_fails_fast_with_what_to_check(clock: FakeClock) -> None:
    outage = Outage(clock)
    attempts: list[float] = []
    with pytest.raises(TransferError) as failed:
        with_retries("upload of xorb ab12", _failing(_refused(), attempts, clock), RetryPolicy(), outage, "https://xet.example.com")
    assert attempts[-1] - attempts[0] <= RetryPolicy().unreached_seconds
    message = str(failed.value)
    assert "nothing accepts connections at https://xet.example.com" in message and "git xet doctor" in message


def test_success_ends_an_outage_and_the_next_one_has_the_whole_budget(clock: FakeClock) -> None:
    outage = Outage(clock)
    outage.reached = True
    policy = RetryPolicy(max_attempts=1000, base_delay=1.0, budget_seconds=20)
    failures = iter(range(5))

    def flaky() -> str:
        if next(failures, None) is not None:
            raise ReadError("reset")
        return "ok"

    assert with_retries("a call", flaky, policy, outage) == "ok"
    begun = clock.now
    with pytest.raises(TransferError):
        with_retries("a call", _failing(ReadError("reset"), [], clock), policy, outage)
    assert clock.now - begun == pytest.approx(20, abs=1e-6)


def test_an_http_refusal_is_an_answer_and_is_not_retried(clock: FakeClock) -> None:
    outage = Outage(clock)
    calls: list[float] = []
    with pytest.raises(TransferError, match="denied"):
        with_retries("a call", _failing(TransferError("denied", retryable=False, status=403), calls, clock), RetryPolicy(), outage)
    assert len(calls) == 1 and outage.reached


def test_notices_are_shown_once_per_outage_then_every_few_seconds(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage(clock)
    outage.reached = True
    policy = RetryPolicy(max_attempts=1000, base_delay=0.5, max_delay=0.5, budget_seconds=30)
    with caplog.at_level("WARNING", logger="git_xet.client"), pytest.raises(TransferError):
        with_retries("a call", _failing(ReadError("reset"), [], clock), policy, outage)
    notices = [r for r in caplog.records if "retry" in r.getMessage()]
    assert 1 <= len(notices) <= 30 / Outage.NOTICE_EVERY + 1


def _wrapped(inner: BaseException, depth: int, hide: bool) -> BaseException:
    """`inner` under `depth` layers of our own errors, each raised from the one below (`hide`:
    `from None`, which keeps it only as __context__)."""
    current = inner
    for level in range(depth):
        try:
            try:
                raise current
            except BaseException as exc:
                if hide:
                    raise ConnectError(f"layer {level}") from None
                raise ConnectError(f"layer {level}") from exc
        except ConnectError as err:
            current = err
    return current


@given(depth=st.integers(0, 4), hide=st.booleans())
def test_the_kind_is_found_however_deep_the_os_error_lies(depth: int, hide: bool) -> None:
    cases = {
        REFUSED: ConnectionRefusedError(111, "refused"),
        NAME: socket.gaierror(-2, "Name or service not known"),
        CERTIFICATE: ssl.SSLCertVerificationError(1, "certificate verify failed"),
        TIMEOUT: TimeoutError("timed out"),
    }
    for kind, inner in cases.items():
        assert failure_kind(_wrapped(inner, depth, hide)) == kind


def test_an_untrusted_certificate_is_an_ssl_cert_file_matter_not_a_stopped_server() -> None:
    advice = diagnose(_wrapped(ssl.SSLCertVerificationError(1, "certificate verify failed"), 2, True), "https://xet.example.com")
    assert advice is not None and "SSL_CERT_FILE" in advice and "running" not in advice


def test_an_error_that_is_not_a_connection_failure_gets_no_advice() -> None:
    assert diagnose(ValueError("bad"), "https://x") is None
    assert diagnose(TransferError("denied", status=403), "https://x") is None
