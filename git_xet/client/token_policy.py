"""Whether a credential may travel to a URL at all: over https, yes; over plain http only to
this machine (loopback: 127.0.0.0/8, ::1, `localhost`), where nobody on a network can read it.

Which credential belongs to which store is decided where tokens are configured
(agent/endpoints.py); this is the transport rule every sender applies on top of that.
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit


def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or an IP literal, brackets allowed) is this machine's loopback."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.partition("%")[0])  # an IPv6 zone id is not part of it
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


@functools.lru_cache(maxsize=64)
def may_send_credentials(url: str) -> bool:
    """Whether a bearer token or password may be sent to `url`: https anywhere, plain http only
    to loopback, nothing else (a token sent over plain http is readable on every hop).
    Remembered (it depends on the URL alone): every request to a store asks it."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return True
    try:
        host = parts.hostname or ""
    except ValueError:
        return False
    return scheme == "http" and is_loopback_host(host)


def plain_http_refusal(url: str, source: str) -> str:
    """The message for a token that `may_send_credentials` keeps from `url` (names no secret)."""
    return (
        f"refusing to send the XET token ({source}) to {url} over plain http: tokens travel only over "
        "https, or plain http to this machine (127.0.0.1, ::1, localhost); give the store's https URL "
        "(put `git xet serve` behind a TLS proxy, see the README's Security section)"
    )
