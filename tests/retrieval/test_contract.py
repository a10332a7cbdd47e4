"""One search contract: the default pipeline (a folder answers with its tuned pipeline, else the
untuned fusion of every sub-index it holds) in every entry point, each answer naming what ran, and
the same hits (``Hit.scores`` included) in-process and over HTTP. Real indexes, a real server."""
from __future__ import annotations

import json

import pytest

from retrieval.request import ONLY, TUNED, UNTUNED, default_pipeline
from tests.conftest import retr_in_process, run_retr

Q = "does aspirin prevent colorectal cancer"


def _rows(hits):
    return [(h.docid, h.rank, h.score, h.scores, h.title, h.text, h.metadata) for h in hits]


def _close(a, b):
    """Two hits' public dicts the same but for float noise in dense scores (a query encoded in another
    process, with its own threads, differs in the last bits)."""
    assert [set(x) for x in a] == [set(y) for y in b]
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k not in ("score", "scores")} == \
            {k: v for k, v in y.items() if k not in ("score", "scores")}
        assert x["score"] == pytest.approx(y["score"], rel=1e-5)
        assert x["scores"] == pytest.approx(y["scores"], rel=1e-5)


def test_default_pipeline_rule():
    """Tuned first (over every sub-index, else the largest), else every sub-index fused BM25 first
    (aliases left out), else the only one."""
    subs = {"dense": {}, "bm25": {}, "splade": {}, "deepct-query": {"alias_of": "splade"}}
    assert default_pipeline(subs, {}).spec == "bm25+dense+splade"
    assert default_pipeline(subs, {}).source == UNTUNED
    assert default_pipeline({"bm25": {}}, {}).spec == "bm25" and default_pipeline({"bm25": {}}, {}).source == ONLY
    assert default_pipeline({"dense": {}}, {}).spec == "dense"
    tuned = default_pipeline(subs, {"bm25+dense": {"spec": "bm25+dense:rrf(k=60)"}})
    assert (tuned.spec, tuned.source) == ("bm25+dense", TUNED)
    both = {"bm25+dense": {}, "bm25+dense+splade": {}}
    assert default_pipeline(subs, both).spec == "bm25+dense+splade"
    assert default_pipeline(subs, {"bm25+gone": {}}).source == UNTUNED  # a tuning of a removed sub-index


def test_a_dense_folder_answers_with_the_hybrid(small_dense_index):
    idx = small_dense_index
    assert str(idx.default_pipeline()) == "bm25+dense (untuned fusion)"
    assert idx.info()["default_pipeline"] == {"spec": "bm25+dense", "source": UNTUNED}
    got, want = idx.search(Q, k=5), idx.search(Q, k=5, retriever="bm25+dense")
    assert _rows(got) == _rows(want) and got
    assert got.pipeline == want.pipeline == str(idx.pipeline("bm25+dense"))
    assert all(set(h.scores) == {"bm25", "dense"} for h in got)
    b = idx.batch_search([Q], k=5)
    assert _rows(b["0"]) == _rows(idx.batch_search([Q], k=5, retriever="bm25+dense")["0"])
    assert b["0"].pipeline == got.pipeline


def test_an_explicit_retriever_is_unchanged(small_dense_index, small_index):
    """A named retriever runs as named; a BM25-only folder's default is BM25 itself."""
    hits = small_dense_index.search(Q, k=5, retriever="bm25")
    assert hits.pipeline == "bm25" and [h.scores for h in hits] == [{"bm25": h.score} for h in hits]
    assert _rows(small_index.search(Q, k=5)) == _rows(small_index.search(Q, k=5, retriever="bm25"))
    assert small_index.search(Q, k=5).pipeline == "bm25"
    assert str(small_index.default_pipeline()) == "bm25 (only sub-index)"
    assert [h.docid for h in hits] == [h.docid for h in small_index.search(Q, k=5)]


def test_cli_search_says_which_pipeline_ran(small_dense_index):
    r = retr_in_process("search", "--index", small_dense_index.path, "--k", "5", "--format", "jsonl", Q)
    assert r.returncode == 0, r.stderr
    assert "retr: pipeline bm25+dense (untuned fusion)" in r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    want = small_dense_index.search(Q, k=5, retriever="bm25+dense")
    assert [d["docid"] for d in got] == [h.docid for h in want]
    assert [d["scores"] for d in got] == [h.scores for h in want]
    named = retr_in_process("search", "--index", small_dense_index.path, "--retriever", "bm25", "--k", "3", Q)
    assert named.returncode == 0 and "retr: pipeline" not in named.stderr
    info = retr_in_process("info", "--index", small_dense_index.path)
    assert "default    bm25+dense   (untuned fusion" in info.stdout


def test_cli_bad_value_is_one_line(small_index):
    r = run_retr("search", "--index", small_index.path, "--retriever", "bm25+nope", Q)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "nope" in r.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory, small_index, small_dense_index):
    from tests.server.conftest import Server

    s = Server("--index", f"sf={small_index.path}", "--index", f"hy={small_dense_index.path}",
               tmp=tmp_path_factory.mktemp("contract-srv"))
    yield s
    s.stop()


def test_http_and_client_answer_as_in_process(served, small_dense_index, small_index):
    from retrieval.client import Client
    from retrieval.types import hit_dict

    r = served.post("/v1/hy/search", json={"query": Q, "k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    want = small_dense_index.search(Q, k=5)
    assert body["retriever"] == want.pipeline and body["pipeline_source"] == UNTUNED
    _close(body["hits"], [hit_dict(h) for h in want])
    named = served.post("/v1/sf/search", json={"query": Q, "k": 5, "retriever": "bm25"}).json()
    assert named["pipeline_source"] == "named"
    assert named["hits"] == [hit_dict(h) for h in small_index.search(Q, k=5)]
    c = Client(served.url, index="hy")
    got = c.search(Q, k=5)
    _close([hit_dict(h) for h in got], [hit_dict(h) for h in want])
    assert got.pipeline == want.pipeline
    one = Client(served.url, index="sf").search(Q, k=5)
    assert _rows(one) == _rows(small_index.search(Q, k=5))  # Hit.scores {"bm25": s} both ways
    _close([hit_dict(h) for h in c.batch_search([Q], k=5)["0"]],
           [hit_dict(h) for h in small_dense_index.batch_search([Q], k=5)["0"]])


def test_http_bad_value_is_a_4xx(served):
    r = served.post("/v1/hy/search", json={"query": Q, "k": 5, "retriever": "bm25+nope"})
    assert r.status_code == 400 and "nope" in r.json()["error"]["message"]
    r = served.post("/v1/hy/search", json={"query": Q, "k": 0})
    assert r.status_code in (400, 422)


def test_adapters_default_to_the_folder_s_pipeline(small_dense_index):
    lc = pytest.importorskip("retrieval.integrations.langchain")
    want = small_dense_index.search(Q, k=10, retriever="bm25+dense")
    docs = lc.RetrRetriever(index=small_dense_index).invoke(Q)
    assert [d.id for d in docs] == [h.docid for h in want]
    assert docs[0].metadata["scores"] == want[0].scores
    li = pytest.importorskip("retrieval.integrations.llama_index")
    nodes = li.RetrRetriever(small_dense_index).retrieve(Q)
    assert [n.node.id_ for n in nodes] == [h.docid for h in want]


def test_pyterrier_defaults_to_the_folder_s_pipeline(small_dense_index):
    pt_mod = pytest.importorskip("retrieval.integrations.pyterrier")
    import pandas as pd

    res = pt_mod.RetrRetriever(small_dense_index, k=5)(pd.DataFrame({"qid": ["1"], "query": [Q]}))
    want = small_dense_index.search(Q, k=5, retriever="bm25+dense")
    assert list(res["docno"]) == [h.docid for h in want]


from tests.retrieval.test_sharded import pair  # noqa: E402,F401  the same passages as a folder and 2 shards


def test_a_sharded_folder_has_the_folder_s_default(pair):
    single, sharded, _base = pair
    assert sharded.default_pipeline() == single.default_pipeline()
    assert sharded.info()["default_pipeline"] == {"spec": "bm25+dense", "source": UNTUNED}
    a, b = single.search(Q, k=5), sharded.search(Q, k=5)
    assert _rows(a) == _rows(b) and a.pipeline == b.pipeline
    ba, bb = single.batch_search([Q], k=5), sharded.batch_search([Q], k=5)
    assert _rows(ba["0"]) == _rows(bb["0"]) and bb["0"].pipeline == a.pipeline
    one = sharded.search(Q, k=3, retriever="bm25")
    assert [h.scores for h in one] == [{"bm25": h.score} for h in one]


def test_http_index_description_names_the_default(served):
    d = served.get("/v1/hy").json()
    assert d["default_pipeline"] == {"spec": "bm25+dense", "source": UNTUNED}
    assert served.get("/v1/sf").json()["default_pipeline"] == {"spec": "bm25", "source": ONLY}


# -------------------------------------------------------------------- one Searcher surface

def _public(cls):
    import inspect

    return {n: m for n, m in inspect.getmembers(cls) if not n.startswith("_")}


def _surface_differences(a_cls, b_cls):
    """(public names only ``a_cls`` has, those only ``b_cls`` has, shared methods whose parameters
    differ). The parameters, not the return type: a snapshot of each returns its own class."""
    import inspect

    def params(f):
        return list(inspect.signature(f).parameters.values())

    a, b = _public(a_cls), _public(b_cls)
    differ = {name for name in set(a) & set(b) if callable(a[name]) and callable(b[name])
              and params(a[name]) != params(b[name])}
    return set(a) - set(b), set(b) - set(a), differ


def test_a_folder_and_a_sharded_folder_share_one_surface():
    """Index and ShardedIndex: the same public names, every shared method with the same parameters,
    and the Searcher protocol's surface among them."""
    from retrieval.index import Index
    from retrieval.searcher import SURFACE, Searcher
    from retrieval.sharded.index import ShardedIndex

    assert _surface_differences(Index, ShardedIndex) == (set(), set(), set())
    assert set(SURFACE) - {"__len__"} <= set(_public(Index)) and hasattr(ShardedIndex, "__len__")
    assert all(name in dir(Searcher) for name in SURFACE)

    class Wider(ShardedIndex):  # the comparison can fail: a name of its own, a parameter more
        def reading(self):
            return None

        def refresh(self, hard: bool = False) -> bool:
            return False

    assert _surface_differences(Index, Wider) == (set(), {"reading"}, {"refresh"})


def test_both_are_searchers(small_index, pair):
    from retrieval.searcher import Searcher

    _single, sharded, _base = pair
    assert isinstance(small_index, Searcher) and isinstance(sharded, Searcher)
    assert sharded.highlight("aspirin", ["Aspirin and cancer"]) == small_index.highlight("aspirin", ["Aspirin and cancer"])
    assert sharded.refresh() is False


def test_the_surfaces_shared_steps_answer_alike(pair):
    """The names that left the allow-lists answer on a sharded folder as on the folder holding its
    documents; a folder snapshot's public steps (member, allowed, filtered, metadata: what a shard's
    search runs) give the folder's own filtered search."""
    single, sharded, _base = pair
    flt = {"shrad": "odd", "docid": {"in": ["1"]}, "year": 2000}
    assert sharded.unknown_fields(flt) == single.unknown_fields(flt) == ["shrad"]
    assert sharded.unknown_fields(None) == single.unknown_fields(None) == []
    assert sharded.follow() is False and single.local() == [single]
    assert [ix.path.parent for ix in sharded.local()] == [sharded.path] * 2
    with single.snapshot() as s:
        allowed = s.allowed({"shard": "odd"})
        assert 0 < len(allowed) < len(s.metadata) == len(single)
        got = s.filtered(s.member("bm25"), Q, 5, allowed)
    want = single.search(Q, k=5, retriever="bm25", filter={"shard": "odd"}, text=False)
    assert [(d, x) for d, x, *_ in got] == [(h.docid, h.score) for h in want] and want


def test_a_request_value_is_checked_once(small_index):
    from retrieval.request import RequestError, SearchRequest

    for bad in ({"k": 0}, {"k": True}, {"depth": -1}, {"retriever": ""}, {"text": "yes"},
                {"filter": {"year": {"bogus": 1}}}, {"nope": 1}):
        with pytest.raises(RequestError):
            SearchRequest.of(**bad)
    req = SearchRequest(k=3, retriever="bm25")
    assert _rows(small_index.search(Q, request=req)) == _rows(small_index.search(Q, k=3, retriever="bm25"))
    with pytest.raises(RequestError, match="either"):
        small_index.search(Q, k=5, request=req)
    assert _rows(small_index.batch_search([Q], request=req.but(text=False))["0"]) == \
        _rows(small_index.batch_search([Q], k=3, retriever="bm25")["0"])


def test_per_document_is_a_request_option_everywhere(served, small_dense_index, pair):
    """per_document goes through the request in Python, HTTP and the Client alike (a passage without a
    document id in its metadata is a document of its own), and a sharded folder refuses it in one line."""
    from retrieval.client import Client
    from retrieval.request import SearchRequest
    from retrieval.types import hit_dict

    want = small_dense_index.search(Q, k=4, retriever="bm25", per_document=True)
    assert [h.docid for h in want] == [h.docid for h in small_dense_index.search(Q, k=4, retriever="bm25")]
    body = served.post("/v1/hy/search", json={"query": Q, "k": 4, "retriever": "bm25", "per_document": True}).json()
    assert body["hits"] == [hit_dict(h) for h in want]
    got = Client(served.url, index="hy").search(Q, request=SearchRequest(k=4, retriever="bm25", per_document=True))
    assert _rows(got) == _rows(want)
    _single, sharded, _base = pair
    from indexes.errors import InputError

    with pytest.raises(InputError, match="per_document"):
        sharded.search(Q, k=4, per_document=True)


def test_a_tuned_folder_answers_with_its_tuned_pipeline(tmp_path, small_dense_index, small_corpus):
    import shutil

    import retrieval
    from retrieval.collections import read_queries
    from retrieval.datasets.qrels import read_qrels
    from retrieval.tune import tune

    shutil.copytree(small_dense_index.path, tmp_path / "T")
    idx = retrieval.open_index(tmp_path / "T")
    rep = tune(idx, read_queries(small_corpus / "queries.jsonl"), read_qrels(small_corpus / "qrels" / "test.tsv"),
               depth=100, threads=1, allow_test=True, quiet=True)
    assert (idx.default_pipeline().spec, idx.default_pipeline().source) == ("bm25+dense", TUNED)
    hits = idx.search(Q, k=5)
    assert hits.pipeline == rep["spec"] and _rows(hits) == _rows(idx.search(Q, k=5, retriever=rep["spec"]))
    r = retr_in_process("search", "--index", tmp_path / "T", "--k", "3", Q)
    assert r.returncode == 0 and "retr: pipeline bm25+dense (tuned)" in r.stderr
