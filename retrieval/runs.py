"""Writers for search results: TREC runs, MS MARCO runs (Pyserini's msmarco output: qid, docid, rank) and JSONL
hits (with passage text, for RAG)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, List, Mapping, Optional

from indexes.atomic import atomic_write
from indexes.errors import InputError
from retrieval.types import Hit

FORMATS = ("trec", "jsonl", "msmarco")


def run_tag(spec: str, parts: Iterable[Optional[str]] = ()) -> str:
    """A run's tag (a TREC run's last column): the pipeline as run (``bm25+dense:rrf(k=60)``) and,
    joined by ``+``, what the search options changed in it (``dense+dimsel-learned``), so that
    runs of different methods never carry the same tag."""
    return "+".join([spec, *(p for p in parts if p)])


def write_run(results: Mapping[str, List[Hit]], path: Path | str, fmt: str = "trec", tag: str = "retr") -> int:
    """Write results atomically; returns the number of lines written."""
    if fmt not in FORMATS:
        raise InputError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    if path.is_dir():
        raise InputError("is a folder; the run needs a file name", path)
    if path.parent and not path.parent.exists():
        raise InputError("output folder does not exist", path.parent)
    if any(c.isspace() for c in tag):
        raise InputError(f"run tag {tag!r} must not contain whitespace")
    n = 0
    try:
        with atomic_write(path, "w", encoding="utf-8") as f:
            for qid, hits in results.items():
                for h in hits:
                    if fmt == "trec":
                        f.write(f"{qid} Q0 {h.docid} {h.rank} {h.score:.6f} {tag}\n")
                    elif fmt == "msmarco":  # Pyserini's MsMarcoWriter: qid, docid, rank; no score
                        f.write(f"{qid}\t{h.docid}\t{h.rank}\n")
                    else:
                        d = h.to_dict()
                        d["qid"] = qid
                        f.write(json.dumps(d, ensure_ascii=False) + "\n")
                    n += 1
    except OSError as e:  # a read-only folder, a full disk, a folder created meanwhile
        raise InputError(f"cannot write the run ({e.strerror or e})", path) from None
    return n

