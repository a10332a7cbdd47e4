"""retr sync (retrieval.sync_index): a folder of documents changed on disk, brought into its index
as one generation. Real files (a PDF by fpdf2), real BM25 and MiniLM sub-indexes, the real CLI in
child processes; what was encoded is read from the faiss delta file the change wrote."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from retrieval.documents import DocumentWarning
from tests.conftest import run_retr
from tests.retrieval.test_documents import write_pdf

WORDS = ["lighthouse", "keeper", "lantern", "harbour", "fog", "signal", "ships", "rocks", "tide", "beacon"]


def _long(paragraphs: int) -> str:
    """A Markdown document of ``paragraphs`` paragraphs, about 60 word-pieces each (several passages
    at 64 tokens); paragraph P names the word ``paraP``, so each passage's text is recognisable."""
    paras = [f"Paragraph para{p}: " + " ".join(f"The {WORDS[(p + i) % len(WORDS)]} stood by the "
                                                f"{WORDS[(p + 2 * i) % len(WORDS)]}." for i in range(6))
             for p in range(paragraphs)]
    return "# Lighthouse Log\n\n" + "\n\n".join(paras) + "\n"


def _folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "log.md").write_text(_long(8), encoding="utf-8")
    (root / "notes.txt").write_text("Cats sleep sixteen hours a day and hunt at dusk.\n", encoding="utf-8")
    (root / "page.html").write_text("<html><head><title>Feline facts</title></head><body><p>A cat's whiskers "
                                    "sense air currents.</p></body></html>", encoding="utf-8")
    (root / "old.md").write_text("# Obsolete\n\nThe quokka memo is withdrawn.\n", encoding="utf-8")
    write_pdf(root / "report.pdf", "Quarterly Report", "Revenue grew because widget sales doubled.")
    (root / "sub").mkdir()
    (root / "sub" / "keep.txt").write_text("Parrots imitate the words they hear most often.\n", encoding="utf-8")
    (root / "skipped.md").write_text("# Not indexed\n\nExcluded by the glob the index was built with.\n",
                                     encoding="utf-8")
    return root


def _change(root: Path) -> None:
    (root / "notes.txt").write_text("Cats sleep twelve hours a day and hunt at dawn.\n", encoding="utf-8")
    (root / "log.md").write_text(_long(2), encoding="utf-8")  # shorter: its later passages must go
    (root / "old.md").unlink()
    (root / "new.md").write_text("# Fresh\n\nA narwhal tusk is a tooth.\n", encoding="utf-8")
    (root / "skipped.md").write_text("# Still not indexed\n\nChanged, but excluded.\n", encoding="utf-8")
    os.utime(root / "sub" / "keep.txt", (1_000_000_000, 1_000_000_000))  # touched, same bytes: unchanged


def _rows(idx) -> dict:
    return {pid: (title, text, meta) for pid, title, text, meta in idx.docstore.iter_docs()}


def _passages(idx, document: str) -> list:
    return sorted(pid for pid, meta in idx.docstore.iter_meta() if (meta or {}).get("document") == document)


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """A BM25 + dense index of the folder, the folder changed, `retr sync --dry-run`, then `retr sync`."""
    import retrieval

    base = tmp_path_factory.mktemp("sync")
    docs, out = _folder(base / "docs"), base / "IDX"
    r = run_retr("index", "--corpus", docs, "--index", out, "--dense", "--chunk-tokens", "64",
                 "--exclude", "skipped.md", "-q")
    assert r.returncode == 0, r.stderr
    before = retrieval.open_index(out)
    old = {"generation": before.generation, "count": len(before), "rows": _rows(before),
           "log": _passages(before, "log.md")}
    _change(docs)
    dry = run_retr("sync", "--index", out, "--corpus", docs, "--dry-run")
    after_dry = retrieval.open_index(out)
    dry_state = {"generation": after_dry.generation, "count": len(after_dry)}
    run = run_retr("sync", "--index", out, "--corpus", docs)
    return {"docs": docs, "out": out, "old": old, "dry": dry, "dry_state": dry_state, "run": run}


def test_dry_run_lists_and_changes_nothing(synced):
    r = synced["dry"]
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sorted(lines[:-1]) == ["+ new.md", "- old.md", "~ log.md", "~ notes.txt"]
    n_log = len(synced["old"]["log"])
    assert lines[-1].startswith("would be 1 added, 2 updated, 1 removed, 3 unchanged documents")
    assert f"{len(synced['old']['log']) + 2} to remove" in lines[-1]  # log.md's, notes.txt's and old.md's
    assert n_log > 4
    assert synced["dry_state"] == {"generation": synced["old"]["generation"], "count": synced["old"]["count"]}


def test_sync_is_one_generation_with_the_folder_contents(synced):
    import retrieval

    r = synced["run"]
    assert r.returncode == 0, r.stderr
    assert "1 added, 2 updated, 1 removed, 3 unchanged documents" in r.stderr.splitlines()[-1]
    idx = retrieval.open_index(synced["out"])
    assert idx.generation == synced["old"]["generation"] + 1
    assert idx.manifest["corpus"]["changes"][-1]["op"] == "sync"
    rows, old = _rows(idx), synced["old"]["rows"]
    log = _passages(idx, "log.md")
    assert 1 < len(log) < len(synced["old"]["log"])
    assert not set(synced["old"]["log"]) - set(log) & set(rows)  # the shortened document's tail is gone
    assert all("para7" not in rows[p][1] for p in log) and any("para1" in rows[p][1] for p in log)
    assert rows["notes.txt#0"][1].strip() == "Cats sleep twelve hours a day and hunt at dawn."
    assert rows["new.md#0"][1].strip().endswith("A narwhal tusk is a tooth.") and rows["new.md#0"][0] == "Fresh"
    assert not [p for p in rows if p.startswith(("old.md", "skipped.md"))]
    for pid in ("page.html#0", "report.pdf#0", "sub/keep.txt#0"):  # unchanged: the same rows, old metadata
        assert rows[pid] == old[pid]
    assert len(idx) == len(rows) == len(old) - len(synced["old"]["log"]) - 2 + len(log) + 2
    assert idx.search("quokka memo withdrawn", k=3, retriever="bm25") == []  # only old.md had those words
    dense = idx.search("quokka memo withdrawn", k=len(idx), retriever="dense")
    assert len(dense) == len(idx) and not [h for h in dense if h.docid.startswith("old.md")]
    assert idx.search("narwhal tusk", k=1, retriever="bm25")[0].docid == "new.md#0"
    assert idx.search("narwhal tooth", k=1, retriever="dense")[0].docid == "new.md#0"


def test_only_changed_and_added_passages_were_encoded(synced):
    """The dense sub-index's delta file of the sync's generation holds exactly the new passages."""
    import retrieval

    idx = retrieval.open_index(synced["out"])
    folder = idx.path / idx.manifest["subindexes"]["dense"]["path"]
    deltas = sorted(folder.glob("delta-g*.ids"))
    assert [p.name for p in deltas] == [f"delta-g{idx.generation}.ids"]
    encoded = deltas[0].read_text(encoding="utf-8").split()
    assert sorted(encoded) == sorted(["new.md#0", "notes.txt#0", *_passages(idx, "log.md")])
    assert idx.manifest["subindexes"]["dense"]["added_pending"] == len(encoded)


def test_check_passes_and_a_second_sync_changes_nothing(synced):
    import retrieval

    r = run_retr("check", "--index", synced["out"])
    assert r.returncode == 0 and r.stdout.startswith("ok:"), r.stdout + r.stderr
    gen = retrieval.open_index(synced["out"]).generation
    rep = retrieval.sync_index(synced["out"], synced["docs"], quiet=True)
    assert (rep["added"], rep["updated"], rep["removed"], rep["unchanged"]) == ([], [], [], 6)
    assert rep["generation"] == gen == retrieval.open_index(synced["out"]).generation


def test_a_fresh_build_of_the_final_folder_is_the_synced_index(synced, tmp_path):
    """The invariant: the synced index holds what a build of the folder as it is now holds, and
    answers alike (dense at once; BM25's statistics once `retr compact` dropped the deleted rows)."""
    import retrieval
    from retrieval.dense.subindex import DenseSpec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DocumentWarning)
        fresh = retrieval.build_index(synced["docs"], tmp_path / "F", quiet=True, subindexes={"dense": DenseSpec()},
                                      chunk=64, exclude=["skipped.md"])
    synced_idx = retrieval.open_index(synced["out"])
    want = _rows(fresh)
    got = _rows(synced_idx)
    assert set(got) == set(want)
    for pid, (title, text, meta) in want.items():
        assert got[pid][:2] == (title, text), pid
        assert {k: v for k, v in got[pid][2].items() if k != "modified"} == \
            {k: v for k, v in meta.items() if k != "modified"}, pid

    def scores(idx, q, retriever):
        return {h.docid: h.score for h in idx.search(q, k=len(want), retriever=retriever)}

    queries = ["cats hunt at dawn", "lighthouse keeper lantern fog", "narwhal tooth", "widget revenue"]
    for q in queries:
        a, b = scores(synced_idx, q, "dense"), scores(fresh, q, "dense")
        assert set(a) == set(b) and all(abs(a[d] - b[d]) < 1e-4 for d in a), q
        assert set(scores(synced_idx, q, "bm25")) == set(scores(fresh, q, "bm25")), q
    compacted = retrieval.compact(synced["out"], quiet=True)
    for q in queries:
        a, b = scores(compacted, q, "bm25"), scores(fresh, q, "bm25")
        assert set(a) == set(b) and all(abs(a[d] - b[d]) < 1e-4 for d in a), q


def test_an_index_not_built_from_documents_is_one_error_line(small_index, tmp_path):
    docs = tmp_path / "d"
    docs.mkdir()
    (docs / "a.txt").write_text("some text\n", encoding="utf-8")
    r = run_retr("sync", "--index", small_index.path, "--corpus", docs, "--dry-run")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("retr: error:") and "not built from a folder of documents" in r.stderr


def test_sync_refuses_what_it_cannot_compare(tmp_path):
    import retrieval

    docs = tmp_path / "d"
    docs.mkdir()
    for i in range(8):  # enough for both shards to hold some
        (docs / f"a{i}.txt").write_text(f"some text {i}\n", encoding="utf-8")
    idx = retrieval.build_index(docs, tmp_path / "IDX", quiet=True)
    with pytest.raises(retrieval.InputError, match="not a folder of documents"):
        retrieval.sync_index(idx, tmp_path / "IDX" / "manifest.json")
    r = run_retr("index", "--corpus", docs, "--index", tmp_path / "SH", "--shards", "2", "-q")
    assert r.returncode == 0, r.stderr
    r = run_retr("sync", "--index", tmp_path / "SH", "--corpus", docs)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "sharded" in r.stderr, r.stderr
    assert retrieval.open_index(tmp_path / "IDX").generation == idx.generation
