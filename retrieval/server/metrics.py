"""Request counts and latencies for ``/metrics``, kept and written by prometheus_client.

Each app has its own :class:`prometheus_client.CollectorRegistry` (not the library's global one), so
several apps in one process (tests, or two servers in one program) count apart and never clash over
a metric name. The text is the Prometheus text format 0.0.4 (``generate_latest``), which /metrics answers
as ``text/plain; version=0.0.4``."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """``observe`` each answered request, ``reject`` each 429, set ``inflight``; ``render`` the text."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("retr_requests", "HTTP requests answered, by endpoint, method and status.",
                                ["endpoint", "method", "status"], registry=self.registry)
        self.latency = Histogram("retr_request_duration_seconds",
                                 "Time to answer a request, by endpoint and retriever.",
                                 ["endpoint", "retriever"], buckets=BUCKETS, registry=self.registry)
        self.rejected = Counter("retr_rejected", "Requests refused with 429 because --max-inflight were running.",
                                ["endpoint"], registry=self.registry)
        self._inflight = Gauge("retr_inflight_requests", "Requests being answered now.", registry=self.registry)
        self._n = 0

    def observe(self, endpoint: str, method: str, status: int, retriever: str, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint, retriever).observe(seconds)

    def reject(self, endpoint: str) -> None:
        self.rejected.labels(endpoint).inc()

    @property
    def inflight(self) -> int:
        return self._n

    @inflight.setter
    def inflight(self, n: int) -> None:  # set by guard.Admission under its lock
        self._n = n
        self._inflight.set(n)

    def render(self) -> str:
        return generate_latest(self.registry).decode("utf-8")
