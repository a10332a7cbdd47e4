"""Request counts and latencies in the Prometheus text format (version 0.0.4)."""
from __future__ import annotations

import bisect
import threading
from typing import Dict, Tuple

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self.requests: Dict[Tuple[str, str, str], int] = {}                 # endpoint, method, status
        self.latency: Dict[Tuple[str, str], list] = {}                     # endpoint, retriever -> buckets+sum+n
        self.rejected: Dict[str, int] = {}
        self.inflight = 0

    def observe(self, endpoint: str, method: str, status: int, retriever: str, seconds: float) -> None:
        with self._lock:
            key = (endpoint, method, str(status))
            self.requests[key] = self.requests.get(key, 0) + 1
            h = self.latency.get((endpoint, retriever))
            if h is None:
                h = self.latency[(endpoint, retriever)] = [[0] * len(BUCKETS), 0.0, 0]
            i = bisect.bisect_left(BUCKETS, seconds)
            if i < len(BUCKETS):
                h[0][i] += 1
            h[1] += seconds
            h[2] += 1

    def reject(self, endpoint: str) -> None:
        with self._lock:
            self.rejected[endpoint] = self.rejected.get(endpoint, 0) + 1

    def render(self) -> str:
        out = ["# HELP retr_requests_total HTTP requests answered, by endpoint, method and status.",
               "# TYPE retr_requests_total counter"]
        with self._lock:
            for (e, m, s), n in sorted(self.requests.items()):
                out.append(f'retr_requests_total{{endpoint="{_label(e)}",method="{m}",status="{s}"}} {n}')
            out += ["# HELP retr_request_duration_seconds Time to answer a request, by endpoint and retriever.",
                    "# TYPE retr_request_duration_seconds histogram"]
            for (e, r), (b, total, n) in sorted(self.latency.items()):
                lab = f'endpoint="{_label(e)}",retriever="{_label(r)}"'
                acc = 0
                for le, c in zip(BUCKETS, b):
                    acc += c
                    out.append(f'retr_request_duration_seconds_bucket{{{lab},le="{le:g}"}} {acc}')
                out.append(f'retr_request_duration_seconds_bucket{{{lab},le="+Inf"}} {n}')
                out.append(f"retr_request_duration_seconds_sum{{{lab}}} {total:.6f}")
                out.append(f"retr_request_duration_seconds_count{{{lab}}} {n}")
            out += ["# HELP retr_rejected_total Requests refused with 429 because --max-inflight were running.",
                    "# TYPE retr_rejected_total counter"]
            for e, n in sorted(self.rejected.items()):
                out.append(f'retr_rejected_total{{endpoint="{_label(e)}"}} {n}')
            out += ["# HELP retr_inflight_requests Requests being answered now.",
                    "# TYPE retr_inflight_requests gauge", f"retr_inflight_requests {self.inflight}"]
        return "\n".join(out) + "\n"
