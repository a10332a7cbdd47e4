"""One shard of a sharded index, seen by the router: :class:`ShardSearcher` answers the protocol
of :mod:`retrieval.sharded` (describe, stats, search, confidence, fetch) over one shard folder's
:class:`retrieval.index.Index`, with plain picklable arguments and answers, so that a Ray Serve
deployment can hold one and answer remote calls with it."""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from indexes import manifest as mf
from indexes import sharded as sh
from indexes.errors import FilterWarning
from retrieval.index import Index
from retrieval.request import SearchRequest
from retrieval.types import Query, Scored


ALLOWED = "#allowed"  # stats()'s key for a filter's counts (no sub-index name starts with "#")
TEXTS = "#texts"      # search()'s key for its documents' (title, text, metadata), when asked for text


def needs_stats(r) -> bool:
    """Whether a retriever's scores may read collection statistics: False only where its class keeps
    RetrieverBase's ``collection_stats``, which answers None whatever the query (dense, SPLADE), so
    that a router may skip the statistics round for it and score exactly as with it."""
    from retrieval.kinds import RetrieverBase

    return getattr(type(r), "collection_stats", None) is not RetrieverBase.collection_stats


def _stat(path: Path) -> Optional[Tuple[int, int, int, int]]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class ShardReader(Index):
    """A shard folder's reader: it reads the generation its sharded index committed (``at_least``,
    or a later one the folder committed alone) and moves only when told (:meth:`pin`), all shards
    at once (:mod:`retrieval.sharded.pins`); a folder's own :meth:`refresh` leaves it where it is.
    Searches, snapshots and long-lived reads are a folder's (:class:`retrieval.index.Index`)."""

    def hold(self, at_least: int):
        """Generation ``at_least`` of this shard folder (or a later one its own manifest names), opened
        and held but not yet read (``manifest``; ``release()`` lets it go): :meth:`pin` installs it.
        The sharded index opens every shard's generation this way first, to move all of them at once."""
        return self._open(at_least)

    def pin(self, at_least: int, held=None) -> None:
        """Read generation ``at_least`` (see :meth:`hold`; ``held``: that generation, held already) from
        now on; searches and snapshots running meanwhile finish on the generation they started on."""
        with self._lock:
            old = self._current()
            new = held if held is not None else self._open(at_least)
            self._at = at_least
            if new.number == old.number and new.key == old.key:
                new.release()
                return
            self._install(old, new)


def committed_at(record: dict, position: int) -> int:
    """The generation the sharded record commits for shard ``position`` (0: whatever the shard's own
    manifest names, for a record without generations)."""
    return sh.committed_generation(record, sh.member(record, position)) or 0


class ShardSearcher:
    """Shard ``position`` of the sharded index whose manifest is ``record`` (both None: a folder
    searched alone, e.g. a test's single folder). Opening checks the shard's own record of the
    sharded index it belongs to (:func:`indexes.sharded.check_member`).

    A shard of a sharded index reads the generation the sharded commit record names for it
    (``shards.json``'s ``generations``: see :mod:`retrieval.sharded.write`), or a later one its own
    folder committed alone, never a generation a multi-shard write prepared but had not yet
    committed. With ``follows`` (a Ray Serve replica) it moves there by itself before each call (two
    ``os.stat``); an in-process :class:`~retrieval.sharded.index.ShardedIndex` turns ``follows`` off
    and moves all its shards at once (:mod:`retrieval.sharded.pins`)."""

    def __init__(self, path: Union[str, Path], record: Optional[dict] = None, position: Optional[int] = None):
        self.path = Path(path)
        self.follows = True
        self._key: Optional[tuple] = None
        at = None if record is None else committed_at(record, position or 0)
        self.index = ShardReader(self.path, auto_refresh=True, at_least=at)
        self.record, self.position = record, position
        if record is not None:
            try:
                sh.check_member(self.index.manifest, record, int(position or 0), self.path)
            except BaseException:
                self.index.close()
                raise
        self._applied: Dict[str, dict] = {}
        self._lock = threading.Lock()
        self._held = threading.local()  # .view: the snapshot this thread's calls read (holding)

    # -- generations -------------------------------------------------------------------------
    def state(self) -> tuple:
        """What :meth:`sync` compares: the sharded record's and this shard manifest's stats."""
        return _stat(self.path.parent / sh.SHARDS_FILE), _stat(self.path / mf.MANIFEST)

    def sync(self) -> None:
        """Move to the generation the sharded record names now (a folder alone: its newest)."""
        if self.record is None:
            self.index.follow()
            return
        key = self.state()
        if key != self._key:
            self.index.pin(committed_at(sh.read(self.path.parent), int(self.position or 0)))
            self._key = key

    def _follow(self) -> None:
        if self.follows:
            self.sync()

    @contextlib.contextmanager
    def holding(self, view) -> Iterator[None]:
        """The calls this thread makes inside read ``view`` (an ``Index.snapshot()`` of this shard that
        the caller holds and closes) instead of the shard's current generation: how a sharded
        snapshot (:class:`retrieval.sharded.index.ShardedSnapshot`) keeps one commit across calls."""
        prev = getattr(self._held, "view", None)
        self._held.view = view
        try:
            yield
        finally:
            self._held.view = prev

    @contextlib.contextmanager
    def _view(self) -> Iterator[Any]:
        """The generation a call reads: the one held by :meth:`holding`, else the current one (held for the call)."""
        view = getattr(self._held, "view", None)
        if view is not None:
            yield view
            return
        with self.index.snapshot() as s:
            yield s

    # -- the protocol ----------------------------------------------------------------------
    def describe(self) -> Dict[str, Any]:
        self._follow()
        with self.index.snapshot() as s:
            m, rs = s.manifest, {n: s.retriever(n) for n in s.retrievers}
            rec = m.get("sharded") or {}
            return {"id": rec.get("id"), "shard": rec.get("shard"), "shards": rec.get("shards"),
                    "generation": int(m.get("generation", 0)), "documents": len(s),
                    "retrievers": {n: r.merge_rule for n, r in rs.items()},
                    "needs_stats": {n: needs_stats(r) for n, r in rs.items()},
                    "pipelines": {b: dict(v) for b, v in m.get("pipelines", {}).items()},
                    "subindexes": {n: {"alias_of": e.get("alias_of")} for n, e in m.get("subindexes", {}).items()},
                    "fields": dict(s.metadata.fields()),
                    # the retrievers that take pseudo-relevance feedback, and whether they store the term
                    # vectors it reads (retrieval.sharded.prf)
                    "prf": {n: r.stores_vectors() for n, r in rs.items() if "prf" in r.call_options}}

    def stats(self, texts: Sequence[str], retrievers: Sequence[str], options: Optional[dict] = None,
              filter=None) -> Dict[str, Any]:
        """Round 1: per retriever, its statistics for ``texts`` in this shard (None: it needs none);
        with a ``filter``, also ``"#allowed": [documents it allows here, documents here]``."""
        self._follow()
        self._configure(options)
        with self._view() as s:
            out = {name: s.retriever(name).collection_stats(list(texts)) for name in retrievers}
            allowed = self._allowed(s, filter)
            if allowed is not None:
                out[ALLOWED] = [len(allowed), len(s.metadata)]
            return out

    def search(self, queries: Sequence[Tuple[str, str]], retrievers: Sequence[str], request: SearchRequest,
               stats: Optional[Mapping[str, Any]] = None, options: Optional[dict] = None, threads: int = 1,
               deepen: bool = False, expanded: Optional[Mapping[str, Mapping[str, Any]]] = None
               ) -> Dict[str, Dict[str, Scored]]:
        """Round 2: per retriever, ``{qid: this shard's first k (docid, score)}`` scored with the
        global ``stats``, scores in the form of the retriever's merge rule. Of ``request`` (the
        router's search request for this round: its ``k`` the depth each shard answers) it reads
        ``k``, ``filter``, ``dimsel`` and ``text``. With a ``filter`` and ``deepen``: the first k of
        the unfiltered ranking instead, each entry ``(docid, score, allowed)`` (the router rounds the
        merged unfiltered list, then filters it, as one folder does for a filter that allows a large
        share of the documents). With ``text``, also ``"#texts": {docid: (title, text, metadata)}``
        for every document listed, from the same generation (the router then needs no fetch round).
        ``expanded``: ``{retriever: {qid: Boosted}}``, the queries pseudo-relevance feedback expanded
        those queries to on the whole index (:mod:`retrieval.sharded.prf`), searched instead of
        their texts."""
        self._follow()
        self._configure(options)
        qs = [Query(str(q), str(t)) for q, t in queries]
        stats = stats or {}
        k, text = request.k, request.text
        with self._view() as s:
            allowed = self._allowed(s, request.filter)
            out: Dict[str, Dict[str, Scored]] = {}
            for name in retrievers:
                r = s.member(name, request.dimsel, len(retrievers) > 1).with_stats(stats.get(name))
                if expanded and name in expanded:
                    r = r.expanded({q.qid: (q.text, expanded[name][q.qid]) for q in qs})
                if allowed is None:
                    res = r.batch_search(qs, k, threads)
                elif deepen:
                    ranked = r.batch_search(qs, k, threads)
                    res = {q: [(d, x, d in allowed) for d, x in hits] for q, hits in ranked.items()}
                else:
                    res = {q.qid: s.filtered(r, q.text, k, allowed) for q in qs}
                out[name] = {q.qid: [(h[0], float(h[1]), *h[2:]) for h in res.get(q.qid, [])] for q in qs}
            if text:
                ids = {h[0] for lists in out.values() for hits in lists.values() for h in hits}
                out[TEXTS] = {d: (r[1], r[2], r[3] or {}) for d, r in s.docstore.get_many(list(ids)).items()}
            return out

    def confidence(self, texts: Sequence[str], lists: Mapping[str, Sequence[Scored]],
                   stats: Optional[Mapping[str, Any]] = None, options: Optional[dict] = None
                   ) -> List[Dict[str, Optional[Tuple[str, float]]]]:
        """Per text, each retriever's confidence in its merged (global) list, under the global stats."""
        self._follow()
        self._configure(options)
        stats = stats or {}
        with self._view() as s:
            per = {n: s.retriever(n).with_stats(stats.get(n)).confidence(list(texts), [list(x) for x in ls])
                   for n, ls in lists.items()}
        return [{n: (tuple(per[n][i]) if per[n][i] is not None else None) for n in lists} for i in range(len(texts))]

    def explain(self, text: str, docid: str, lists: Mapping[str, Scored], stats: Optional[Mapping[str, Any]] = None,
                options: Optional[dict] = None, filter=None, dimsel=None, fused: bool = False) -> Dict[str, Any]:
        """For ``docid``, a document of this shard: each retriever's explanation of its score for
        ``text`` (``Retriever.explain`` of the retriever scoring with the global ``stats``, as
        :meth:`search` scores; ``lists``: {name: the merged global list the router got}, whose
        scores, rounded and tie-offset over the whole index, are the ones the parts add up to), as
        ``{"refused": whether ``filter`` leaves the document out (None: no filter), "explained":
        {name: {"kind", "score", "parts", "formula", "columns", "details", "notes"}}}``.
        :class:`indexes.errors.NotFound` where this shard's generation holds no document ``docid``."""
        from indexes.errors import NotFound

        self._follow()
        self._configure(options)
        stats = stats or {}
        with self._view() as s:
            if s.docstore.get(docid) is None:
                raise NotFound(f"no document {str(docid)[:200]!r} in the index")
            allowed = self._allowed(s, filter)
            out: Dict[str, Any] = {}
            for name, ranked in lists.items():
                r = s.member(name, dimsel, fused).with_stats(stats.get(name))
                e = r.explain(text, docid, [(h[0], float(h[1])) for h in ranked])
                out[name] = {"kind": r.kind, "score": e.score, "parts": e.parts, "formula": e.formula,
                             "columns": [list(c) for c in e.columns], "details": e.details, "notes": list(e.notes)}
            return {"refused": None if allowed is None else docid not in allowed, "explained": out}

    # -- pseudo-relevance feedback (retrieval.sharded.prf) -------------------------------------
    def vectors(self, retriever: str, docids: Sequence[str]) -> Dict[str, Tuple[List[str], List[int]]]:
        """The stored term vectors ``{docid: (terms, frequencies)}`` of those of ``docids`` this
        shard holds (the router sends each shard the feedback documents it owns)."""
        self._follow()
        with self._view() as s:
            return s.retriever(retriever).term_vectors(list(docids))

    def term_stats(self, retriever: str, terms: Sequence[str]) -> Dict[str, Any]:
        """This shard's live documents and each (analysed) term's ``[df, ttf]``: ``{"docs": n,
        "terms": {term: [df, ttf]}}`` (the router sums them)."""
        self._follow()
        with self._view() as s:
            return s.retriever(retriever).term_stats(list(terms))

    def expand(self, retriever: str, setting: Mapping[str, Any], k: int, items: Sequence[tuple],
               dfs: Mapping[str, int], docs: int, options: Optional[dict] = None) -> list:
        """The queries Anserini's reranker expands each item's text to from the whole index's
        figures (``setting``: the feedback as a dict, ``{"method": ..., params}``); any shard gives
        the same answer, it reads none of its own documents."""
        from retrieval.bm25.prf import parse

        self._follow()
        self._configure(options)
        with self._view() as s:
            return s.retriever(retriever).expand(parse(dict(setting)), int(k), list(items), dict(dfs), int(docs))

    def configure(self, retriever: str, options: Mapping[str, Any]) -> List[str]:
        """``Index.configure(retriever, **options)`` on this shard; later rounds also carry options."""
        with self._lock:
            done = self.index.configure(retriever, **dict(options))
            self._applied[retriever] = dict(self._applied.get(retriever, {}), **dict(options))
            return done

    def fetch(self, docids: Sequence[str]) -> Dict[str, Tuple[str, str, dict]]:
        self._follow()
        with self._view() as s:
            rows = s.docstore.get_many(list(docids))
        return {d: (r[1], r[2], r[3] or {}) for d, r in rows.items()}

    def get(self, docid: str):
        self._follow()
        with self._view() as s:
            return s.get(docid)

    def count(self) -> int:
        """Live documents of the shard's generation (see :meth:`sync`)."""
        self._follow()
        with self._view() as s:
            return len(s)

    def summary(self) -> Dict[str, Any]:
        """This shard's part of a sharded index's description (:meth:`retrieval.sharded.index.Router.summary`): its
        generation, live documents, sub-index entries (as its manifest holds them: kind, documents,
        config, model, tuning, ...), tuned pipelines and its manifest's times."""
        self._follow()
        with self._view() as s:
            m, n, gen = s.manifest, len(s), s.generation
        subs = {name: dict(e) for name, e in m.get("subindexes", {}).items()}
        return {"shard": self.position, "folder": self.path.name, "generation": gen, "documents": n,
                "subindexes": subs, "pipelines": {b: dict(v) for b, v in m.get("pipelines", {}).items()},
                "created_at": m.get("created_at"), "updated_at": m.get("updated_at")}

    def close(self) -> None:
        self.index.close()

    # -- helpers -----------------------------------------------------------------------------
    def _configure(self, options: Optional[dict]) -> None:
        """Apply ``{pipeline spec: {option: value}}`` (Index.configure's) where they differ from the last applied."""
        if not options:
            return
        with self._lock:
            for spec, opts in options.items():
                if opts and self._applied.get(spec) != opts:
                    self.index.configure(spec, **opts)
                    self._applied[spec] = dict(opts)

    @staticmethod
    def _allowed(s, filter):
        if filter is None:
            return None
        with warnings.catch_warnings():
            # a field only other shards carry is no mistake here; the router warns for the whole index
            warnings.simplefilter("ignore", FilterWarning)
            return s.allowed(filter)


def open_shards(path: Union[str, Path], make=None) -> Tuple[dict, List[ShardSearcher]]:
    """The sharded manifest of ``path`` and a shard object per shard, each checked to be shard i of
    this index: ``make(folder, record, i)``, a :class:`ShardSearcher` by default (the server passes
    its own subclass); those opened are closed again when one fails."""
    record = sh.read(path)
    make = make or ShardSearcher
    shards: List[ShardSearcher] = []
    try:
        for i, p in enumerate(sh.shard_paths(path, record)):
            if not p.is_dir():
                from indexes.errors import IndexFormatError

                raise IndexFormatError(f"{p}: shard {i} of {record['shards']} is missing")
            shards.append(make(p, record, i))
    except BaseException:
        for s in shards:
            s.close()
        raise
    return record, shards
