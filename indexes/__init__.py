"""On-disk index backends behind one small interface (build, open, search, manifest).

Nothing here knows about models: Lucene through Anserini, faiss, the SQLite
document store and the manifest with its atomic folder build.
"""

import os as _os
from pathlib import Path as _Path


def retr_home() -> _Path:
    """retr's own cache folder, ``$RETR_HOME`` (default ``~/.cache/retr``): things made once per
    machine and kept across runs (the indexer JVMs' class archive, Ditto choices), never an index."""
    return _Path(_os.environ.get("RETR_HOME") or _Path.home() / ".cache" / "retr").expanduser()


import indexes.jvmguard as _jvmguard  # noqa: E402 (after retr_home, which indexes.jvm imports)

_jvmguard.install()
