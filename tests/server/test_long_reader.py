"""A served index follows every commit made by other processes (issue #24, item 1).

`retr serve` holds one open Index for its whole life. The issue's sequence, with real `retr`
processes as the writers: add 300 passages, delete 100, update 100 and add 50 with it, compact;
after each, the server must answer the new count, the new texts and the new documents, while
client threads search it the whole time and every one of their requests succeeds."""
from __future__ import annotations

import json
import threading

import httpx

import retrieval
from tests.conftest import DATA, need, run_retr
from tests.server.conftest import Server


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_served_index_follows_adds_deletes_updates_and_compactions_by_other_processes(tmp_path):
    cran = need(DATA / "cranfield")
    path = tmp_path / "IDX"
    assert run_retr("index", "--corpus", cran, "--index", path, "--empty", "skip", "-q").returncode == 0
    n0 = len(retrieval.open_index(path))
    srv = Server("--index", f"cr={path}", tmp=tmp_path)
    stop, failures, searches = threading.Event(), [], [0]

    def client(i):
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            while not stop.is_set():
                r = c.post("/v1/cr/search", json={"query": ["wing slipstream", "boundary layer heat", "shock"][i % 3],
                                                  "k": 20, "text": True})
                searches[0] += 1
                if r.status_code != 200 or len(r.json()["hits"]) != 20:
                    failures.append((r.status_code, r.text[:300]))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()

    def served():
        info = srv.get("/v1/cr")
        assert info.status_code == 200, info.text
        return info.json()["documents"]

    def texts(ids):
        r = srv.post("/v1/cr/documents/get", json={"ids": ids})
        assert r.status_code == 200, r.text
        return {d["docid"]: d["text"] for d in r.json()["documents"]}

    try:
        added = write_jsonl(tmp_path / "add.jsonl", [{"_id": f"a{i}", "text": f"zorblat added passage {i}"}
                                                     for i in range(300)])
        r = run_retr("add", "--index", path, "--corpus", added, "-q")
        assert r.returncode == 0, r.stderr
        assert served() == n0 + 300 and srv.get("/v1/cr").json()["generation"] == 1
        assert len(texts([f"a{i}" for i in range(300)])) == 300
        gone = tmp_path / "gone.txt"
        gone.write_text("".join(f"a{i}\n" for i in range(100)))
        r = run_retr("delete", "--index", path, "--ids", gone, "-q")
        assert r.returncode == 0, r.stderr
        assert served() == n0 + 200
        assert texts([f"a{i}" for i in range(100)]) == {}
        changed = write_jsonl(tmp_path / "upd.jsonl",
                              [{"_id": f"a{i}", "text": f"quibbix changed passage {i}"} for i in range(100, 200)]
                              + [{"_id": f"n{i}", "text": f"quibbix new passage {i}"} for i in range(50)])
        r = run_retr("update", "--index", path, "--corpus", changed, "-q")
        assert r.returncode == 0, r.stderr
        assert served() == n0 + 250
        now = texts([f"a{i}" for i in range(100, 200)] + [f"n{i}" for i in range(50)])
        assert len(now) == 150 and all(t.startswith("quibbix") for t in now.values())
        hits = srv.post("/v1/cr/search", json={"query": "quibbix", "k": 1000, "text": False}).json()["hits"]
        assert len(hits) == 150
        assert srv.post("/v1/cr/search", json={"query": "zorblat", "k": 1000}).json()["hits"].__len__() == 100
        r = run_retr("compact", "--index", path, "-q")
        assert r.returncode == 0, r.stderr
        assert served() == n0 + 250
        assert len(srv.post("/v1/cr/search", json={"query": "quibbix", "k": 1000}).json()["hits"]) == 150
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        srv.stop()
    assert not failures, failures[:5]
    assert searches[0] > 20
    r = run_retr("check", "--index", path, "--full")
    assert r.returncode == 0, r.stdout + r.stderr
