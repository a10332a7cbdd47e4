"""retrieval.ops: the same change of a folder and of a sharded folder built from the same corpus gives
the same counts and, once compacted, the same runs; adding an id the index holds is one error, the same
for both layouts, in the library, the CLI (exit 2, one line) and over HTTP (409, one JSON error)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexes.errors import DuplicateIds, InputError
from tests.conftest import run_retr

SAME = ("op", "read", "added", "replaced", "pruned", "removed", "deleted", "missing", "total")


def _queries(corpus: Path) -> dict:
    return {json.loads(l)["_id"]: json.loads(l)["text"] for l in open(corpus / "queries.jsonl", encoding="utf-8")}


def _ids(corpus: Path) -> list:
    return [json.loads(l)["_id"] for l in open(corpus / "corpus.jsonl", encoding="utf-8")]


def _run(path, queries) -> dict:
    from retrieval.sharded.index import open_index

    with open_index(path) as idx:
        res = idx.batch_search(queries, k=30, retriever="bm25")
    return {q: [(h.docid, round(h.score, 4)) for h in hs] for q, hs in res.items()}


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _holds(path, ids) -> set:
    from retrieval.sharded.index import open_index

    with open_index(path) as idx:
        return set(idx.docstore.get_many(list(ids)))


@pytest.fixture(scope="module")
def both(tmp_path_factory, small_corpus):
    """The 400 passages as one folder and as three shards (BM25)."""
    import retrieval
    from retrieval.sharded.write import build_sharded

    base = tmp_path_factory.mktemp("ops")
    retrieval.build_index(small_corpus, base / "one", quiet=True).close()
    build_sharded(small_corpus, base / "three", 3, quiet=True).close()
    return base / "one", base / "three"


def _each(both, fn):
    """``fn`` on the folder and on the sharded folder; their outcomes' shared counts agree; both pass
    retr check (the library's and the command's)."""
    from retrieval import ops

    one, three = both
    a, b = fn(one), fn(three)
    assert not a.sharded and b.sharded and a.generation is not None and b.generations
    assert {k: getattr(a, k) for k in SAME} == {k: getattr(b, k) for k in SAME}
    for path in both:
        assert ops.check(path, full=True).ok
        r = run_retr("check", "--index", path)
        assert r.returncode == 0 and r.stdout.startswith(f"ok: {path}"), r.stdout + r.stderr
    return a, b


def test_the_same_changes_give_the_same_counts_and_runs(both, small_corpus, tmp_path):
    from retrieval import ops

    one, three = both
    queries = _queries(small_corpus)
    old = _ids(small_corpus)
    assert _run(one, queries) == _run(three, queries)
    new = _jsonl(tmp_path / "new.jsonl", [{"_id": f"ops-{i}", "title": f"added {i}",
                                           "text": f"vitamin d receptor and bone density study {i}"} for i in range(7)])
    a, b = _each(both, lambda p: ops.add(p, new, ops.WriteOptions(quiet=True)))
    assert a.added == 7 and a.total == 407 and b.shards_changed >= 2
    assert _run(one, queries) == _run(three, queries)  # (additions: the statistics of both count them)
    upd = _jsonl(tmp_path / "upd.jsonl", [{"_id": old[0], "text": "a replaced passage on stem cells"},
                                          {"_id": "ops-0", "text": "the replaced vitamin d passage"},
                                          {"_id": "ops-new", "text": "an updated collection gains this one"}])
    a, _ = _each(both, lambda p: ops.update(p, upd, ops.WriteOptions(quiet=True)))
    assert (a.replaced, a.added, a.total) == (2, 1, 408)
    gone = old[5:17] + ["ops-3"]
    a, _ = _each(both, lambda p: ops.delete(p, gone + ["not-there"], ops.WriteOptions(quiet=True, missing_ok=True)))
    assert (a.deleted, a.missing, a.total) == (13, 1, 395)
    a, b = _each(both, lambda p: ops.compact(p, quiet=True))
    assert a.compacted == ("bm25",) and set(b.compacted) == {f"shard-00{i}/bm25" for i in range(3)}
    assert b.shards_changed == 3  # every shard it compacted is counted (the CLI line says so)
    assert _run(one, queries) == _run(three, queries)  # compacted: the same statistics, the same runs
    # everything that was there is still there, and nothing deleted
    kept = [d for d in old if d not in gone] + [f"ops-{i}" for i in range(7) if i != 3] + ["ops-new"]
    for path in both:
        assert _holds(path, kept) == set(kept) and not _holds(path, gone)
        info = ops.info(path)
        assert info["documents"] == len(kept) == 395 and bool(info.get("sharded")) == (path == three)


def test_a_delete_of_missing_ids_is_the_same_error(both):
    from retrieval import ops

    msgs = []
    for path in both:
        with pytest.raises(InputError) as e:
            ops.delete(path, ["no-such-id"], ops.WriteOptions(quiet=True))
        msgs.append(str(e.value).replace(str(path), "INDEX"))
    assert msgs[0] == msgs[1] and "not in the index" in msgs[0]


def test_duplicate_ids_are_one_error_in_both_layouts(both, small_corpus, tmp_path):
    from retrieval import ops
    from retrieval.types import Document

    one, three = both
    first = _ids(small_corpus)[30]
    docs = [Document("dup-new", "a new passage"), Document(first, "an id the index holds")]
    msgs = []
    for path in both:
        before = ops.info(path)["documents"]
        with pytest.raises(DuplicateIds) as e:
            ops.add(path, docs, ops.WriteOptions(quiet=True))
        assert (e.value.count, e.value.first, e.value.path) == (1, first, path)
        msgs.append(str(e.value).replace(str(path), "INDEX"))
        assert ops.info(path)["documents"] == before and not _holds(path, ["dup-new"])  # nothing was added
    assert msgs[0] == msgs[1] and msgs[0].startswith("INDEX: 1 document id(s) are already in the index")
    # the command: exit 2, one line, the same for both layouts
    corpus = _jsonl(tmp_path / "dup.jsonl", [{"_id": d.docid, "text": d.text} for d in docs])
    lines = []
    for path in both:
        r = run_retr("add", "--index", path, "--corpus", corpus, "-q")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr and "already in the index" in r.stderr
        lines.append(r.stderr.replace(str(path), "INDEX"))
    assert lines[0] == lines[1]


def test_duplicate_ids_over_http_are_one_409_in_both_layouts(both, small_corpus, tmp_path):
    from tests.server.conftest import Server

    one, three = both
    first = _ids(small_corpus)[31]
    s = Server("--index", f"one={one}", "--index", f"three={three}", "--writable", tmp=tmp_path)
    try:
        msgs = []
        for name in ("one", "three"):
            total = s.get(f"/v1/{name}").json()["documents"]
            r = s.post(f"/v1/{name}/documents", {"documents": [{"docid": "http-new", "text": "new"},
                                                               {"docid": first, "text": "again"}]})
            assert r.status_code == 409, r.text
            body = r.json()
            assert set(body) == {"error"} and body["error"]["status"] == 409
            assert "Traceback" not in r.text and str(tmp_path) not in r.text and "pytest-" not in r.text
            msgs.append(body["error"]["message"])
            assert s.get(f"/v1/{name}").json()["documents"] == total  # nothing was added
            # an update and a delete through the same route answer alike for both
            r = s.client_put(f"/v1/{name}/documents", {"documents": [{"docid": "http-new", "text": "new"}]})
            assert r.status_code == 200 and r.json()["documents"] == 1 and r.json()["total"] == total + 1, r.text
            r = s.post(f"/v1/{name}/documents/delete", {"ids": ["http-new", "never-there"]})
            assert r.status_code == 200 and r.json()["documents"] == 1 and r.json()["total"] == total, r.text
        assert msgs[0] == msgs[1] and "already in the index" in msgs[0], msgs
    finally:
        s.stop()


def test_sync_refuses_a_sharded_folder_in_one_line(both, tmp_path):
    one, three = both
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("a document")
    r = run_retr("sync", "--index", three, "--corpus", tmp_path / "docs")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "does not support a sharded index" in r.stderr


def test_a_path_that_is_no_index_is_one_error(tmp_path):
    from indexes.errors import RetrError
    from retrieval import ops

    with pytest.raises(RetrError):
        ops.compact(tmp_path / "nothing", quiet=True)
    r = run_retr("delete", "--index", tmp_path / "nothing", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_a_router_without_the_folder_writes_shard_by_shard_with_the_same_refusal(tmp_path, small_corpus):
    """Where a server's shards are folders only their own nodes hold (Ray Serve), each shard's part of
    a write is that shard's own commit: here the same routing through in-process shards, which is
    what such replicas run; the duplicate refusal is ops' error, the same message as the folder's."""
    from retrieval import ops
    from retrieval.server.sharded import ShardedServed, open_local_shards
    from retrieval.sharded.write import build_sharded
    from retrieval.types import Document

    build_sharded(small_corpus, tmp_path / "S", 3, quiet=True).close()
    record, shards = open_local_shards(tmp_path / "S")
    served = ShardedServed("s", tmp_path / "S", shards, list(record["folders"]))
    assert not served.one_commit  # (ShardedServed.local would commit through ops as one commit)
    first = _ids(small_corpus)[40]
    try:
        new = [Document(f"bys-{i}", f"text number {i}") for i in range(6)]
        assert served.write("add", new) == 6
        with pytest.raises(DuplicateIds) as e:
            served.write("add", [Document("bys-x", "new"), Document(first, "held")])
        with pytest.raises(DuplicateIds) as want:
            ops.add(tmp_path / "S", [Document("bys-x", "new"), Document(first, "held")], ops.WriteOptions(quiet=True))
        assert str(e.value) == str(want.value)
        assert served.write("update", [Document("bys-0", "changed")]) == 1
        assert served.write("delete", ["bys-1", "bys-2", "not-there"]) == 2
    finally:
        served.close()
    assert ops.check(tmp_path / "S", full=True).ok
    assert _holds(tmp_path / "S", [f"bys-{i}" for i in range(6)]) == {"bys-0", "bys-3", "bys-4", "bys-5"}
