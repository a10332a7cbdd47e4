"""Bad input ends in one `retr: error:` line and exit 2, with nothing left on disk (issue #15).

Real Lucene and real files. Each command path (index, add, update, delete, compact, search, info,
check, eval, --help) and each kind of damage has a case run by the real `retr` in a child process,
where whatever reaches stderr counts; the variations of a case (more damages, more commands, more
hostile manifests, more out-of-range options) run the same entry point, cli.main.main, in this
process (:func:`tests.conftest.retr_in_process`), which spares a Python start per case."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import DATA, need, retr_in_process, run_retr

SMALL = [{"_id": f"d{i}", "text": f"small doc {i} aspirin"} for i in range(20)]


def one_error(r, *needles):
    """The child failed with exit 2 and printed exactly one `retr: error:` line holding every needle."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("retr: error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def real_for(first, value):
    """The real child process for a case's first variation, this process for the others."""
    return run_retr if value == first else retr_in_process


def listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 20-document BM25 folder built by `retr index`, and its queries."""
    root = tmp_path_factory.mktemp("tiny")
    corpus = write_jsonl(root / "corpus.jsonl", SMALL)
    r = run_retr("index", "--corpus", corpus, "--index", root / "IDX", "--quiet")
    assert r.returncode == 0, r.stderr
    write_jsonl(root / "queries.jsonl", [{"_id": "q1", "text": "aspirin"}, {"_id": "q2", "text": "small doc"}])
    return root


@pytest.fixture
def copy(tiny, tmp_path):
    """A private copy of the tiny folder, free to damage."""
    dst = tmp_path / "IDX"
    shutil.copytree(tiny / "IDX", dst)
    return dst


# --------------------------------------------------------------------------- 1. over-long passages
def test_passage_over_the_lucene_limit_is_refused_and_one_at_it_is_indexed(tmp_path):
    from indexes.lucene import MAX_CONTENTS_CHARS

    # The corpus: 'word ' * 4,100,000 is 20,500,000 characters, then 20 small documents.
    big = write_jsonl(tmp_path / "big.jsonl", [{"_id": "big", "text": "word " * 4_100_000}] + SMALL)
    r = run_retr("index", "--corpus", big, "--index", tmp_path / "BIG")
    one_error(r, "big.jsonl:1:", "'big'", "20,500,000 characters", "20,000,000")
    assert listing(tmp_path) == ["big.jsonl"]

    # Title, a space and text: exactly the limit, which Anserini reads; the build finds all 21.
    text = "aspirin" + " " * (MAX_CONTENTS_CHARS - len("T aspirin"))
    at = write_jsonl(tmp_path / "at.jsonl", [{"_id": "big", "title": "T", "text": text}] + SMALL)
    r = run_retr("index", "--corpus", at, "--index", tmp_path / "AT", "--quiet")
    assert r.returncode == 0, r.stderr
    r = run_retr("search", "--index", tmp_path / "AT", "aspirin", "--k", "100")
    assert r.returncode == 0, r.stderr
    found = {line.split()[1] for line in r.stdout.splitlines() if line.strip()[:1].isdigit()}
    assert found == {"big"} | {d["_id"] for d in SMALL}


def test_docid_over_the_lucene_term_limit_is_refused(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", SMALL + [{"_id": "x" * 40_000, "text": "aspirin"}])
    one_error(run_retr("index", "--corpus", corpus, "--index", tmp_path / "IDX"), "c.jsonl:21:", "40,000 bytes")
    assert listing(tmp_path) == ["c.jsonl"]


def test_retr_add_refuses_an_over_long_passage_and_changes_nothing(copy, tmp_path):
    before = listing(copy), (copy / "manifest.json").read_text()
    new = write_jsonl(tmp_path / "new.jsonl", [{"_id": "n1", "text": "x" * 20_000_001}])
    one_error(run_retr("add", "--index", copy, "--corpus", new), "new.jsonl:1:", "'n1'")
    assert (listing(copy), (copy / "manifest.json").read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["IDX", "new.jsonl"]


@pytest.mark.parametrize("value,needle", [("1" + "0" * 400, "integer beyond the range of a double"),
                                          ("NaN", "NaN is not a JSON number"),
                                          ("-Infinity", "-Infinity is not a JSON number"),
                                          ("1e400", "'year' holds Infinity")])
def test_retr_add_and_index_refuse_numbers_a_double_cannot_hold(copy, tmp_path, value, needle):
    """A corpus line whose metadata holds a number retr could not filter on: exit 2, one line at the line."""
    before = listing(copy), (copy / "manifest.json").read_text()
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"_id": "n1", "text": "fine", "metadata": {"year": 2000}}) + "\n"
                   + '{"_id": "n2", "text": "aspirin again", "metadata": {"year": %s}}\n' % value, encoding="utf-8")
    retr = real_for("NaN", value)
    one_error(retr("add", "--index", copy, "--corpus", new), "new.jsonl:2:", needle)
    assert (listing(copy), (copy / "manifest.json").read_text()) == before
    one_error(retr("index", "--corpus", new, "--index", tmp_path / "NEW"), "new.jsonl:2:", needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["IDX", "new.jsonl"]


# --------------------------------------------------------------------------- 2. query ids
@pytest.mark.parametrize("name,content", [
    ("q.tsv", "q1\taspirin\nq 2\tsmall doc\n"),
    ("q.jsonl", '{"_id": "q1", "text": "aspirin"}\n{"_id": "q\\t2", "text": "small doc"}\n'),
])
def test_query_id_with_whitespace_is_refused_at_read_time(tiny, tmp_path, name, content):
    (tmp_path / name).write_text(content, encoding="utf-8")
    run = tmp_path / "run.trec"
    one_error(real_for("q.tsv", name)("search", "--index", tiny / "IDX", "--queries", tmp_path / name, "-o", run),
              f"{name}:2:", "query id", "whitespace")
    assert listing(tmp_path) == [name]


# --------------------------------------------------------------------------- 3. tracebacks
@pytest.mark.parametrize("args,needle", [
    (["--k1", "-1"], "'--k1': -1.0 is not in the range x>=0"),
    (["--k1", "nan"], "'--k1': 'nan' is not a finite number"),
    (["--b", "1.5"], "'--b': 1.5 is not in the range 0<=x<=1"),
    (["--k", "0"], "'--k': 0 is not in the range x>=1"),
    (["--depth", "0"], "'--depth'"),
    (["--alpha", "0"], "'--alpha': 0.0 is not in the range 0<x<=1"),
    (["--threads", "0"], "'--threads'"),
    (["--tag", "two words"], "'--tag'"),
])
def test_search_options_out_of_range_fail_before_any_work(tiny, args, needle):
    one_error(real_for(["--k", "0"], args)("search", "--index", tiny / "IDX", "aspirin", *args), needle)


@pytest.mark.parametrize("args,needle", [
    (["--k1", "-1"], "'--k1'"),
    (["--b", "-0.1"], "'--b'"),
    (["--prune", "1"], "'--prune': 1.0 is not in the range 0<=x<1"),
    (["--batch-size", "0"], "'--batch-size'"),
    (["--threads", "300"], "'--threads'"),
])
def test_index_options_out_of_range_leave_no_folder(tiny, tmp_path, args, needle):
    one_error(real_for(["--prune", "1"], args)("index", "--corpus", tiny / "corpus.jsonl", "--index", tmp_path / "NEW",
                                               *args), needle)
    assert listing(tmp_path) == []


def test_the_library_names_its_parameters_and_the_cli_its_flags(tiny, tmp_path):
    """A library error says ``workers``, ``mode``; the same error from `retr` says the flags."""
    import retrieval
    from retrieval.executors import Executor

    with pytest.raises(retrieval.InputError, match=r"^address, workers only apply with kind=ray$"):
        Executor("local", address="auto", workers=2).validate()
    with pytest.raises(retrieval.InputError, match=r"^mode applies to no retriever of bm25 \(its retrievers take b, k1, prf\)$"):
        retrieval.open_index(tiny / "IDX").configure("bm25", mode="impact")
    one_error(run_retr("search", "--index", tiny / "IDX", "aspirin", "--deepct-mode", "impact"),
              "error: --deepct-mode applies to no retriever of bm25 (its retrievers take --b, --k1, --rm3/--rocchio)")
    one_error(run_retr("index", "--corpus", tiny / "corpus.jsonl", "--index", tmp_path / "NEW", "--dense",
                       "--ray-address", "auto", "--workers", "2"),
              "error: --ray-address, --workers only apply with --executor ray")
    assert listing(tmp_path) == []


def test_ranges_are_shown_in_help():
    out = run_retr("search", "--help").stdout
    for shown in ("x>=0", "0<=x<=1", "0<x<=1", "1<=x<=256"):
        assert shown in out, shown
    assert "0<=x<1" in retr_in_process("index", "--help").stdout
    assert "0<x<1" in retr_in_process("eval", "significance", "--help").stdout


def test_output_that_is_a_folder_is_refused_before_searching(tiny, tmp_path):
    (tmp_path / "out").mkdir()
    one_error(run_retr("search", "--index", tiny / "IDX", "--queries", tiny / "queries.jsonl", "-o", tmp_path / "out"),
              "'--output'", "is a directory")
    assert listing(tmp_path) == ["out"]


def damage_store(store, damage):
    """Make the folder's document store zero bytes, missing, cut in half, or not a database."""
    if damage == "zero-byte":
        store.write_bytes(b"")
    elif damage == "missing":
        store.unlink()
    elif damage == "truncated":
        data = store.read_bytes()
        store.write_bytes(data[: len(data) // 2])
    else:
        store.write_bytes(b"not a database\n" * 100)


@pytest.mark.parametrize("damage", ["zero-byte", "missing", "truncated", "garbage"])
@pytest.mark.parametrize("command", ["info", "search-text", "search-run"])
def test_damaged_document_store(copy, tiny, tmp_path, damage, command):
    damage_store(copy / "docs.sqlite", damage)
    before = listing(tmp_path)
    args = {"info": ["info", "--index", copy],
            "search-text": ["search", "--index", copy, "aspirin"],
            "search-run": ["search", "--index", copy, "--queries", tiny / "queries.jsonl", "-o", tmp_path / "r.trec"]}
    one_error(real_for("garbage", damage)(*args[command]), "docs.sqlite", "document store")
    assert listing(tmp_path) == before


@pytest.mark.parametrize("manifest", ["[1, 2]", '"text"', "{", '{"format": "retr-index", "format_version": "1"}',
                                      '{"format": "retr-index", "subindexes": {"bm25": "bm25"}}'])
def test_malformed_manifest(copy, manifest):
    (copy / "manifest.json").write_text(manifest)
    for args in (["info", "--index", copy], ["search", "--index", copy, "aspirin"]):
        one_error(real_for("{", manifest)(*args), "manifest.json")


# --------------------------------------------------------------------------- 4. evaluation
def test_eval_against_the_wrong_qrels_fails_with_the_counts(tmp_path):
    ms, cran = need(DATA / "msmarco-passage-eval"), need(DATA / "cranfield")
    run = ms / "runs" / "BM25.dl19.top100.trec"
    one_error(run_retr("eval", "--qrels", cran / "qrels" / "test.tsv", run),
              "BM25.dl19.top100.trec", "43 queries in the run", "225 in the qrels", "0 in both")
    (tmp_path / "empty.trec").write_text("")
    one_error(retr_in_process("eval", "--qrels", ms / "qrels" / "dl19.tsv", tmp_path / "empty.trec"),
              "empty.trec: the run holds no results", "0 queries in the run, 43 in the qrels")
    one_error(retr_in_process("eval", "significance", "--qrels", cran / "qrels" / "test.tsv", "--baseline", run, run),
              "0 in both")


def test_eval_of_part_of_the_queries_warns_and_scores(tmp_path):
    ms = need(DATA / "msmarco-passage-eval")
    lines = (ms / "runs" / "BM25.dl19.top100.trec").read_text().splitlines()
    qids = list(dict.fromkeys(line.split()[0] for line in lines))[:5]
    part = tmp_path / "part.trec"
    part.write_text("".join(line + "\n" for line in lines if line.split()[0] in qids))
    r = run_retr("eval", "--qrels", ms / "qrels" / "dl19.tsv", part, "-m", "nDCG@10", "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["runs"][0]["means"]) == {"nDCG@10"}
    assert r.stderr.strip() == ("retr: warning: part.trec: 5 queries in the run, 43 in the qrels, 5 in both; 38 judged "
                                "queries missing from the run score 0 (--skip-empty leaves them out)")
    r = run_retr("eval", "--qrels", ms / "qrels" / "dl19.tsv", ms / "runs" / "BM25.dl19.top100.trec")
    assert r.returncode == 0 and r.stderr == ""  # the same 43 queries: nothing to warn about


# --------------------------------------------------------------------------- a hostile manifest (#24, item 2)
def _victim(tmp_path):
    v = tmp_path / "victim"
    v.mkdir()
    (v / "precious.txt").write_text("do not delete")
    return v


def _edit(folder, **changes):
    m = json.loads((folder / "manifest.json").read_text())
    for k, v in changes.items():
        m[k] = v(m) if callable(v) else v
    (folder / "manifest.json").write_text(json.dumps(m))


def _subindex_path(rel):
    def f(m):
        m["subindexes"]["bm25"]["path"] = rel
        return m["subindexes"]
    return f


HOSTILE = {
    "retired-absolute": lambda c, v: _edit(c, generation=1, retired=[{"path": str(v), "from": 0, "to": 0}]),
    "retired-dotdot": lambda c, v: _edit(c, generation=1, retired=[{"path": "../victim", "from": 0, "to": 0}]),
    "retired-live-store": lambda c, v: _edit(c, generation=1, retired=[{"path": "docs.sqlite", "from": 0, "to": 0}]),
    "subindex-dotdot": lambda c, v: _edit(c, subindexes=_subindex_path("../victim")),
    "subindex-symlink": lambda c, v: ((c / "elsewhere").symlink_to(v), _edit(c, subindexes=_subindex_path("elsewhere"))),
    "docstore-absolute": lambda c, v: _edit(c, docstore=lambda m: dict(m["docstore"], path=str(v / "precious.txt"))),
    "nested-path": lambda c, v: _edit(c, subindexes=lambda m: {"bm25": dict(m["subindexes"]["bm25"],
                                                                            dimsel={"path": "bm25/../../victim"})}),
    "generation-text": lambda c, v: _edit(c, generation="x"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_manifest_whose_paths_leave_the_folder_is_refused_before_anything_is_touched(copy, tiny, tmp_path, case):
    victim = _victim(tmp_path)
    HOSTILE[case](copy, victim)
    before, inside = listing(victim), listing(copy)
    new = write_jsonl(tmp_path / "new.jsonl", [{"_id": "n1", "text": "a new passage"}])
    retr = real_for("retired-dotdot", case)
    for args in (["delete", "--index", copy, "no-such-id"], ["delete", "--index", copy, "d1"],
                 ["add", "--index", copy, "--corpus", new], ["compact", "--index", copy],
                 ["update", "--index", copy, "--corpus", new], ["search", "--index", copy, "aspirin"],
                 ["info", "--index", copy]):
        one_error(retr(*args), "manifest.json", "damaged manifest")
        assert listing(victim) == before and (victim / "precious.txt").read_text() == "do not delete"
        assert [x for x in listing(copy) if x != ".lock"] == inside, args  # (the writer lock's file may appear)
    r = retr("check", "--index", copy)
    assert r.returncode != 0 and "damaged manifest" in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert listing(victim) == before


def test_a_subindex_name_that_is_not_a_plain_name_is_refused(tiny, tmp_path):
    import retrieval
    from indexes.errors import InputError
    from retrieval.dense.subindex import DenseSpec
    from retrieval.writer import add_subindex

    path = tmp_path / "IDX"
    shutil.copytree(tiny / "IDX", path)
    with pytest.raises(InputError, match="sub-index name"):
        add_subindex(retrieval.open_index(path), DenseSpec(), name="../outside", quiet=True)
    assert not (tmp_path / "outside").exists()


# --------------------------------------------------------------------------- writes on a damaged or read-only folder (#24, item 6)
@pytest.mark.parametrize("damage", ["zero-byte", "missing", "truncated", "garbage"])
@pytest.mark.parametrize("command", ["add", "update", "delete", "compact"])
def test_a_change_of_a_folder_with_a_damaged_store_is_one_line_and_makes_nothing(copy, tmp_path, damage, command):
    damage_store(copy / "docs.sqlite", damage)
    new = write_jsonl(tmp_path / "new.jsonl", [{"_id": "n1", "text": "a new passage"}])
    before = listing(copy)
    args = {"add": ["add", "--corpus", new], "update": ["update", "--corpus", new], "delete": ["delete", "d1"],
            "compact": ["compact"]}[command]
    one_error(real_for("garbage", damage)(*args, "--index", copy), "docs.sqlite", "document store")
    assert [x for x in listing(copy) if x != ".lock"] == before  # no docs.g1.sqlite, no bm25.g1


@pytest.fixture
def read_only(tiny, tmp_path):
    """A copy of the tiny folder under a read-only bind mount (root ignores chmod, not a read-only mount)."""
    import subprocess

    src, ro = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    shutil.copytree(tiny / "IDX", src / "IDX")
    ok = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True).returncode == 0
    if ok and subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode != 0:
        subprocess.run(["umount", str(ro)])
        ok = False
    if not ok:
        pytest.skip("cannot make a read-only bind mount here (needs root and mount)")
    try:
        yield ro / "IDX"
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_changes_on_a_read_only_file_system_are_one_line(read_only, tiny, tmp_path):
    new = write_jsonl(tmp_path / "new.jsonl", [{"_id": "n1", "text": "a new passage"}])
    for args in (["add", "--corpus", new], ["update", "--corpus", new], ["delete", "d1"], ["compact"]):
        one_error(run_retr(*args, "--index", read_only), "Read-only file system")
    one_error(run_retr("index", "--corpus", tiny / "corpus.jsonl", "--index", read_only, "--overwrite"),
              "Read-only file system")
    r = run_retr("search", "--index", read_only, "aspirin")  # reading it still works
    assert r.returncode == 0 and "d" in r.stdout, r.stderr
    assert run_retr("check", "--index", read_only).returncode == 0
