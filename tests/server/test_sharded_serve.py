"""`retr serve --sharded` end to end: a sharded index of the 400 test passages (2 shards) deployed on
ONE local Ray cluster for the module (2 CPUs, advertising each shard's resource), each shard a Ray
Serve deployment, behind real `retr serve` routers on loopback.

The cluster lives in a helper process of its own (the JVM of this process's in-process searches and
Ray's core worker must not share a process, tests/conftest.py's ray_address); the helper also kills
replica actors on request (`ray.kill`), as a crash would."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("ray.serve", reason="retr serve --sharded needs Ray Serve (pip install 'retr[ray]')")

import retrieval  # noqa: E402
from indexes import sharded as sh  # noqa: E402
from tests.conftest import run_retr  # noqa: E402
from tests.server.conftest import Server, finish, stalled_request  # noqa: E402

QUERIES = ["aspirin colorectal cancer", "vitamin D deficiency", "stem cells in mice", "insulin resistance obesity",
           "tumor suppressor p53", "bacterial infection antibiotics", "zzzqqx"]
FOLDERS = ["shard-000", "shard-001"]

CLUSTER = r"""
import os, sys
os.environ.setdefault("RAY_AUTH_MODE", "token")
import ray
ray.init(num_cpus=2, resources={"shard-000": 1, "shard-001": 1}, include_dashboard=False, log_to_driver=False,
         logging_level="WARNING")
print(ray.get_runtime_context().gcs_address, flush=True)
for line in sys.stdin:
    what = line.strip()
    names = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith("SERVE_REPLICA::") and what in a["name"]]
    for a in names:
        ray.kill(ray.get_actor(a["name"], namespace=a["namespace"]), no_restart=True)
    print(len(names), flush=True)
ray.shutdown()
"""


class Cluster:
    def __init__(self):
        env = dict(os.environ, RAY_AUTH_MODE="token")
        self.proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.address = self.proc.stdout.readline().strip()
        assert self.address, "the Ray helper process did not start a cluster"

    def kill(self, pattern: str) -> int:
        """ray.kill every Serve replica actor whose name holds ``pattern``; how many."""
        self.proc.stdin.write(pattern + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, meta_corpus):
    """The metadata corpus (as meta_index holds it) in 2 shards, BM25 with document vectors (for
    pseudo-relevance feedback; its rankings are meta_index's all the same)."""
    from retrieval.bm25 import BM25Spec
    from retrieval.sharded.write import build_sharded

    path = tmp_path_factory.mktemp("sharded") / "SH"
    build_sharded(meta_corpus, path, 2, subindexes={"bm25": BM25Spec(store_docvectors=True)}, quiet=True).close()
    return path


@pytest.fixture(scope="module")
def router(cluster, sharded, tmp_path_factory, token):
    s = Server("--sharded", f"sh={sharded}", "--ray-address", cluster.address, "--replica-cpus", "0.2",
               "--max-inflight", "2", "--shard-timeout", "20", token=token, tmp=tmp_path_factory.mktemp("router"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def in_process(sharded):
    from retrieval.sharded.index import ShardedIndex

    with ShardedIndex.open(sharded) as ix:
        yield ix


def pairs(resp):
    assert resp.status_code == 200, resp.text
    return [(h["docid"], h["score"]) for h in resp.json()["hits"]]


def one_error(resp, status):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["status"] == status
    assert "Traceback" not in resp.text and "pytest-" not in resp.text
    return body["error"]["message"]


def search(s, query, **kw):
    return s.post("/v1/sh/search", {"query": query, **kw})


# ------------------------------------------------------------------------------ results
def test_results_equal_the_in_process_sharded_index_and_the_single_folder(router, in_process, meta_index):
    for q in QUERIES:
        got = pairs(search(router, q, k=10, text=False))
        mine = [(h.docid, h.score) for h in in_process.search(q, k=10, text=False)]
        one = [(h.docid, h.score) for h in meta_index.search(q, k=10, text=False)]
        assert got == mine == one, q
    r = router.post("/v1/sh/batch_search", {"queries": QUERIES, "k": 5, "text": False})
    assert r.status_code == 200, r.text
    for i, res in enumerate(r.json()["results"]):
        assert [(h["docid"], h["score"]) for h in res["hits"]] == \
            [(h.docid, h.score) for h in meta_index.search(QUERIES[i], k=5, text=False)]
    hits = search(router, QUERIES[0], k=5).json()["hits"]  # text from each hit's own shard
    for h in hits:
        d = meta_index.get(h["docid"])
        assert (h["title"], h["text"], h["metadata"]) == (d.title, d.text, d.metadata)
    lines = router.post("/v1/sh/batch_search/stream", {"queries": QUERIES[:3], "k": 3, "text": False}).text
    assert [json.loads(x)["qid"] for x in lines.splitlines()] == ["0", "1", "2"]


def test_feedback_through_the_router_equals_the_in_process_sharded_index(router, in_process):
    """RM3 and Rocchio over Ray Serve: the router's rounds (first ranking, the feedback documents'
    vectors from their shards, the statistics, the expansion on one live shard, the expanded search)
    give the in-process sharded index's hits, which are one folder's (tests/retrieval/test_sharded_prf.py)."""
    for prf in ({"method": "rm3", "fb_terms": 20}, {"method": "rocchio", "use_negative": True, "gamma": 0.15}):
        for q in QUERIES[:3]:
            want = [(h.docid, h.score) for h in in_process.search(q, k=10, text=False, prf=prf)]
            assert want != [(h.docid, h.score) for h in in_process.search(q, k=10, text=False)]
            assert pairs(search(router, q, k=10, text=False, prf=prf)) == want, (prf, q)


def test_filters_documents_and_info_behave_as_retr_serve(router, meta_index):
    for flt in ({"shard": "odd"}, {"year": {"gte": 2000, "lt": 2010}}, {"tags": {"in": ["a"]}}):
        got = pairs(search(router, "cancer cells", k=10, text=False, filter=flt))
        assert got == [(h.docid, h.score) for h in meta_index.search("cancer cells", k=10, text=False, filter=flt)]
    msg = one_error(search(router, "cancer", filter={"year": {"near": 3}}), 400)
    assert "near" in msg
    first = meta_index.search("cancer", k=3, text=False)
    r = router.get(f"/v1/sh/documents/{first[0].docid}")
    assert r.status_code == 200 and r.json()["text"] == meta_index.get(first[0].docid).text
    one_error(router.get("/v1/sh/documents/no-such-doc"), 404)
    r = router.post("/v1/sh/documents/get", {"ids": [h.docid for h in first] + ["nope"]})
    assert [d["docid"] for d in r.json()["documents"]] == [h.docid for h in first] and r.json()["missing"] == ["nope"]
    info = router.get("/v1/sh").json()
    assert info["documents"] == len(meta_index) == sum(x["documents"] for x in info["shards"])
    assert [x["shard"] for x in info["shards"]] == FOLDERS
    one_error(router.post("/v1/sh/search", {"query": "x", "retriever": "nope"}), 400)
    one_error(router.post("/v1/sh/search", {"query": "x", "allow_partial": "yes"}), 422)


def test_explain_through_the_ray_router_is_the_single_folder_s(router, meta_index):
    """POST /v1/sh/explain over Ray Serve replicas: the owning shard's replica explains the document under
    the global statistics, and the answer is the folder's (tests/retrieval/test_sharded_explain.py has
    the in-process router); an unknown document is a 404."""
    from tests.retrieval.test_sharded_explain import assert_same

    for h in meta_index.search(QUERIES[0], k=12, text=False)[::5]:
        r = router.post("/v1/sh/explain", {"query": QUERIES[0], "docid": h.docid, "depth": 10,
                                           "filter": {"shard": "odd"}})
        assert r.status_code == 200, r.text
        assert_same(meta_index.explain(QUERIES[0], h.docid, depth=10, filter={"shard": "odd"}), r.json())
    r = router.post("/v1/sh/explain", {"query": "x", "docid": "no-such-doc"})
    assert "no document 'no-such-doc'" in one_error(r, 404)


def test_auth_429_and_metrics_behave_as_retr_serve(router, token):
    assert httpx.get(router.url + "/healthz").status_code == 200
    for bad in (None, "wrong-token-" + "x" * 20):
        h = {} if bad is None else {"Authorization": f"Bearer {bad}"}
        one_error(httpx.post(router.url + "/v1/sh/search", json={"query": "x"}, headers=h), 401)
    held = [stalled_request(router, "/v1/sh/search") for _ in range(2)]
    for _ in range(100):
        r = search(router, "cancer")
        if r.status_code == 429:
            break
        time.sleep(0.05)
    assert "in flight" in one_error(r, 429) and r.headers["retry-after"] == "1"
    for sock, rest in held:
        assert finish(sock, rest).startswith("HTTP/1.1 200")
    text = router.get("/metrics").text
    assert 'endpoint="/v1/{index}/search"' in text and "retr_rejected" in text


def test_retr_serve_index_of_a_sharded_folder_serves_its_shards_in_process(sharded, meta_index, tmp_path):
    s = Server("--index", f"sh={sharded}", tmp=tmp_path)  # no Ray: every shard opened in the server
    try:
        for q in QUERIES[:4]:
            assert pairs(search(s, q, k=10, text=False)) == \
                [(h.docid, h.score) for h in meta_index.search(q, k=10, text=False)]
        r = search(s, QUERIES[0], k=3, highlight=True)
        assert r.status_code == 200 and all(h["highlights"] is not None for h in r.json()["hits"])
        assert "partial" not in search(s, QUERIES[0], allow_partial=True).json()
        assert s.get("/v1/sh").json()["documents"] == len(meta_index)
    finally:
        s.stop()


# ------------------------------------------------------------------------------ faults
def test_a_killed_replica_means_503s_naming_its_shard_never_silent_partial_results(router, cluster, meta_index):
    want = [(h.docid, h.score) for h in meta_index.search(QUERIES[0], k=10, text=False)]
    assert cluster.kill("shard-001") == 1
    seen, t0 = [], time.monotonic()
    while time.monotonic() - t0 < 90:
        r = search(router, QUERIES[0], k=10, text=False)
        if r.status_code == 503:
            assert "'shard-001'" in one_error(r, 503) and r.headers.get("retry-after") == "1"
            seen.append(503)
        else:
            assert pairs(r) == want  # whatever else it answers is the whole, exact result
            seen.append(200)
            if 503 in seen or len(seen) > 5:
                break
        time.sleep(0.05)
    assert seen[-1] == 200, seen  # Serve started a new replica and the router uses it


def test_while_a_shard_cannot_restart_searches_fail_or_are_flagged_partial(router, cluster, sharded):
    """The shard's folder moved away: its replica fails Serve's health check (and is killed too), and
    every replica Serve starts instead fails to open it, so the shard stays without a live replica until
    the folder is back."""
    q = QUERIES[1]
    away = sharded.parent / "away-001"
    (sharded / "shard-001").rename(away)
    try:
        cluster.kill("shard-001")
        deadline = time.monotonic() + 60
        while (r := search(router, q, text=False)).status_code != 503:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.1)
        msg = one_error(r, 503)
        assert "'shard-001'" in msg and "no live replica" in msg and "allow_partial" in msg
        r = search(router, q, k=10, text=False, allow_partial=True)
        assert r.status_code == 200 and r.json()["partial"] == ["shard-001"]
        # the other shard's hits, scored with its own statistics: its folder searched alone
        with retrieval.open_index(sharded / "shard-000") as alone:
            assert pairs(r) == [(h.docid, h.score) for h in alone.search(q, k=10, text=False)]
        assert all(sh.shard_of(d, 2) == 0 for d, _ in pairs(r))
        r = router.post("/v1/sh/batch_search", {"queries": [q], "k": 3, "allow_partial": True})
        assert r.json()["partial"] == ["shard-001"]
        one_error(router.post("/v1/sh/batch_search", {"queries": [q], "k": 3}), 503)
    finally:
        away.rename(sharded / "shard-001")
    deadline = time.monotonic() + 90
    while (r := search(router, q, text=False)).status_code != 200:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)
    assert "partial" not in r.json()


# ------------------------------------------------------------------------------ writes
def test_writes_go_to_each_document_s_own_shard(cluster, sharded, tmp_path, token):
    from retrieval.sharded.index import ShardedIndex
    from retrieval.sharded.write import check_sharded

    copy = tmp_path / "W"
    shutil.copytree(sharded, copy)
    s = Server("--sharded", f"shw={copy}", "--ray-address", cluster.address, "--replica-cpus", "0.2", "--writable",
               token=token, tmp=tmp_path)
    try:
        docs = [{"docid": f"new-{i}", "title": "", "text": f"zebrafish regeneration fin {i}"} for i in range(6)]
        r = s.post("/v1/shw/documents", {"documents": docs})
        assert r.status_code == 200 and r.json()["documents"] == 6, r.text
        one_error(s.post("/v1/shw/documents", {"documents": docs[:1]}), 409)
        hits = s.post("/v1/shw/search", {"query": "zebrafish regeneration", "k": 6, "text": False}).json()["hits"]
        assert sorted(h["docid"] for h in hits) == sorted(d["docid"] for d in docs)
        for d in docs:  # each in its own shard's folder
            i = sh.shard_of(d["docid"], 2)
            with retrieval.open_index(copy / FOLDERS[i]) as one, retrieval.open_index(copy / FOLDERS[1 - i]) as other:
                assert one.get(d["docid"]) is not None and other.get(d["docid"]) is None
        r = s.client_put("/v1/shw/documents", {"documents": [dict(docs[0], text="salamander limb")]})
        assert r.status_code == 200
        r = s.post("/v1/shw/documents/delete", {"ids": ["new-1", "new-2", "not-there"]})
        assert r.json()["documents"] == 2
        with ShardedIndex.open(copy) as ix:
            mine = [(h.docid, h.score) for h in ix.search("zebrafish regeneration salamander", k=10, text=False)]
        got = s.post("/v1/shw/search", {"query": "zebrafish regeneration salamander", "k": 10, "text": False})
        assert pairs(got) == mine and "new-1" not in dict(mine)
        assert s.get("/v1/shw").json()["documents"] == 400 + 4
    finally:
        s.stop()
    assert not check_sharded(copy).problems


def _pair(word: str) -> list:
    """Two new documents carrying ``word``, routed to shard 0 and shard 1."""
    ids, i = [], 0
    while len(ids) < 2:
        d = f"{word}-{i}"
        if sh.shard_of(d, 2) == len(ids):
            ids.append(d)
        i += 1
    return [{"docid": d, "title": "", "text": f"{word} spectroscopy of folded proteins {d}"} for d in ids]


class Watch:
    """A client searching ``word`` in a loop (and reading the document count) while a write runs: what
    it saw, to be one commit or the other, never a shard's half."""

    def __init__(self, s, name: str, word: str):
        self.s, self.name, self.word = s, name, word
        self.hits, self.counts, self.bad = [], set(), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                r = self.s.post(f"/v1/{self.name}/search", {"query": self.word, "k": 10, "text": False})
                info = self.s.get(f"/v1/{self.name}")
            except httpx.HTTPError as e:
                self.bad.append(repr(e))
                return
            if r.status_code != 200 or info.status_code != 200:
                self.bad.append(r.text if r.status_code != 200 else info.text)
                continue
            self.hits.append(len(r.json()["hits"]))
            self.counts.add(info.json()["documents"])

    def stop(self):
        self._stop.set()
        self._thread.join(60)


def test_a_write_over_two_shards_is_one_commit_for_the_served_searches(cluster, sharded, tmp_path, token):
    """A write through the router touching both shards, and `retr add --index SHARDED` by another
    process, are each seen whole or not at all by searches running meanwhile (per-shard commits showed
    1 of the 2 documents between the two shards' writes); afterwards the router answers as the
    in-process ShardedIndex does."""
    from retrieval.sharded.index import ShardedIndex
    from retrieval.sharded.write import check_sharded

    copy = tmp_path / "C"
    shutil.copytree(sharded, copy)
    s = Server("--sharded", f"shc={copy}", "--ray-address", cluster.address, "--replica-cpus", "0.2", "--writable",
               token=token, tmp=tmp_path)

    def hits(q):
        r = s.post("/v1/shc/search", {"query": q, "k": 10, "text": False})
        assert r.status_code == 200, r.text
        return r.json()["hits"]

    try:
        docs = _pair("qqservedadd")
        w = Watch(s, "shc", "qqservedadd")
        time.sleep(0.3)
        r = s.post("/v1/shc/documents", {"documents": docs})
        assert r.status_code == 200 and r.json()["documents"] == 2, r.text
        assert len(hits("qqservedadd")) == 2  # seen once answered
        w.stop()
        assert not w.bad and set(w.hits) <= {0, 2} and w.counts <= {400, 402}, (w.hits, w.counts, w.bad[:1])
        assert 0 in w.hits
        w = Watch(s, "shc", "qqservedadd")
        r = s.post("/v1/shc/documents/delete", {"ids": [d["docid"] for d in docs]})
        assert r.status_code == 200 and r.json()["documents"] == 2, r.text
        w.stop()
        assert not w.bad and set(w.hits) <= {0, 2} and w.counts <= {400, 402}, (w.hits, w.counts, w.bad[:1])
        assert hits("qqservedadd") == []
        # another process's write: taken by the router as one commit
        rows = [{"_id": d["docid"], "title": "", "text": d["text"]} for d in _pair("qqotherproc")]
        (tmp_path / "more.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows), encoding="utf-8")
        w = Watch(s, "shc", "qqotherproc")
        r = run_retr("add", "--index", copy, "--corpus", tmp_path / "more.jsonl", "-q")
        assert r.returncode == 0, r.stderr
        assert len(hits("qqotherproc")) == 2
        w.stop()
        assert not w.bad and set(w.hits) <= {0, 2} and w.counts <= {400, 402}, (w.hits, w.counts, w.bad[:1])
        with ShardedIndex.open(copy) as ix:
            for q in QUERIES[:4] + ["qqotherproc spectroscopy"]:
                got = pairs(s.post("/v1/shc/search", {"query": q, "k": 10, "text": False}))
                assert got == [(h.docid, h.score) for h in ix.search(q, k=10, text=False)], q
    finally:
        s.stop()
    assert not check_sharded(copy).problems


# ------------------------------------------------------------------------------ bad input
def test_bad_sharded_folders_are_one_line_and_nothing_is_served(cluster, sharded, tmp_path, meta_index):
    def refused(*args):
        r = run_retr("serve", "--port", "0", *args, timeout=300)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        return [line for line in r.stderr.splitlines() if line.startswith("retr: error")]

    out = refused("--sharded", tmp_path / "nowhere", "--ray-address", cluster.address)
    assert len(out) == 1 and "does not exist" in out[0]
    out = refused("--sharded", meta_index.path, "--ray-address", cluster.address)
    assert len(out) == 1 and "not a sharded" in out[0]
    other = tmp_path / "OTHER"
    from retrieval.sharded.write import build_sharded

    build_sharded([retrieval.Document(f"o{i}", f"other text {i}") for i in range(20)], other, 2, quiet=True).close()
    mixed = tmp_path / "MIXED"
    shutil.copytree(sharded, mixed)
    shutil.rmtree(mixed / "shard-001")
    shutil.copytree(other / "shard-001", mixed / "shard-001")
    out = refused("--sharded", mixed, "--ray-address", cluster.address)
    assert len(out) == 1 and "another sharded index" in out[0]
    shutil.rmtree(mixed / "shard-001")
    out = refused("--sharded", mixed, "--ray-address", "local")
    assert len(out) == 1 and "shard 1 of 2 is missing" in out[0]
    out = refused("--sharded", sharded, "--index", meta_index.path)
    assert len(out) == 1 and "--sharded cannot be combined with --index" in out[0]
