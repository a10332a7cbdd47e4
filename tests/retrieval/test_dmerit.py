"""D-MERIT by name (`dmerit:PATH`): a small copy written by the test in the layout the reader takes (records of
query, member, candidate article and evidence passage, flat or nested; JSONL, JSON or Parquet), read as
queries, qrels and a corpus, and `retr eval partial` run on it through the real `retr` against the same
judgments written to a qrels file by the test itself."""
from __future__ import annotations

import json
import random

import pytest

from retrieval.datasets import dmerit
from indexes.errors import InputError
from tests.conftest import retr_in_process, run_retr

WORDS = ("river valley town district lake mountain festival railway museum bridge harbour castle forest island "
         "village abbey canal market university stadium").split()
GROUPS = [
    ("q1", "names of rivers in Norway that flow into a fjord", "Norway fjord river"),
    ("q2", "names of castles in Scotland built before 1400", "Scotland castle medieval"),
    ("q3", "names of railway museums in Wales", "Wales railway museum"),
    ("q4", "names of islands in the Baltic Sea with a harbour", "Baltic island harbour"),
    ("q5", "names of abbeys in Normandy founded by Benedictines", "Normandy abbey Benedictine"),
]


def records(seed: int = 0) -> list[dict]:
    """Flat D-MERIT records: per query some evidence passages (one member each, some members with two) and
    a few candidates judged not to be evidence (label 0); every passage has its article and an id. Passages
    share words across groups (evidence names only part of its group, candidates much of another), so BM25
    ranks them imperfectly and differently per k1 and b."""
    rng = random.Random(seed)
    topics = [t.split() for _, _, t in GROUPS]
    out, n = [], 0
    for (qid, query, topic), words in zip(GROUPS, topics):
        others = [w for t in topics if t is not words for w in t]
        for m in range(rng.randint(3, 6)):
            member = f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()}{m}"
            for e in range(rng.choice((1, 1, 2))):
                n += 1
                filler = rng.sample(WORDS, rng.randint(3, 20)) + rng.sample(others, 2) + rng.sample(words, 1)
                rng.shuffle(filler)
                out.append({"query_id": qid, "query": query, "member": member, "candidate": member,
                            "evidence_id": f"p{n}", "label": 1, "evidence": f"{member} ({e}): {' '.join(filler)}."})
        for _ in range(3):
            n += 1
            filler = rng.sample(WORDS, rng.randint(3, 12)) + rng.sample(words, 2) + rng.sample(others, 1)
            out.append({"query_id": qid, "query": query, "member": "", "candidate": f"Other {n}",
                        "evidence_id": f"p{n}", "label": 0, "evidence": " ".join(filler) + "."})
    return out


def expected(recs):
    queries = {r["query_id"]: r["query"] for r in recs}
    qrels: dict = {}
    for r in recs:
        qrels.setdefault(r["query_id"], {})[r["evidence_id"]] = r["label"]
    texts = {r["evidence_id"]: (r["candidate"], r["evidence"]) for r in recs}
    return queries, qrels, texts


def write_jsonl(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def nested(recs, drop=()):
    """The same records as one object per query with a list of evidence entries."""
    by_q: dict = {}
    for r in recs:
        q = by_q.setdefault(r["query_id"], {"query_id": r["query_id"], "query": r["query"], "evidence": []})
        q["evidence"].append({"id": r["evidence_id"], "text": r["evidence"], "title": r["candidate"],
                              "member": r["member"], "label": r["label"]})
    out = list(by_q.values())
    for q in out:
        for k in drop:
            q.pop(k, None)
    return out


def test_flat_records_give_queries_qrels_and_passages(tmp_path):
    recs = records()
    d = dmerit.read(f"dmerit:{write_jsonl(tmp_path / 'dmerit.jsonl', recs)}")
    queries, qrels, texts = expected(recs)
    assert d.queries == queries and d.qrels == qrels
    assert {docid: (title, text) for docid, title, text in d.passages()} == texts
    assert sum(g > 0 for q in qrels.values() for g in q.values()) > len(GROUPS) * 3


def test_nested_json_and_parquet_layouts_read_the_same(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    recs = records(1)
    flat = dmerit.read(f"dmerit:{write_jsonl(tmp_path / 'flat.jsonl', recs)}")
    (tmp_path / "nested.json").write_text(json.dumps(nested(recs)), encoding="utf-8")
    folder = tmp_path / "parquet"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(recs[:20]), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(recs[20:]), folder / "part-1.parquet")
    for source in (tmp_path / "nested.json", folder):
        other = dmerit.read(f"dmerit:{source}")
        assert (other.queries, other.qrels, other.texts) == (flat.queries, flat.qrels, flat.texts), source


def test_ids_are_derived_from_the_text_where_the_release_gives_none(tmp_path):
    recs = records(2)
    bare = [{k: v for k, v in r.items() if k not in ("query_id", "evidence_id")} for r in recs]
    flat = dmerit.read(f"dmerit:{write_jsonl(tmp_path / 'bare.jsonl', bare)}")
    by_query = nested([dict(r, query_id=r["query"], evidence_id=None) for r in bare], drop=("query_id",))
    for q in by_query:
        for e in q["evidence"]:
            del e["id"]
    (tmp_path / "bare.json").write_text(json.dumps({"data": by_query}), encoding="utf-8")
    other = dmerit.read(f"dmerit:{tmp_path / 'bare.json'}")
    assert (other.queries, other.qrels, other.texts) == (flat.queries, flat.qrels, flat.texts)
    queries, qrels, texts = expected(recs)
    assert sorted(flat.queries.values()) == sorted(queries.values())
    assert all(q.startswith("q") and len(q) == 13 for q in flat.queries)
    assert sorted(sorted(q.values()) for q in flat.qrels.values()) == sorted(sorted(q.values()) for q in qrels.values())
    assert {d for q in flat.qrels.values() for d in q} == set(flat.texts) and all(d.startswith("dm") for d in flat.texts)
    assert sorted(flat.texts.values()) == sorted(texts.values())


@pytest.mark.parametrize("content,needle", [
    ('{"query_id": "q1", "evidence": "x"}\n', "dmerit.jsonl:1: no query text (query or query_text or question); "
                                              "the record has evidence, query_id"),
    ('{"query": "a", "evidence_id": "p1", "evidence": "one"}\n{"query": "a", "evidence_id": "p1", "evidence": '
     '"two"}\n', "dmerit.jsonl:2: passage 'p1' appears with two different texts"),
    ('{"query": "a", "evidence": "x", "label": "yes"}\n', "dmerit.jsonl:1: relevance 'yes' is not an integer"),
    ('{"query": "a", "evidence": "x"}\n{"query": \n', "dmerit.jsonl:2: malformed JSON"),
    ('{"query": "a", "query_id": "q 1", "evidence": "x"}\n', "query id 'q 1' is empty or holds whitespace"),
    ('{"query": "a", "title": "only a title"}\n', "an evidence entry with neither a passage id"),
])
def test_bad_records_are_one_error_naming_file_and_record(tmp_path, content, needle):
    (tmp_path / "dmerit.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as e:
        dmerit.read(f"dmerit:{tmp_path / 'dmerit.jsonl'}")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_missing_copies_are_one_line_at_the_command_line(tmp_path):
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 p1 1 1.0 t\n")
    for source, needle in ((tmp_path / "nowhere", "no such file or folder"),
                           (tmp_path, "the folder holds no .jsonl")):
        r = run_retr("eval", "--qrels", f"dmerit:{source}", run)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines() == [f"retr: error: dmerit:{source}: {needle}" +
                                                 r.stderr.strip().split(needle, 1)[1]]


@pytest.fixture(scope="module")
def dmerit_runs(tmp_path_factory):
    """An index of the copy's passages and three BM25 runs of its queries (different k1/b), all by name."""
    tmp = tmp_path_factory.mktemp("dmerit")
    recs = records(3)
    source = f"dmerit:{write_jsonl(tmp / 'dmerit.jsonl', recs)}"
    r = run_retr("index", "--corpus", source, "--index", tmp / "IDX", "-q")
    assert r.returncode == 0, r.stderr
    runs = []
    for i, (k1, b) in enumerate(((0.9, 0.4), (0.2, 0.1), (2.5, 1.0))):
        run = tmp / f"bm25-{i}.trec"
        # the first run by a real `retr` process, the other two through its entry point in this one
        r = (run_retr if i == 0 else retr_in_process)("search", "--index", tmp / "IDX", "--queries", source, "--k1",
                                                      k1, "--b", b, "-o", run, "-q")
        assert r.returncode == 0, r.stderr
        runs.append(run)
    return tmp, source, recs, runs


def test_the_corpus_and_queries_by_name_are_the_copy_s(dmerit_runs):
    tmp, source, recs, runs = dmerit_runs
    queries, qrels, texts = expected(recs)
    info = json.loads(run_retr("info", "--index", tmp / "IDX", "--json").stdout)
    assert info["documents"] == len(texts)
    assert {line.split()[0] for line in runs[0].read_text().splitlines()} == set(queries)
    assert {line.split()[2] for line in runs[0].read_text().splitlines()} <= set(texts)


def test_partial_annotation_study_runs_on_d_merit(dmerit_runs, tmp_path):
    tmp, source, recs, runs = dmerit_runs
    _, qrels, _ = expected(recs)
    qrels_file = tmp_path / "qrels.txt"
    qrels_file.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))

    def partial(q, retr=run_retr):
        args = ["eval", "partial", "--qrels", q, "--json", "-q", "--seeds", "3", "--budget", "1", "--budget", "50%"]
        for run in runs:
            args += ["--run", run]
        r = retr(*args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    by_name = partial(source)
    assert by_name == partial(qrels_file, retr_in_process)  # the reference (a file) in this process
    assert by_name["queries"] == len(GROUPS) and len(by_name["systems"]) == 3
    assert [b["label"] for b in by_name["budgets"]] == ["keep 1", "keep 50%"]

    def means(q, retr=run_retr):
        r = retr("eval", "--qrels", q, *runs, "--json", "-m", "nDCG@10,AP,R@100")
        assert r.returncode == 0, r.stderr
        return [x["means"] for x in json.loads(r.stdout)["runs"]]

    assert means(source) == means(qrels_file, retr_in_process)
