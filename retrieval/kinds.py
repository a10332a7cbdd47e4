"""Sub-index kinds: the one protocol every kind of sub-index follows, and the
registry that finds a kind by the ``kind`` field of its manifest entry.

A kind answers the same questions whatever it stores:

- ``build(folder, name, ctx, spec)``: write a new sub-index into ``folder`` from
  the folder's documents (``ctx``: :class:`BuildContext`); returns its manifest entry.
- ``append(folder, entry, docs, ctx)``: add documents; returns the updated entry.
- ``delete(folder, entry, docids, ctx)``: remove documents by id; returns the updated entry.
- ``compact(folder, entry, ctx)``: drop what deletions left behind (Lucene segments with
  deletes expunged, faiss rebuilt without masked rows); returns the updated entry.
- ``retriever(folder, entry)``: open it for search (``search``, ``batch_search``);
  ``reopen(old, folder, entry)`` opens another generation, keeping what does not
  change between generations (a loaded encoder).
- ``count(folder, entry)``: live documents per physical index it keeps, for ``retr check``;
  ``ids(folder, entry)`` their ids, ``present(folder, entry, docids)`` which of ``docids``
  each physical index holds.

The writer calls ``append``, ``delete`` and ``compact`` on ``folder``, a new
generation's folder that starts as a hard-link copy of the current one (see
:mod:`indexes.generations`): a kind writes new files there, or replaces a name with
``os.replace``, and never writes into a file it did not create in that call.
- ``entries(name, entry)``: the manifest entries one build contributes (DeepCT adds
  a DeepCT-Query alias over the same folder); ``dimsel``: whether query-aware
  dimension selection applies to it, and ``with_dimsel`` to apply it.

Kinds are named by dotted path and imported only when a folder uses them, so
opening a BM25-only folder loads neither torch nor the DeepCT code, and no
module is imported just for the side effect of registering something.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from indexes.errors import IndexFormatError, InputError
from retrieval.types import contents

#: kind name -> "module:attribute" of its :class:`SubIndexKind`
KINDS: Dict[str, str] = {
    "bm25": "retrieval.bm25:KIND",
    "dense": "retrieval.dense.subindex:KIND",
    "deepct": "retrieval.deepct.subindex:KIND",
}


@dataclass
class BuildContext:
    """What a kind may read while it builds: the document store (``docs()`` streams
    ``(docid, contents)`` from it), the corpus fingerprint, a cache folder for
    resumable work, vectors another stage already computed, and the executor that
    runs the kind's model (``retrieval.executors.runner_of(ctx.executor)``)."""

    store_path: Path
    fingerprint: str
    cache_base: Path
    quiet: bool = False
    threads: int = 2
    precomputed: Optional[dict] = None
    generation: int = 0                                  # the generation being written
    stream: Optional[Iterable[Tuple[str, str]]] = None   # docs as they are read (BM25 during a build)
    meanwhile: Optional[Callable[[], None]] = None       # work that overlaps the Lucene indexer
    executor: Any = None  # where model stages run: an opened runner of retrieval.executors (None: in-process)

    def docs(self) -> Iterable[Tuple[str, str]]:
        if self.stream is not None:
            return self.stream
        from indexes.docstore import DocStore

        return ((docid, contents(title, text)) for docid, title, text, _meta in DocStore(self.store_path).iter_docs())


class SubIndexKind:
    """Base class of every kind; a kind overrides what it can do."""

    name = ""
    dimsel = False  # query-aware dimension selection applies (dense vectors)

    def build(self, folder: Path, name: str, ctx: BuildContext, spec) -> dict:
        raise NotImplementedError

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        raise InputError(f"sub-index kind {self.name!r} cannot take new documents; rebuild the index instead")

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        raise InputError(f"sub-index kind {self.name!r} cannot delete documents; rebuild the index instead")

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        return entry

    def retriever(self, folder: Path, entry: dict):
        raise NotImplementedError

    def reopen(self, old, folder: Path, entry: dict):
        return self.retriever(folder, entry)

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        raise NotImplementedError

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        raise NotImplementedError

    def present(self, folder: Path, entry: dict, docids: Sequence[str]) -> Dict[str, set]:
        return {k: set(v) & set(docids) for k, v in self.ids(folder, entry).items()}

    def entries(self, name: str, entry: dict) -> Dict[str, dict]:
        return {name: entry}

    def after_add(self, index, name: str, quiet: bool = False, **options) -> None:
        """Runs once the sub-index is listed in the manifest of ``index`` (DeepCT tunes a fusion)."""

    def with_dimsel(self, index, name: str, dimsel):
        # Not this kind's feature: the kind that has it says what the folder lacks.
        for other in KINDS:
            k = get_kind(other)
            if k.dimsel:
                return k.with_dimsel(index, name, dimsel)
        raise InputError(f"dimension selection does not apply to {name!r} ({self.name})")


_loaded: Dict[str, SubIndexKind] = {}


def get_kind(kind: str) -> SubIndexKind:
    """The kind registered under ``kind``, imported on first use."""
    k = _loaded.get(kind)
    if k is None:
        where = KINDS.get(kind)
        if where is None:
            raise IndexFormatError(f"unknown sub-index kind {kind!r} (this retr knows: {', '.join(KINDS)})")
        module, attr = where.split(":")
        k = _loaded[kind] = getattr(importlib.import_module(module), attr)
    return k


def kind_of(entry: dict) -> SubIndexKind:
    return get_kind(entry.get("kind", ""))


def known() -> List[str]:
    return list(KINDS)
