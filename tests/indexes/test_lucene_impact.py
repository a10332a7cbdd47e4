from indexes.lucene import LuceneIndex, build_lucene


def test_impact_index_scores_are_sums_of_impacts(tmp_path):
    docs = [("a", {"quokka": 90, "island": 5}), ("b", {"quokka": 10, "island": 80}), ("c", {"ferry": 50})]
    out = tmp_path / "impact"
    out.mkdir()
    info = build_lucene(iter(docs), out, threads=1, impact=True)
    assert info["doc_count"] == 3
    idx = LuceneIndex(out, impact=True)
    assert idx.num_docs == 3
    hits = idx.search({"quokka": 2, "island": 1}, k=3)
    assert [d for d, _ in hits] == ["a", "b"]
    assert [s for _, s in hits] == [2 * 90 + 5, 2 * 10 + 80]
    batch = idx.batch_search([{"island": 1}, {"ferry": 1.4}], ["q1", "q2"], k=2)
    assert batch["q1"][0][0] == "b" and batch["q2"] == [("c", 50.0)]
