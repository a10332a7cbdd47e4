"""The live index: add, update, delete and compact as generations of one folder.

Real Lucene, faiss, MiniLM and SQLite on the 400-passage fixtures; crashes are real
``kill -9`` of a real ``retr`` process stopped at a named point (RETR_TEST_PAUSE)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import retrieval
from indexes import folder
from indexes import generations as gens
from indexes.errors import InputError
from retrieval.check import check_index
from retrieval.types import Document
from retrieval.writer import add_documents, compact, delete_documents, update_documents
from tests.conftest import ROOT, RetrProcess, retr_in_process, run_retr


# ----------------------------------------------------------------------------------------- helpers
def assert_checks(path, full=True):
    rep = check_index(path, full=full, strict=True)
    assert rep.ok, rep.problems
    return rep


def corpus_now(idx):
    """The documents of the index's current generation, in its store's order."""
    return [Document(d, text, title, meta or {}) for d, title, text, meta in idx.docstore.iter_docs()]


def trec(results):
    return [f"{q} Q0 {h.docid} {h.rank} {h.score:.6f}" for q, hits in results.items() for h in hits]


def folders(path):
    return sorted(p.name for p in Path(path).iterdir())


def lucene_live(idx, name="bm25"):
    from indexes.lucene import doc_count

    return doc_count(idx.path / idx.manifest["subindexes"][name]["path"])


class Paused(RetrProcess):
    """A real `retr` process that runs until it reaches RETR_TEST_PAUSE=point (its stderr says so)."""

    def __init__(self, point, *args):
        super().__init__(*args, pause=point)
        self.wait_for(point)

    def rest(self) -> str:
        """What the process wrote on stderr after the pause (once it has exited)."""
        out = []
        while (line := self.lines.get(timeout=600)) is not None:
            out.append(line)
        return "".join(out)

    def children(self):
        out = []
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    stat = (p / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    out.append(int(p.name))
        return out


def gone(pid, within=120):
    """Whether process ``pid`` has exited (waiting for the kernel up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has exited
            return True
        time.sleep(0.2)
    return False


NEW = [Document("new-1", "zyxwvut quokka habitat on rottnest island", "Quokka"),
       Document("new-2", "marsupial populations and island ecology of the quokka"),
       Document("new-3", "a third passage about wombat burrows and soil aeration")]


@pytest.fixture
def bm25_copy(tmp_path, small_index):
    path = tmp_path / "IDX"
    shutil.copytree(small_index.path, path)
    return path


# ----------------------------------------------------------------------------------------- API
def test_delete_update_add_then_compact_equals_a_fresh_build(tmp_path, small_corpus):
    """Every retriever loses and gains the same documents; after compaction BM25's run is the
    TREC file of a fresh build of the final corpus and dense scores equal it to 1e-5.
    (Dense: SPLADE-tiny's BERT body, mean pooling, faiss Flat: the fastest local encoder.)"""
    from retrieval.dense.subindex import DenseSpec
    from retrieval.writer import add_subindex

    path = tmp_path / "IDX"
    spec = DenseSpec(model="splade-tiny")
    retrieval.build_index(small_corpus, path, subindexes={"dense": spec}, quiet=True)
    queries = retrieval.read_queries(small_corpus / "queries.jsonl")
    first = retrieval.open_index(path)
    docs, g0 = corpus_now(first), first.generation
    first.close()
    gone_docs = [docs[3], docs[50], docs[399]]
    idx = delete_documents(path, [d.docid for d in gone_docs], quiet=True)
    assert idx.generation == g0 + 1 and len(idx) == 397 == lucene_live(idx) == len(idx.docstore)
    assert_checks(path)
    for d in gone_docs:  # its exact title finds it in no retriever, and the store has no text for it
        for r in ("bm25", "dense"):
            assert d.docid not in [h.docid for h in idx.search(d.title, k=10, retriever=r, text=False)], (r, d.docid)
        assert idx.get(d.docid) is None
    # deleted documents still count in BM25's collection statistics until compaction
    fresh_before = retrieval.build_index(corpus_now(idx), tmp_path / "F0", quiet=True)
    assert trec(idx.batch_search(queries, k=20, retriever="bm25")) != \
        trec(fresh_before.batch_search(queries, k=20, retriever="bm25"))

    changed = Document(docs[7].docid, "zyxwvut replaced text about penguin colonies", "Penguins")
    # the old text finds the document: a prefix for BM25, the whole passage for dense (cosine 1; a prefix
    # need not be nearest under an encoder not trained for retrieval)
    old_text = {"bm25": docs[7].text[:300], "dense": docs[7].contents}
    for r in ("bm25", "dense"):
        assert idx.search(old_text[r], k=1, retriever=r, text=False)[0].docid == docs[7].docid, r
    idx = update_documents(idx, [changed, NEW[0]], quiet=True)
    assert idx.generation == g0 + 2 and len(idx) == 398
    assert idx.get(docs[7].docid).text == changed.text
    for r in ("bm25", "dense"):  # the new text is found, the old one is gone
        assert idx.search("zyxwvut penguin colonies", k=1, retriever=r, text=False)[0].docid == docs[7].docid, r
        assert idx.search(old_text[r], k=1, retriever=r, text=False)[0].docid != docs[7].docid, r
    idx = add_documents(idx, NEW[1:], quiet=True)
    assert len(idx) == 400 and idx.manifest["subindexes"]["dense"]["doc_count"] == 400
    assert_checks(path)

    idx = compact(idx, quiet=True)
    assert idx.generation == g0 + 4
    assert_checks(path)
    e = idx.manifest["subindexes"]
    assert e["bm25"]["deleted_pending"] == e["dense"]["deleted_pending"] == 0
    assert not any(n.startswith("delta-") or n.startswith("deleted-") for n in os.listdir(path / e["dense"]["path"]))
    final = corpus_now(idx)
    fresh = retrieval.build_index(final, tmp_path / "F", quiet=True)
    assert trec(idx.batch_search(queries, k=100, retriever="bm25")) == \
        trec(fresh.batch_search(queries, k=100, retriever="bm25"))
    fresh = add_subindex(fresh, spec, quiet=True)
    ours = idx.batch_search(queries, k=20, retriever="dense")
    theirs = fresh.batch_search(queries, k=20, retriever="dense")
    for q in queries:
        a = {h.docid: h.score for h in ours[q.qid]}
        b = {h.docid: h.score for h in theirs[q.qid]}
        common = set(a) & set(b)
        assert len(common) >= 19, q.qid  # the 20th may differ by a tie within float noise
        assert all(abs(a[d] - b[d]) < 1e-5 for d in common), q.qid


def test_a_change_links_unchanged_files_and_writes_only_what_changed(bm25_copy):
    idx = retrieval.open_index(bm25_copy)
    old_dir = bm25_copy / idx.manifest["subindexes"]["bm25"]["path"]
    before = {p.name: p.stat().st_ino for p in old_dir.iterdir() if p.name != "write.lock"}
    idx2 = add_documents(idx, NEW, quiet=True)
    new_dir = bm25_copy / idx2.manifest["subindexes"]["bm25"]["path"]
    assert new_dir != old_dir and old_dir.exists()  # `idx` still holds generation 0
    after = {p.name: p.stat().st_ino for p in new_dir.iterdir()}
    segments = [n for n in before if not n.startswith("segments_")]
    assert segments and all(after.get(n) == before[n] for n in segments)  # the same files, linked
    new_bytes = sum((new_dir / n).stat().st_size for n in after if after[n] not in before.values())
    assert new_bytes < 0.2 * sum((old_dir / n).stat().st_size for n in before)
    assert idx.search("zyxwvut quokka", k=1, text=False)[0].docid == "new-1"  # idx moved on by itself
    idx.close()
    idx2 = delete_documents(idx2, ["new-2"], quiet=True)  # its GC removes generation 0, nobody holds it
    assert not old_dir.exists()
    assert_checks(bm25_copy)


def test_a_reader_keeps_its_generation_until_it_refreshes(bm25_copy):
    pinned = retrieval.open_index(bm25_copy, auto_refresh=False)
    following = retrieval.open_index(bm25_copy)
    victim = corpus_now(pinned)[10]
    hits0 = [h.docid for h in pinned.search(victim.title, k=5, text=False)]
    assert victim.docid in hits0
    delete_documents(bm25_copy, [victim.docid], quiet=True)
    add_documents(bm25_copy, NEW[:1], quiet=True)
    # the pinned reader still searches generation 0: same hits, same text, its folder kept
    assert pinned.generation == 0 and [h.docid for h in pinned.search(victim.title, k=5, text=False)] == hits0
    assert pinned.get(victim.docid).text == victim.text and pinned.get("new-1") is None
    assert "new-1" not in [h.docid for h in pinned.search("zyxwvut quokka", k=5, text=False)]
    assert (bm25_copy / pinned.manifest["subindexes"]["bm25"]["path"]).exists()
    # the other moved on at its next search
    assert following.search("zyxwvut quokka", k=1, text=False)[0].docid == "new-1"
    assert following.generation == 2 and following.get(victim.docid) is None
    old = bm25_copy / "bm25"
    assert old.exists()
    assert pinned.refresh() and pinned.generation == 2 and not pinned.refresh()
    assert pinned.get(victim.docid) is None
    # readers delete nothing (as Lucene's): the old folders wait for the next writer, now that nobody holds them
    assert old.exists()  # (bm25.g1, which no reader held, went at the second commit)
    assert following.search(victim.title, k=5, text=False)
    compact(bm25_copy, quiet=True)
    assert not old.exists() and not (bm25_copy / "bm25.g1").exists()
    assert_checks(bm25_copy)


def test_bad_changes_change_nothing(bm25_copy):
    before = (bm25_copy / "manifest.json").read_text()
    with pytest.raises(InputError, match="already in the index"):
        add_documents(bm25_copy, [Document(corpus_now(retrieval.open_index(bm25_copy))[0].docid, "again")], quiet=True)
    with pytest.raises(InputError, match="not in the index"):
        delete_documents(bm25_copy, ["no-such-doc"], quiet=True)
    with pytest.raises(InputError, match="without documents"):
        delete_documents(bm25_copy, [d.docid for d in corpus_now(retrieval.open_index(bm25_copy))], quiet=True)
    assert (bm25_copy / "manifest.json").read_text() == before
    assert folders(bm25_copy) == [".lock", ".readers", "bm25", "docs.sqlite"] + \
        [n for n in ("docs.sqlite-shm", "docs.sqlite-wal") if (bm25_copy / n).exists()] + ["manifest.json"]
    rep = {}
    idx = delete_documents(bm25_copy, ["no-such-doc", corpus_now(retrieval.open_index(bm25_copy))[0].docid],
                           quiet=True, missing_ok=True, report=rep)
    assert rep == {"asked": 2, "deleted": 1, "missing": 1, "generation": 1, "documents": 399} and len(idx) == 399
    assert_checks(bm25_copy)


def test_a_format_1_folder_opens_and_migrates_on_its_first_change(tmp_path, small_index):
    """A folder written before generations existed: schema-1 store, no generation in the manifest."""
    import sqlite3

    path = tmp_path / "OLD"
    shutil.copytree(small_index.path, path, ignore=shutil.ignore_patterns(".readers", ".lock", "*-wal", "*-shm"))
    rows = sqlite3.connect(path / "docs.sqlite").execute("SELECT docid, title, text, meta FROM docs ORDER BY rowid").fetchall()
    (path / "docs.sqlite").unlink()
    con = sqlite3.connect(path / "docs.sqlite")
    con.execute("CREATE TABLE docs (docid TEXT PRIMARY KEY, title TEXT NOT NULL, text TEXT NOT NULL, meta TEXT)")
    con.executemany("INSERT INTO docs VALUES (?,?,?,?)", rows)
    con.commit()
    con.close()
    m = json.loads((path / "manifest.json").read_text())
    m["format_version"] = 1
    m.pop("generation")
    m["docstore"].pop("schema")
    m["subindexes"]["bm25"].pop("generation")
    (path / "manifest.json").write_text(json.dumps(m))
    old = retrieval.open_index(path)
    assert old.generation == 0 and len(old.docstore) == 400 and old.get(rows[0][0]).title == rows[0][1]
    assert_checks(path)
    idx = add_documents(path, NEW[:1], quiet=True)
    assert idx.manifest["format_version"] == 2 and idx.manifest["migrated"]["from_format"] == 1
    assert idx.manifest["docstore"]["path"] != "docs.sqlite" and len(idx.docstore) == 401
    assert old.get(rows[0][0]) is not None and idx.get("new-1").text == NEW[0].text
    assert_checks(path)
    old.close()
    compact(path, quiet=True)  # the schema-1 store goes once no reader holds generation 0
    assert not (path / "docs.sqlite").exists()
    assert_checks(path)


# ----------------------------------------------------------------------------------------- check
def test_check_reports_each_problem_on_one_line(retr, bm25_copy, tmp_path):
    from indexes.lucene import change_index

    r = retr("check", "--index", bm25_copy, "--strict")
    assert r.returncode == 0 and r.stdout.startswith("ok:"), r.stdout + r.stderr
    idx = retrieval.open_index(bm25_copy)
    victim = corpus_now(idx)[5].docid
    idx.close()
    change_index(bm25_copy / "bm25", delete=[victim])  # behind the writer's back
    (bm25_copy / "bm25.g9").mkdir()  # as a writer killed half-way leaves it
    r = retr("check", "--index", bm25_copy, "--full")
    lines = r.stdout.splitlines()
    assert r.returncode == 1 and len(lines) == 2, r.stdout
    assert "bm25 (lucene): holds 399 documents, the document store 400" in lines[0]
    assert "ids differ" in lines[1] and repr(victim) in lines[1]
    assert "note: leftover of a dead writer" in r.stderr and "bm25.g9" in r.stderr
    r = retr("check", "--index", bm25_copy, "--strict")
    assert r.returncode == 1 and any("bm25.g9" in l for l in r.stdout.splitlines())
    shutil.rmtree(bm25_copy / "bm25")
    r = retr("check", "--index", bm25_copy)
    assert r.returncode == 1 and "missing" in r.stdout and "Traceback" not in r.stderr
    r = retr("check", "--index", tmp_path / "nope")
    assert r.returncode == 1 and "does not exist" in r.stdout


# ----------------------------------------------------------------------------------------- CLI
def test_cli_update_delete_compact_check(retr, bm25_copy, tmp_path):
    docs = corpus_now(retrieval.open_index(bm25_copy))
    upd = tmp_path / "upd.jsonl"
    upd.write_text(json.dumps({"_id": docs[0].docid, "title": "Quokka", "text": "zyxwvut quokka colony"}) + "\n"
                   + json.dumps({"_id": "brand-new", "text": "aardvark termite mounds"}) + "\n")
    r = retr("update", "--index", bm25_copy, "--corpus", upd)
    assert r.returncode == 0 and "replaced 1 and added 1 documents" in r.stderr and "now 401" in r.stderr, r.stderr
    ids = tmp_path / "ids.txt"
    ids.write_text(f"# two of them\n{docs[1].docid}\n\nbrand-new\n")
    r = retr("delete", "--index", bm25_copy, "--ids", ids)
    assert r.returncode == 0 and "deleted 2 documents" in r.stderr and "now 399" in r.stderr, r.stderr
    r = retr("delete", "--index", bm25_copy, docs[2].docid, "-q")
    assert r.returncode == 0 and r.stderr == ""
    for bad, msg in ((["no-such"], "not in the index"), ([], "give document ids"),
                     (["--ids", tmp_path / "missing.txt"], "no such file")):
        r = retr("delete", "--index", bm25_copy, *bad)
        assert r.returncode == 2 and r.stderr.startswith("retr: error:") and msg in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = retr("search", "--index", bm25_copy, docs[1].title, "--k", "3")
    assert docs[1].docid not in r.stdout
    r = retr("compact", "--index", bm25_copy)
    assert r.returncode == 0 and "compacted" in r.stderr and "bm25" in r.stderr, r.stderr
    r = retr("check", "--index", bm25_copy, "--full", "--strict")
    assert r.returncode == 0 and "398 documents" in r.stdout, r.stdout + r.stderr
    r = retr("info", "--index", bm25_copy)
    assert "generation 4" in r.stdout and "398 docs" in r.stdout


def test_overwrite_replaces_only_a_retr_index(retr, tmp_path, small_corpus):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    r = retr("index", "--corpus", small_corpus, "--index", mine, "--overwrite", "-q")
    assert r.returncode == 2 and "not a retr index" in r.stderr and len(r.stderr.splitlines()) == 1
    assert (mine / "thesis.tex").read_text() == "years of work"
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    r = retr("index", "--corpus", small_corpus, "--index", f, "--overwrite", "-q")
    assert r.returncode == 2 and "is a file" in r.stderr and f.read_text() == "keep me"
    idx_dir = tmp_path / "IDX"
    assert retr("index", "--corpus", small_corpus, "--index", idx_dir, "-q").returncode == 0
    reader = retrieval.open_index(idx_dir)
    r = retr("index", "--corpus", small_corpus, "--index", idx_dir, "--overwrite", "-q")
    assert r.returncode == 0, r.stderr
    assert retrieval.open_index(idx_dir).generation == 1  # after the one it replaced: readers notice
    assert reader.search("cerebral white matter", k=1, text=False)  # the old reader moves on
    assert reader.generation == 1
    assert folders(tmp_path) == ["IDX", "mine", "notes.txt"]


def test_two_concurrent_adds_both_land(tmp_path, bm25_copy):
    """Both writers wait for the lock (held here until both are waiting), then both land."""
    files = []
    for i in range(2):
        f = tmp_path / f"new{i}.jsonl"
        f.write_text("".join(json.dumps({"_id": f"w{i}-{j}", "text": f"writer {i} passage {j} quokka"}) + "\n"
                             for j in range(5)))
        files.append(f)
    with gens.writer_lock(bm25_copy):
        procs = [subprocess.Popen([sys.executable, "-m", "cli.main", "add", "--index", str(bm25_copy), "--corpus",
                                   str(f)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for f in files]
        waiting = [p.stderr.readline() for p in procs]
        assert all("waiting for another writer" in w and str(os.getpid()) in w for w in waiting), waiting
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    idx = retrieval.open_index(bm25_copy)
    assert len(idx) == 410 == lucene_live(idx) and idx.generation == 2
    assert all(idx.get(f"w{i}-{j}") is not None for i in range(2) for j in range(5))
    assert_checks(bm25_copy)


# ----------------------------------------------------------------------------------------- crashes
WRITE_POINTS = [("add", "write:after-docstore", False), ("add", "write:after-subindexes", False),
                ("add", "lucene:indexing", False), ("add", "write:before-switch", False),
                ("add", "write:after-switch", True), ("delete", "write:after-subindexes", False),
                ("compact", "compact:before-switch", False), ("compact", "write:after-switch", True)]


@pytest.mark.parametrize("op,point,lands", WRITE_POINTS, ids=[f"{o}@{p}" for o, p, _ in WRITE_POINTS])
def test_kill_9_during_a_change_leaves_the_old_or_the_new_generation(tmp_path, bm25_copy, op, point, lands):
    path = bm25_copy
    if op == "compact":
        delete_documents(path, [corpus_now(retrieval.open_index(path))[0].docid], quiet=True)
    before = retrieval.open_index(path, auto_refresh=False)
    n0, g0 = len(before), before.generation
    before.close()
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps({"_id": d.docid, "title": d.title, "text": d.text}) + "\n" for d in NEW))
    victim = corpus_now(retrieval.open_index(path))[1].docid
    args = {"add": ["add", "--index", path, "--corpus", new], "delete": ["delete", "--index", path, victim],
            "compact": ["compact", "--index", path]}[op]
    p = Paused(point, *args)
    kids = p.children()
    assert p.kill() == -signal.SIGKILL
    assert all(gone(k) for k in kids), "the Java indexer outlived retr"
    idx = retrieval.open_index(path)
    assert idx.generation == (g0 + 1 if lands else g0)
    n = {"add": n0 + 3, "delete": n0 - 1, "compact": n0}[op] if lands else n0
    assert len(idx) == n == len(idx.docstore) == lucene_live(idx)
    rep = check_index(path, full=True)
    assert rep.ok, rep.problems  # what readers see is whole
    if not lands:  # and what the dead writer left is named
        assert any("leftover of a dead writer" in x for x in rep.notes), rep.notes
    idx.close()
    # the next change cleans what the dead writer left, and lands
    add_documents(path, [Document("after-crash", "a passage written after the crash")], quiet=True)
    assert_checks(path)
    m = json.loads((path / "manifest.json").read_text())
    known = {e["path"] for e in m["subindexes"].values()} | {r["path"] for r in m["retired"]}
    assert {x for x in folders(path) if folder.GEN_DIR.match(x) or x.startswith("retr-")} <= known


@pytest.mark.parametrize("point,overwrite", [("lucene:indexing", False), ("index:before-swap", True)])
def test_kill_9_during_index_leaves_nothing_or_the_old_index(retr, tmp_path, small_corpus, point, overwrite):
    path = tmp_path / "IDX"
    if overwrite:  # the folder to overwrite, through retr's entry point in this process
        assert retr_in_process("index", "--corpus", small_corpus, "--index", path, "-q").returncode == 0
    p = Paused(point, "index", "--corpus", small_corpus, "--index", path, *(["--overwrite"] if overwrite else []))
    kids = p.children()
    assert p.kill() == -signal.SIGKILL
    assert all(gone(k) for k in kids), "the Java indexer outlived retr"
    if overwrite:
        rep = check_index(path, full=True)
        assert rep.ok and any("leftover of dead process" in n for n in rep.notes), (rep.problems, rep.notes)
        assert retrieval.open_index(path).generation == 0
    else:
        assert not path.exists()
    leftovers = [x for x in folders(tmp_path) if x.startswith("IDX.tmp-")]
    assert leftovers  # what the dead build left beside the folder ...
    r = retr("index", "--corpus", small_corpus, "--index", path, "-q", *(["--overwrite"] if overwrite else []))
    assert r.returncode == 0, r.stderr
    assert folders(tmp_path) == ["IDX"]  # ... the next build removes
    assert_checks(path)


def test_sigterm_stops_the_java_child_and_removes_the_staging_folder(tmp_path, small_corpus):
    path = tmp_path / "IDX"
    p = Paused("lucene:indexing", "index", "--corpus", small_corpus, "--index", path)
    kids = p.children()
    assert kids, "no Java child at the pause point"
    assert p.kill(signal.SIGTERM) == 143
    assert "retr: terminated" in p.rest()
    assert all(gone(k) for k in kids)
    assert folders(tmp_path) == []


def test_cli_delete_then_compact_on_scifact_equals_a_fresh_build(retr, tmp_path, scifact_dir):
    """The check from the issue: delete one SciFact passage, search its exact title (gone),
    compact, and the BM25 run of every test query equals a fresh build's without it."""
    path = tmp_path / "A"
    assert retr("index", "--corpus", scifact_dir, "--index", path, "-q").returncode == 0
    idx = retrieval.open_index(path)
    doc = next(d for d in retrieval.read_corpus(scifact_dir)
               if d.title and idx.search(d.title, k=1, text=False)[0].docid == d.docid)
    idx.close()
    r = retr("delete", "--index", path, doc.docid, "-q")
    assert r.returncode == 0, r.stderr
    r = retr("search", "--index", path, doc.title, "--k", "10")
    assert r.returncode == 0 and doc.docid not in r.stdout.split()
    assert retr("check", "--index", path, "--strict").returncode == 0
    assert retr("compact", "--index", path, "-q").returncode == 0
    r = retr("check", "--index", path, "--full", "--strict")
    assert r.returncode == 0 and "5,182 documents" in r.stdout, r.stdout + r.stderr
    rest = tmp_path / "rest.jsonl"
    with open(scifact_dir / "corpus.jsonl", encoding="utf-8") as f, open(rest, "w", encoding="utf-8") as out:
        out.writelines(line for line in f if json.loads(line)["_id"] != doc.docid)
    # the fresh build (the reference) through retr's entry point in this process
    assert retr_in_process("index", "--corpus", rest, "--index", tmp_path / "F", "-q").returncode == 0
    runs = []
    for p, search in ((path, retr), (tmp_path / "F", retr_in_process)):
        run = tmp_path / f"{p.name}.trec"
        r = search("search", "--index", p, "--queries", scifact_dir / "queries.jsonl", "--split", "test",
                   "--output", run, "-q")
        assert r.returncode == 0, r.stderr
        runs.append(run.read_text())
    assert runs[0] == runs[1] and len(runs[0].splitlines()) > 100_000


@pytest.mark.parametrize("sig,code,line", [(signal.SIGTERM, 143, "retr: terminated"),
                                           (signal.SIGINT, 130, "retr: interrupted")])
@pytest.mark.parametrize("point", ["lucene:indexing", "write:after-subindexes"])
def test_a_signal_after_the_jvm_started_cleans_up_the_change(tmp_path, bm25_copy, sig, code, line, point):
    """The in-process JVM (Lucene's IndexWriter) must not take SIGTERM/SIGINT from Python: the
    change is rolled back (no bm25.g1, no retr-lucene-*, no store rows) and the CLI says so."""
    from indexes.docstore import LiveStore

    before = folders(bm25_copy)
    new = tmp_path / "new.jsonl"
    new.write_text("".join(json.dumps({"_id": f"sig-{i}", "text": f"signal passage {i}"}) + "\n" for i in range(300)))
    p = Paused(point, "add", "--index", bm25_copy, "--corpus", new)
    kids = p.children()
    assert p.kill(sig) == code
    rest = p.rest()
    assert line in rest and "Traceback" not in rest, rest
    assert all(gone(k) for k in kids)
    same = lambda xs: [x for x in xs if x not in (".lock", "docs.sqlite-shm", "docs.sqlite-wal")]  # noqa: E731
    assert same(folders(bm25_copy)) == same(before)
    assert not [x for x in os.listdir(bm25_copy / "bm25") if x.startswith((".", "retr-"))]
    ls = LiveStore(bm25_copy / "docs.sqlite")
    try:
        assert ls.uncommitted(0) == 0
    finally:
        ls.close()
    rep = assert_checks(bm25_copy)
    assert not rep.notes, rep.notes
