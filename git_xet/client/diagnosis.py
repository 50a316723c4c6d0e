"""One diagnosis of every way reaching a store can fail: what happened, and what to check.

The agent's last word on a failed transfer and `git xet doctor` both say it from here, so a
user who runs doctor after a failed push reads the same advice (an untrusted certificate is
an `SSL_CERT_FILE` matter in both places, not "start the server" in one of them).

It reads the error's chain (`__cause__`, `__context__`): whichever HTTP client made the
request, the operating system's or the TLS library's own error is somewhere in it, even where
a layer re-raised its own class `from None` (that hides the chain from tracebacks, not from
`__context__`).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

# How a failure to reach a store is classified; each kind has one piece of advice.
REFUSED = "refused"
NAME = "name"
CERTIFICATE = "certificate"
TLS = "tls"
TIMEOUT = "timeout"
UNREACHABLE = "unreachable"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def failure_kind(exc: BaseException) -> str | None:
    """The kind of connection failure behind `exc`, or None when it is not one (an HTTP
    refusal, a broken answer, a bug)."""
    for link in _chain(exc):
        if isinstance(link, ConnectionRefusedError):
            return REFUSED
        if isinstance(link, socket.gaierror):
            return NAME
        if isinstance(link, ssl.SSLCertVerificationError):
            return CERTIFICATE
        if isinstance(link, ssl.SSLError):
            return TLS
        if isinstance(link, TimeoutError):
            return TIMEOUT
        if isinstance(link, OSError) and link.errno is not None and link.errno in _UNREACHABLE_ERRNOS:
            return UNREACHABLE
    return None


def _unreachable_errnos() -> frozenset[int]:
    import errno

    names = ("ENETUNREACH", "EHOSTUNREACH", "EHOSTDOWN", "ENETDOWN", "EADDRNOTAVAIL")
    return frozenset(getattr(errno, name) for name in names if hasattr(errno, name))


_UNREACHABLE_ERRNOS = _unreachable_errnos()


def advice(kind: str, store: str) -> str:
    """What to check, for a store (a URL) that failed in this way."""
    if kind == REFUSED:
        return (
            f"nothing accepts connections at {store}: check that the server is running there and that the "
            "address and port are the ones it listens on (`git xet doctor` checks both)"
        )
    if kind == NAME:
        return f"the host name of {store} does not resolve: check the store's URL (xet.endpoint) and your DNS"
    if kind == CERTIFICATE:
        return (
            f"the TLS certificate of {store} is not trusted: if your organisation signs it with its own CA, "
            "set SSL_CERT_FILE to that CA's certificate (PEM); check the host name in the URL matches the certificate"
        )
    if kind == TLS:
        return f"the TLS handshake with {store} failed: check that the URL is https:// only where the server speaks TLS"
    if kind == TIMEOUT:
        return f"{store} did not answer in time: check the address, a firewall, or a proxy (HTTPS_PROXY, NO_PROXY)"
    return f"{store} cannot be reached from here: check the network, a VPN, or a proxy (HTTPS_PROXY, NO_PROXY)"


def diagnose(exc: BaseException, store: str) -> str | None:
    """One line of advice for a failure to reach `store`, or None when `exc` is not one."""
    kind = failure_kind(exc)
    return None if kind is None else advice(kind, store)
