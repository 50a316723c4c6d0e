"""The server's Prometheus metrics (GET /metrics, behind the admin token: see operator.py).

Two sources:
- per-process counters and a latency histogram (prometheus-client), moved by each request.
  With several worker processes (server/workers.py) every process writes its values to files
  in $PROMETHEUS_MULTIPROC_DIR (prometheus-client's multiprocess mode: `serve` makes a private
  one when it forks workers) and a scrape of any worker sums them all. Each replica exposes its
  own: Prometheus sums them across instances.
- store-wide figures read from the index at scrape time (StoreCollector): xorbs, shards, stored
  and deduplicated bytes, gc runs and bytes freed. Every replica reports the same values.

prometheus-client decides at import whether it runs in multiprocess mode: this module is
imported only once `serve` has set the directory (app.create_app imports it).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from ..storage import errors as storage
from ..storage.history import History
from ..storage.s3 import S3Error

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# The answers that issue and commit an upload grant (grants.py), counted as grant events.
GRANT_ANSWERS = {
    ("/v1/xorb-grants/{prefix}/{xorb}", 201): "issued",
    ("/v1/xorb-commits/{prefix}/{xorb}/grant/{grant}", 200): "committed",
}

REQUESTS = Counter("git_xet_http_requests", "HTTP requests answered, by route template, method and status", ["route", "method", "status"])
LATENCY = Histogram(
    "git_xet_http_request_duration_seconds",
    "Time from a request's arrival to its answer's last byte, by route template",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
BYTES_IN = Counter("git_xet_http_received_bytes", "Request body bytes received, by route template", ["route"])
BYTES_OUT = Counter("git_xet_http_sent_bytes", "Response body bytes sent, by route template", ["route"])
GRANTS = Counter("git_xet_upload_grants", "Upload grants issued, committed, and expired unused", ["event"])
STORE_ERRORS = Counter("git_xet_storage_errors", "Errors of the index database and of the object store answered as 5xx", ["store"])


# The labelled series each (route template, method, status) moves, looked up once: labels()
# checks and joins its values under a lock at every call, 5 of the 7.4 us observe_request
# took per request. As many entries as there are series (route templates, methods, statuses).
_SERIES: dict[tuple[str, str, int], tuple[Counter, Histogram, Counter, Counter]] = {}


def observe_request(route: str, method: str, status: int, seconds: float, bytes_in: int, bytes_out: int) -> None:
    """One answered request (called by the access log middleware)."""
    series = _SERIES.get((route, method, status))
    if series is None:
        series = _SERIES[(route, method, status)] = (REQUESTS.labels(route, method, str(status)), LATENCY.labels(route, method), BYTES_IN.labels(route), BYTES_OUT.labels(route))
    requests, latency, received, sent = series
    requests.inc()
    latency.observe(seconds)
    if bytes_in:
        received.inc(bytes_in)
    if bytes_out:
        sent.inc(bytes_out)
    event = GRANT_ANSWERS.get((route, status))
    if event is not None:
        grant_event(event)


def grant_event(event: str, count: int = 1) -> None:
    """`event`: issued, committed or expired."""
    GRANTS.labels(event).inc(count)


def storage_error(exc: BaseException) -> None:
    """Count an error that failed a request, as the index's or the object store's."""
    if isinstance(exc, (storage.Unavailable, sqlite3.Error)):
        STORE_ERRORS.labels("index").inc()
    elif isinstance(exc, (S3Error, storage.Damaged, storage.StorageFull, OSError)):
        STORE_ERRORS.labels("objects").inc()


class StoreCollector(Collector):
    """Store-wide figures from the index, read at each scrape (a few aggregate queries over the
    xorbs, shards and files tables: Prometheus's scrape interval bounds their cost)."""

    def __init__(self, history: History) -> None:
        self.history = history

    def collect(self) -> Iterator[Metric]:
        yield from self._read()

    def _read(self) -> list[Metric]:
        totals = self.history.totals()
        gc = self.history.gc_totals()
        figures: list[Metric] = []
        for name, doc, value in (
            ("git_xet_xorbs_stored", "Xorbs in the index", totals.xorbs),
            ("git_xet_shards_stored", "Shards in the index", totals.shards),
            ("git_xet_stored_bytes", "Bytes of the stored xorbs (compressed, as kept)", totals.stored_bytes),
            ("git_xet_logical_bytes", "Bytes of every repository's files, a file counted once per repository", totals.logical_bytes),
            ("git_xet_dedup_saved_bytes", "Logical bytes less the unpacked bytes of the stored chunks", totals.dedup_saved_bytes),
        ):
            figures.append(GaugeMetricFamily(name, doc, value=value))
        figures.append(CounterMetricFamily("git_xet_gc_runs", "gc runs recorded in the index", value=gc.runs))
        figures.append(CounterMetricFamily("git_xet_gc_freed_bytes", "Bytes gc runs freed", value=gc.freed_bytes))
        return figures


def exposition(store: StoreCollector) -> tuple[bytes, str]:
    """The text a scrape gets, and its content type: this process's (or, in multiprocess mode,
    every worker's) counters and the store's figures."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROC_ENV):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated
        registry.register(store)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    registry.register(store)
    return generate_latest(REGISTRY) + generate_latest(registry), CONTENT_TYPE_LATEST
