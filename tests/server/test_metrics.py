"""Issue #29: /metrics is written by prometheus_client, read back here with prometheus_client's own
text parser; each app counts in its own registry, so two apps in one process neither clash nor mix."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Q = "aspirin colorectal cancer"


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fam, name: str, **labels) -> float:
    got = [s.value for s in fam.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (name, labels, fam.samples)
    return got[0]


def test_metrics_parse_and_count_searches(server):
    before = families(server.get("/metrics").text)
    ep = "/v1/{index}/search"
    n0 = sum(s.value for s in before["retr_requests"].samples if s.name == "retr_requests_total" and s.labels ==
             {"endpoint": ep, "method": "POST", "status": "200"}) if "retr_requests" in before else 0.0
    for _ in range(3):
        assert server.post("/v1/hy/search", {"query": Q, "k": 3, "retriever": "bm25+dense"}).status_code == 200
    assert server.post("/v1/hy/search", {"query": Q, "k": 0}).status_code == 422
    r = server.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    fams = families(r.text)
    assert {"retr_requests", "retr_request_duration_seconds", "retr_rejected", "retr_inflight_requests"} <= set(fams)
    assert fams["retr_requests"].type == "counter" and fams["retr_request_duration_seconds"].type == "histogram"
    assert fams["retr_inflight_requests"].type == "gauge"
    req = fams["retr_requests"]
    assert value(req, "retr_requests_total", endpoint=ep, method="POST", status="200") == n0 + 3
    assert value(req, "retr_requests_total", endpoint=ep, method="POST", status="422") >= 1
    hist = fams["retr_request_duration_seconds"]
    lab = {"endpoint": ep, "retriever": "bm25+dense"}
    count = value(hist, "retr_request_duration_seconds_count", **lab)
    assert count >= 3 and value(hist, "retr_request_duration_seconds_sum", **lab) > 0
    buckets = sorted(((float(s.labels["le"]), s.value) for s in hist.samples
                      if s.name == "retr_request_duration_seconds_bucket" and all(s.labels[k] == v for k, v in lab.items())))
    assert buckets[-1] == (float("inf"), count)                       # +Inf holds every observation
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))   # cumulative
    assert value(fams["retr_inflight_requests"], "retr_inflight_requests") == 0  # /metrics itself is not counted


def test_two_apps_in_one_process_count_apart(meta_index):
    from fastapi.testclient import TestClient

    from retrieval.server.app import create_app
    from retrieval.server.registry import Registry

    apps = [create_app(Registry({"sf": meta_index.path}), mcp=False, warm=False) for _ in range(2)]
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        for _ in range(3):
            assert a.get("/v1/indexes").status_code == 200
        assert b.get("/v1/indexes").status_code == 200
        assert a.get("/v1/nope").status_code == 404
        fa, fb = families(a.get("/metrics").text), families(b.get("/metrics").text)
    n = "retr_requests_total"
    assert value(fa["retr_requests"], n, endpoint="/v1/indexes", method="GET", status="200") == 3
    assert value(fb["retr_requests"], n, endpoint="/v1/indexes", method="GET", status="200") == 1
    assert value(fa["retr_requests"], n, endpoint="/v1/{index}", method="GET", status="404") == 1
    assert not [s for s in fb["retr_requests"].samples if s.labels.get("status") == "404"]
