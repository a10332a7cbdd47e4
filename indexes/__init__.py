"""On-disk index backends behind one small interface (build, open, search, manifest).

Nothing here knows about models: Lucene through Anserini, faiss, the SQLite
document store and the manifest with its atomic folder build.
"""
