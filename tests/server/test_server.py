"""`retr serve` end to end: a real uvicorn server on loopback over real indexes."""
from __future__ import annotations

import asyncio
import json
import shutil
import signal
import threading
from pathlib import Path

import pytest

import retrieval
from retrieval.filters import matches, parse_filter
from tests.conftest import run_retr
from tests.server.conftest import Server, finish as _finish, stalled_request as _stalled_request

Q = "aspirin colorectal cancer"
QUERIES = [Q, "vitamin D deficiency", "stem cells in mice", "insulin resistance obesity", "tumor suppressor p53",
           "the", "bacterial infection antibiotics", "zzzqqx"]


def docids(resp):
    assert resp.status_code == 200, resp.text
    return [h["docid"] for h in resp.json()["hits"]]


def one_error(resp, status):
    """The one error shape, with no traceback or server path."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"status", "message"}
    assert body["error"]["status"] == status and body["error"]["message"]
    assert "Traceback" not in resp.text and "/tmp" not in resp.text and "pytest-" not in resp.text
    return body["error"]["message"]


# ------------------------------------------------------------------------------ auth
def test_healthz_needs_no_token_and_everything_else_does(server, token):
    assert server.get("/healthz", token="-").status_code == 200
    assert httpx_get(server.url + "/healthz").json() == {"status": "ok"}
    for method, path, body in [("POST", "/v1/sf/search", {"query": Q}), ("GET", "/v1/indexes", None),
                               ("GET", "/v1/sf", None), ("GET", "/readyz", None), ("GET", "/metrics", None),
                               ("GET", "/openapi.json", None), ("GET", "/v1/sf/documents/x", None),
                               ("POST", "/v1/sf/batch_search", {"queries": [Q]})]:
        for bad in (None, "wrong-token-" + "x" * 20, token[:-1], token + "x"):
            import httpx
            h = {} if bad is None else {"Authorization": f"Bearer {bad}"}
            r = httpx.request(method, server.url + path, json=body, headers=h, timeout=30)
            one_error(r, 401)
            assert r.headers["www-authenticate"].startswith("Bearer")
        r = httpx.request(method, server.url + path, json=body, headers={"Authorization": f"Basic {token}"},
                          timeout=30)
        assert r.status_code == 401
        r = httpx.request(method, server.url + path, json=body, headers=server.headers(), timeout=30)
        assert r.status_code in (200, 404), (path, r.text)


def httpx_get(url, **kw):
    import httpx
    return httpx.get(url, timeout=30, **kw)


# ------------------------------------------------------------------------------ search
def test_search_equals_index_search(server, meta_index, meta_dense_index):
    for q in QUERIES:
        assert docids(server.post("/v1/sf/search", {"query": q, "k": 10})) == \
            [h.docid for h in meta_index.search(q, k=10)]
    r = server.post("/v1/sf/search", {"query": Q, "k": 10})
    hits = r.json()["hits"]
    want = meta_index.search(Q, k=10)
    assert [(h["rank"], h["score"], h["title"], h["text"], h["metadata"]) for h in hits] == \
        [(h.rank, h.score, h.title, h.text, h.metadata) for h in want]
    assert all(h["scores"] == {"bm25": h["score"]} for h in hits)
    for spec in ("dense", "bm25+dense", "bm25+dense:rrf(k=20)", "bm25+dense:combmnz(norm=zscore)"):
        r = server.post("/v1/hy/search", {"query": Q, "k": 7, "retriever": spec})
        assert docids(r) == [h.docid for h in meta_dense_index.search(Q, k=7, retriever=spec)]
        if "+" in spec:
            assert set(r.json()["hits"][0]["scores"]) == {"bm25", "dense"}
    r = server.post("/v1/hy/search", {"query": Q, "k": 5, "retriever": "bm25+dense", "fusion": "rrf(k=20)",
                                      "depth": 50})
    assert r.json()["retriever"] == "bm25+dense:rrf(k=20)"
    assert docids(r) == [h.docid for h in meta_dense_index.search(Q, k=5, retriever="bm25+dense:rrf(k=20)",
                                                                   depth=50)]


def test_text_options(server):
    r = server.post("/v1/sf/search", {"query": Q, "k": 3, "text": False}).json()
    assert all(h["text"] is None and h["title"] is None and h["metadata"] is None for h in r["hits"])
    r = server.post("/v1/sf/search", {"query": Q, "k": 3, "text_chars": 25}).json()
    assert all(len(h["text"]) <= 25 for h in r["hits"]) and any(len(h["text"]) == 25 for h in r["hits"])


@pytest.mark.parametrize("flt", [{"shard": "odd"}, {"year": {"gte": 2000, "lt": 2005}}, {"tags": {"in": ["b"]}},
                                 {"year": 2003, "shard": "odd"}])
def test_filtered_search_is_the_filtered_full_ranking(server, meta_index, meta_dense_index, flt):
    f = parse_filter(flt)
    for q in QUERIES[:4]:
        full = meta_index.search(q, k=len(meta_index))
        want = [h.docid for h in full if matches(h.docid, h.metadata, f)][:10]
        r = server.post("/v1/sf/search", {"query": q, "k": 10, "filter": flt})
        assert docids(r) == want
        assert all(matches(h["docid"], h["metadata"], f) for h in r.json()["hits"])
    r = server.post("/v1/hy/search", {"query": Q, "k": 10, "filter": flt, "retriever": "bm25+dense"})
    assert docids(r) == [h.docid for h in meta_dense_index.search(Q, k=10, retriever="bm25+dense", filter=flt)]


def test_a_filter_on_a_field_no_document_carries_is_named_in_warnings(server, meta_index):
    """GET /v1/NAME lists the fields filters can name; a search whose filter names another one (a
    misspelling) gets no hits and a `warnings` line naming it and the fields there are; a known
    field gets no warnings at all."""
    info = server.get("/v1/sf").json()
    assert info["fields"] == meta_index.fields() and "shard" in info["fields"]
    r = server.post("/v1/sf/search", {"query": Q, "k": 5, "filter": {"shrad": "odd"}}).json()
    assert r["hits"] == [] and len(r["warnings"]) == 1
    assert "'shrad'" in r["warnings"][0] and "shard (" in r["warnings"][0]
    ok = server.post("/v1/sf/search", {"query": Q, "k": 5, "filter": {"shard": "odd"}}).json()
    assert ok["hits"] and "warnings" not in ok
    none = server.post("/v1/sf/search", {"query": "zzzzqqq", "k": 5, "filter": {"shard": "odd"}}).json()
    assert none["hits"] == [] and "warnings" not in none  # no hits, but every field is known
    b = server.post("/v1/sf/batch_search", {"queries": [Q], "k": 3, "filter": {"year": 2003, "shrad": "odd"}}).json()
    assert b["results"][0]["hits"] == [] and "'shrad'" in b["warnings"][0] and "'year'" not in b["warnings"][0]


def test_batch_search(server, meta_index):
    r = server.post("/v1/sf/batch_search", {"queries": QUERIES[:3] + [{"qid": "mine", "query": QUERIES[3]}],
                                            "k": 5, "filter": {"shard": "odd"}})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["qid"] for x in res] == ["0", "1", "2", "mine"]
    for x, q in zip(res, QUERIES[:4]):
        assert [h["docid"] for h in x["hits"]] == [h.docid for h in meta_index.search(q, k=5, filter={"shard": "odd"})]
    one_error(server.post("/v1/sf/batch_search", {"queries": [{"qid": "a", "query": "x"}, {"qid": "a", "query": "y"}]}),
              400)
    one_error(server.post("/v1/sf/batch_search", {"queries": ["x"] * 1001}), 422)


def test_documents(server, meta_index):
    first = next(meta_index.docstore.iter_meta())[0]
    r = server.get(f"/v1/sf/documents/{first}")
    d = meta_index.get(first)
    assert r.json() == {"docid": first, "title": d.title, "text": d.text, "metadata": d.metadata}
    one_error(server.get("/v1/sf/documents/no-such-doc"), 404)
    r = server.post("/v1/sf/documents/get", {"ids": ["nope", first, first]})
    assert [x["docid"] for x in r.json()["documents"]] == [first] and r.json()["missing"] == ["nope"]


def test_indexes_and_info(server, meta_index):
    r = server.get("/v1/indexes").json()
    assert [i["name"] for i in r["indexes"]] == ["sf", "hy"]
    info = server.get("/v1/hy").json()
    assert info["documents"] == len(meta_index) and set(info["retrievers"]) == {"bm25", "dense"}
    assert info["writable"] is False
    assert "/tmp" not in json.dumps(info) and "pytest-" not in json.dumps(info)


def test_bad_input_is_one_json_error(server):
    one_error(server.post("/v1/nope/search", {"query": Q}), 404)
    assert "dense" in one_error(server.post("/v1/sf/search", {"query": Q, "retriever": "dense"}), 400)
    one_error(server.post("/v1/sf/search", {"query": Q, "retriever": "bm25+"}), 400)
    one_error(server.post("/v1/sf/search", {"query": "   "}), 400)
    one_error(server.post("/v1/sf/search", {"query": Q, "k": 0}), 422)
    one_error(server.post("/v1/sf/search", {"query": Q, "k": 1001}), 422)
    one_error(server.post("/v1/sf/search", {"query": Q, "nope": 1}), 422)
    one_error(server.post("/v1/sf/search", {"query": Q, "filter": {"year": {"gte": "x"}}}), 400)
    one_error(server.post("/v1/sf/search", {"query": Q, "filter": {"year": []}}), 400)
    one_error(server.post("/v1/sf/search", {"query": "x" * 10_001}), 422)
    one_error(server.post("/v1/hy/search", {"query": Q, "retriever": "dense", "dimsel": {"mode": "oracle"}}), 422)
    import httpx
    r = httpx.post(server.url + "/v1/sf/search", content=b"{not json", timeout=30,
                   headers={**server.headers(), "content-type": "application/json"})
    one_error(r, 422)
    r = httpx.post(server.url + "/v1/sf/search", content=b"x" * (3 * 1024 * 1024), timeout=30,
                   headers={**server.headers(), "content-type": "application/json"})
    one_error(r, 413)
    r = server.post("/v1/sf/documents", {"documents": [{"docid": "n1", "text": "new"}]})
    assert "--writable" in one_error(r, 403)


def test_scrubbed_messages_keep_words_that_spell_an_index_path(tmp_path, meta_index, token):
    """`--index mt=meta` (a folder given relative to the server's directory): a path is replaced as a
    whole token, by the index name, never where its text is part of a word or a field name."""
    shutil.copytree(meta_index.path, tmp_path / "meta")
    s = Server("--index", "mt=meta", token=token, tmp=tmp_path, cwd=tmp_path)
    try:
        msg = one_error(s.post("/v1/mt/search", {"query": Q, "filter": {"meta": {"a": 1}}}), 400)
        assert "filter on 'meta': unknown operator 'a'" in msg, msg  # was: filter on 'mt'
        msg = one_error(s.post("/v1/mt/search", {"query": Q, "filter": {"metadata.year": {"gte": "x"}}}), 400)
        assert "'metadata.year'" in msg, msg

        async def mcp():
            from fastmcp import Client

            async with Client(f"{s.url}/mcp/", auth=token) as c:
                r = await c.call_tool("search", {"query": Q, "filter": {"meta": {"a": 1}}}, raise_on_error=False)
                return r.content[0].text
        assert "filter on 'meta': unknown operator 'a'" in asyncio.run(mcp())
    finally:
        s.stop()


def test_clean_message_replaces_whole_paths_only(tmp_path, meta_index, monkeypatch):
    from retrieval.server.guard import clean_message
    from retrieval.server.registry import Registry

    shutil.copytree(meta_index.path, tmp_path / "meta")
    monkeypatch.chdir(tmp_path)
    reg = Registry({"mt": Path("meta"), "abs": meta_index.path})
    served = reg.served.values()
    full = str((tmp_path / "meta").resolve())
    cases = {
        "filter on 'meta': unknown operator": "filter on 'meta': unknown operator",  # a word, not a path
        "metadata of meta-analysis, metameta": "metadata of meta-analysis, metameta",
        "meta/manifest.json: bad JSON": "mt/manifest.json: bad JSON",
        f"{full}/manifest.json: bad JSON": "mt/manifest.json: bad JSON",
        f"cannot open {full}": "cannot open mt",
        f"cannot open {full}x/y": "cannot open y",               # another folder: its last part only
        f"'{meta_index.path}/dense/index.faiss' is missing": "'abs/dense/index.faiss' is missing",
        f"{meta_index.path}: not an index": "abs: not an index",
        "read /etc/retr/secret.conf failed": "read secret.conf failed",
        "a/b and /x stay": "a/b and /x stay",
    }
    for given, want in cases.items():
        assert clean_message(given, served) == want, given


def test_openapi_and_docs(server):
    doc = server.get("/openapi.json").json()
    for p in ("/v1/{index}/search", "/v1/{index}/batch_search", "/v1/{index}/documents/{docid}",
              "/v1/{index}/documents/get", "/v1/{index}/documents", "/v1/indexes", "/v1/{index}",
              "/healthz", "/readyz", "/metrics"):
        assert p in doc["paths"], p
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert server.get("/docs").status_code == 200


def test_metrics_count_requests_by_endpoint_and_retriever(server):
    server.post("/v1/hy/search", {"query": Q, "retriever": "bm25+dense"})
    text = server.get("/metrics").text
    assert 'retr_requests_total{endpoint="/v1/{index}/search",method="POST",status="200"}' in text
    assert 'retr_request_duration_seconds_count{endpoint="/v1/{index}/search",retriever="bm25+dense"}' in text
    assert "# TYPE retr_request_duration_seconds histogram" in text


def test_eight_concurrent_clients_get_the_serial_answers(server, token):
    c = retrieval.Client(server.url, token=token, index="hy")
    jobs = [(q, spec, flt) for q in QUERIES for spec in ("bm25", "bm25+dense") for flt in ("", '{"shard": "odd"}')]

    def ask(client, j):
        return [(h.docid, h.score) for h in client.search(j[0], k=10, retriever=j[1], filter=json.loads(j[2] or "null"))]
    serial = {j: ask(c, j) for j in jobs}
    got, errors = {}, []

    def worker(i):
        mine = retrieval.Client(server.url, token=token, index="hy")
        try:
            for rep in range(3):
                for j in jobs[i::8] + jobs[(i + 3) % 8::8]:
                    got.setdefault(j, []).append(ask(mine, j))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(got) == set(jobs)
    for j, answers in got.items():
        assert all(a == serial[j] for a in answers), j


# ------------------------------------------------------------------------------ limits and shutdown
def test_beyond_max_inflight_answers_429_with_retry_after(tmp_path, meta_index, token):
    s = Server("--index", f"sf={meta_index.path}", "--max-inflight", "2", token=token, tmp=tmp_path)
    try:
        held = [_stalled_request(s) for _ in range(2)]
        import time
        for _ in range(100):  # the server has read both requests' headers once a third is refused
            r = s.post("/v1/sf/search", {"query": Q})
            if r.status_code == 429:
                break
            time.sleep(0.05)
        msg = one_error(r, 429)
        assert r.headers["retry-after"] == "1" and "in flight" in msg
        assert s.get("/healthz").status_code == 200 and s.get("/metrics").status_code == 200  # never refused
        for sock, rest in held:
            assert _finish(sock, rest).startswith("HTTP/1.1 200")
        assert s.post("/v1/sf/search", {"query": Q}).status_code == 200
        assert 'retr_rejected_total{endpoint="/v1/sf/search"}' in s.get("/metrics").text
        # the Client waits for Retry-After and tries again
        held = [_stalled_request(s) for _ in range(2)]
        c = retrieval.Client(s.url, token=token, index="sf", retries=0)
        with pytest.raises(retrieval.client.ServerError) as e:
            for _ in range(100):
                c.search(Q)
                time.sleep(0.05)
        assert e.value.status == 429
        for sock, rest in held:
            _finish(sock, rest)
    finally:
        s.stop()


def test_sigterm_drains_in_flight_requests(tmp_path, meta_index):
    s = Server("--index", f"sf={meta_index.path}", tmp=tmp_path)
    try:
        sock, rest = _stalled_request(s)
        import time
        time.sleep(0.5)  # let the server read the headers (the request is then in flight)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert s.proc.poll() is None  # still draining
        reply = _finish(sock, rest)
        assert reply.startswith("HTTP/1.1 200") and "15648443" in reply or '"hits"' in reply
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


# ------------------------------------------------------------------------------ start-up
def test_refuses_non_loopback_without_token(meta_index, tmp_path):
    for host in ("0.0.0.0", "::", "192.0.2.1", "example.org"):
        r = run_retr("serve", "--index", f"sf={meta_index.path}", "--host", host, timeout=120)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("retr: error: refusing to listen on"), r.stderr
        assert lines[0].endswith("may be served without --token-file"), r.stderr  # the flag, not token_file
    bad = tmp_path / "tok"
    bad.write_text("short\n")
    r = run_retr("serve", "--index", f"sf={meta_index.path}", "--token-file", bad, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "token" in r.stderr
    for args in (["--index", str(tmp_path / "missing")], ["--index", f"in dexes={meta_index.path}"],
                 ["--index", f"indexes={meta_index.path}"],
                 ["--index", f"a={meta_index.path}", "--index", f"a={meta_index.path}"]):
        r = run_retr("serve", *args, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith("retr: error:") and "Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------------------ writes
def test_writes_through_the_api_and_from_another_process_are_visible(tmp_path, writable_copy, token):
    s = Server("--index", f"w={writable_copy}", "--writable", token=token, tmp=tmp_path)
    try:
        q = "quokkazz wallabyzz"
        assert docids(s.post("/v1/w/search", {"query": q})) == []
        r = s.post("/v1/w/documents", {"documents": [
            {"docid": "api-1", "title": "Quokka", "text": "The quokkazz is a small marsupial on an island.",
             "metadata": {"shard": "odd", "year": 2024}}]})
        assert r.status_code == 200, r.text
        before = r.json()["total"]
        assert r.json()["documents"] == 1
        assert docids(s.post("/v1/w/search", {"query": q})) == ["api-1"]
        assert docids(s.post("/v1/w/search", {"query": q, "filter": {"year": 2024}})) == ["api-1"]
        assert s.get("/v1/w/documents/api-1").json()["metadata"] == {"shard": "odd", "year": 2024}
        one_error(s.post("/v1/w/documents", {"documents": [{"docid": "api-1", "text": "again"}]}), 409)
        one_error(s.post("/v1/w/documents", {"documents": [{"docid": "a b", "text": "x"}]}), 422)
        # another process adds documents with `retr add`
        new = tmp_path / "new.jsonl"
        new.write_text(json.dumps({"_id": "cli-1", "title": "Quokka behaviour",
                                   "text": "Wallabyzz behaviour on the island studied.", "metadata": {"year": 1}}) + "\n")
        r = run_retr("add", "--index", writable_copy, "--corpus", new, "--quiet", timeout=300)
        assert r.returncode == 0, r.stderr
        got = docids(s.post("/v1/w/search", {"query": q}))
        assert set(got) == {"api-1", "cli-1"}
        assert got == [h.docid for h in retrieval.open_index(writable_copy).search(q, k=10)]
        assert s.get("/v1/w").json()["documents"] == before + 1
    finally:
        s.stop()


def test_update_and_delete_through_the_api(tmp_path, writable_copy, token):
    """Updates and deletions (retrieval.writer.update_documents / delete_documents) change what the
    next search sees."""
    s = Server("--index", f"w={writable_copy}", "--writable", token=token, tmp=tmp_path)
    try:
        first = next(retrieval.open_index(writable_copy).docstore.iter_meta())[0]
        upd = lambda: s.client_put("/v1/w/documents", {"documents": [  # noqa: E731
            {"docid": first, "text": "zebrazz updated passage", "metadata": {"shard": "new"}}]})
        r = upd()
        assert r.status_code == 200 and r.json()["documents"] == 1, r.text
        assert docids(s.post("/v1/w/search", {"query": "zebrazz"})) == [first]
        assert docids(s.post("/v1/w/search", {"query": "zebrazz", "filter": {"shard": "new"}})) == [first]
        n = s.get("/v1/w").json()["documents"]
        r = s.post("/v1/w/documents/delete", {"ids": [first, "not-there"]})
        assert r.status_code == 200 and r.json()["documents"] == 1 and r.json()["total"] == n - 1, r.text
        assert docids(s.post("/v1/w/search", {"query": "zebrazz"})) == []
        one_error(s.get(f"/v1/w/documents/{first}"), 404)
    finally:
        s.stop()


def test_numbers_a_double_cannot_hold_are_400_and_the_index_still_filters(tmp_path, writable_copy, token):
    """A 400-digit integer in a filter, or in metadata written through the API, and NaN/Infinity in
    metadata: 400 naming the field (not 500), nothing stored, and range filters still answer."""
    import httpx

    huge = "1" + "0" * 400
    s = Server("--index", f"w={writable_copy}", "--writable", token=token, tmp=tmp_path)

    def raw(method, path, body):  # the body as written: NaN and Infinity are not JSON
        return httpx.request(method, s.url + path, content=body.encode(), timeout=120,
                             headers={**s.headers(), "Content-Type": "application/json"})
    try:
        for flt in ('{"year": {"gte": %s}}' % huge, '{"year": %s}' % huge, '{"year": {"in": [2000, -%s]}}' % huge):
            msg = one_error(raw("POST", "/v1/w/search", '{"query": "cancer", "filter": %s}' % flt), 400)
            assert "'year'" in msg, msg
        n = s.get("/v1/w").json()["documents"]
        for value, needle in [(huge, "integer beyond"), ("-" + huge, "integer beyond"), ("NaN", "NaN"),
                              ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e400", "Infinity")]:
            body = ('{"documents": [{"docid": "good-1", "text": "a fine passage", "metadata": {"year": 2001}}, '
                    '{"docid": "bad-1", "text": "a passage", "metadata": {"shard": "odd", "year": %s}}]}' % value)
            for method in ("POST", "PUT"):
                msg = one_error(raw(method, "/v1/w/documents", body), 400)
                assert "'year'" in msg and needle in msg and "bad-1" in msg, msg
        assert s.get("/v1/w").json()["documents"] == n
        one_error(s.get("/v1/w/documents/bad-1"), 404)
        one_error(s.get("/v1/w/documents/good-1"), 404)
        r = s.post("/v1/w/search", {"query": "cancer", "k": 50, "filter": {"year": {"gte": 2010, "lt": 2015}}})
        hits = r.json()["hits"] if r.status_code == 200 else None
        assert hits, r.text
        assert all(2010 <= h["metadata"]["year"] < 2015 for h in hits)
        want = [h.docid for h in retrieval.open_index(writable_copy).search(
            "cancer", k=50, filter={"year": {"gte": 2010, "lt": 2015}})]
        assert [h["docid"] for h in hits] == want
    finally:
        s.stop()


def test_serve_prints_where_it_listens_once_ready(meta_index, meta_dense_index, tmp_path):
    """`retr serve` says, on stderr and once warm (/readyz is 200 by then), which indexes it
    serves at which URL; stdout stays empty."""
    import os
    import queue
    import signal
    import subprocess
    import sys
    import threading

    import httpx

    from tests.conftest import ROOT
    from tests.server.conftest import free_port

    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--index",
                          f"sf={meta_index.path}", "--index", f"hy={meta_dense_index.path}"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in p.stderr], daemon=True).start()
    try:
        line = ""
        while not line.startswith("retr: serving"):
            line = lines.get(timeout=180)
        assert line.rstrip("\n") == (f"retr: serving sf, hy at http://127.0.0.1:{port}/ (search page at /, API at "
                                     f"/v1, docs at /docs, MCP at /mcp)")
        r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert r.status_code == 200 and r.json()["ready"] is True  # warm by the time the line is printed
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0 and out == ""
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
