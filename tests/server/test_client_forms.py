"""Issue #29: retrieval.Client.batch_search takes the query forms Index.batch_search takes
({qid: text}, Pyserini's (texts, qids, k)), against a real server."""
from __future__ import annotations

import pytest

import retrieval

QS = {"q1": "aspirin colorectal cancer", "q2": "vitamin D deficiency"}


def test_client_batch_search_forms(server, token, meta_index):
    client = retrieval.Client(server.url, token=token, index="sf")
    want = {q: [h.docid for h in hs] for q, hs in meta_index.batch_search(QS, k=5).items()}
    assert list(want) == ["q1", "q2"]
    for got in (client.batch_search(QS, k=5), client.batch_search(list(QS.values()), list(QS), k=5),
                client.batch_search([retrieval.Query(q, t) for q, t in QS.items()], k=5)):
        assert {q: [h.docid for h in hs] for q, hs in got.items()} == want
    with pytest.raises(retrieval.InputError, match="2 queries but 1 qids"):
        client.batch_search(list(QS.values()), ["x"], k=5)
