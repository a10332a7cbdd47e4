"""The router of a sharded index: :class:`ShardedIndex` has the search API of
:class:`retrieval.index.Index` and runs each search as the rounds of :mod:`retrieval.sharded`
(statistics, search, merge, fusion, text) over shard-like objects."""
from __future__ import annotations

import contextlib
import time
from contextlib import ExitStack
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from typing_extensions import Unpack

from indexes import sharded as sh
from indexes.errors import FilterWarning, IndexFormatError, InputError
from retrieval.filters import DOCID, parse_filter, unknown_fields_message
from retrieval.fusion import Pipeline, parse_pipeline
from retrieval.kinds import PRIMARY
from retrieval.sharded import merge
from retrieval.request import (DEFAULT_K, BatchOptions, DefaultPipeline, SearchOptions, SearchRequest,
                               batch_request, default_pipeline, request_of, search_request)
from retrieval.types import Document, Hit, Hits, QueriesArg, as_queries

DEPTH = 100  # as retrieval.index.DEPTH: candidates per fused member, at least

#: how the router calls one method on every shard: call(shards, method, args, kwargs) -> answers in shard order
Caller = Callable[[Sequence[Any], str, tuple, dict], List[Any]]


def call_each(shards: Sequence[Any], method: str, args: tuple, kwargs: dict) -> List[Any]:
    """The in-process caller: one shard after the other."""
    return [getattr(s, method)(*args, **kwargs) for s in shards]


def _tick(timings: Optional[Dict[str, float]], stage: str, t0: float) -> None:
    if timings is not None:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


#: dimension selection modes that read documents (prf: the first ranking's top ``prf_k``; oracle: the
#: judged ones' vectors): each shard would choose its dimensions from its own documents, so a sharded
#: index refuses them; ``learned`` and ``none`` read the query alone and run as on one folder.
DOCUMENT_DIMSEL = ("prf", "oracle")


def _no_document_dimsel(dimsel) -> None:
    from indexes.errors import ParameterError

    mode = dimsel if isinstance(dimsel, str) else \
        dimsel.get("mode") if isinstance(dimsel, dict) else getattr(dimsel, "mode", None)
    if isinstance(mode, str) and mode.split("(")[0].strip().lower() in DOCUMENT_DIMSEL:
        raise ParameterError("{dimsel} {_mode} is not available on a sharded index: each shard would choose the "
                             "dimensions from its own documents, not the index's (learned selection is)",
                             _mode=mode.split("(")[0].strip().lower())


class Router:
    """What the router's rounds read and call, shared by :class:`ShardedIndex`, its documents
    (:class:`ShardedDocs`) and its feedback rounds (:mod:`retrieval.sharded.prf`): the shards in
    order, the caller, the commit pins, the options sent with every round and the shards' last
    ``describe`` answers (``info``)."""

    def __init__(self, shards: List[Any], call: Caller, pins, options: Dict[str, dict]):
        self.shards, self.caller, self.pins, self.options = shards, call, pins, options
        self.info: List[dict] = []

    def reading(self):
        """Hold one commit of every shard for the calls made inside (see :meth:`ShardedIndex._reading`)."""
        return self.pins.reading() if self.pins is not None else contextlib.nullcontext()

    def call(self, shards: Sequence[Any], method: str, args: tuple, kwargs: dict) -> List[Any]:
        """``method`` on each of ``shards`` (answers in their order), through the caller."""
        return self.caller(shards, method, args, kwargs)

    def all(self, method: str, *args, **kwargs) -> List[Any]:
        """``method`` on every shard, reading one commit."""
        with self.reading():
            return self.caller(self.shards, method, args, kwargs)

    def count(self) -> int:
        """The live documents of every shard."""
        return sum(self.all("count"))

    def hold_commit(self) -> Optional[List[Any]]:
        """Each shard's generation of the newest commit, held (``Index.snapshot()`` of every shard, taken
        while no move of the shards can run): what a :class:`ShardedSnapshot` reads through each shard's
        ``holding``. None where the shards are not in this process."""
        from retrieval.sharded.shard import ShardSearcher

        if not all(isinstance(s, ShardSearcher) for s in self.shards):
            return None
        held: List[Any] = []
        with self.reading():
            try:
                for s in self.shards:
                    held.append(s.index.snapshot())
            except BaseException:
                for v in held:
                    v.close()
                raise
        return held

    def summary(self) -> dict:
        """The index's description at the commit read now (what a :class:`ShardedSnapshot` answers as its
        ``manifest``, ``generation`` and ``shards``; ``GET /v1/NAME`` shows it): ``manifest``
        (``subindexes``: shard 0's entries with the documents of every shard added up; ``pipelines``;
        the earliest ``created_at`` and latest ``updated_at``), ``generation`` (the sum of the shards':
        it grows with every change of any shard), ``documents``, and ``shards``: each shard's folder,
        documents and generation."""
        with self.reading():
            parts = self.caller(self.shards, "summary", (), {})
        first = parts[0]
        subs = {name: dict(e, doc_count=sum(int(p["subindexes"].get(name, {}).get("doc_count") or 0) for p in parts))
                for name, e in first["subindexes"].items()}
        manifest = {"subindexes": subs, "pipelines": first.get("pipelines", {}),
                    "created_at": min((p["created_at"] for p in parts if p.get("created_at")), default=None),
                    "updated_at": max((p["updated_at"] for p in parts if p.get("updated_at")), default=None)}
        return {"manifest": manifest, "generation": sum(int(p["generation"]) for p in parts),
                "documents": sum(int(p["documents"]) for p in parts),
                "shards": [{"shard": p["folder"], "documents": p["documents"], "generation": p["generation"]}
                           for p in parts]}

    def fetch(self, docids: Sequence[str]) -> Dict[str, tuple]:
        """``{docid: (title, text, metadata)}`` of those of ``docids`` the index holds, each from its own
        shard (those shards in one call: each is sent every id and answers for its own). Called inside
        :meth:`reading`."""
        n = len(self.shards)
        want: Dict[int, List[str]] = {}
        for d in dict.fromkeys(docids):
            want.setdefault(sh.shard_of(d, n), []).append(d)
        rows: Dict[str, tuple] = {}
        if want:
            order = sorted(want)
            ids = [d for i in order for d in want[i]]
            for i, got in zip(order, self.caller([self.shards[i] for i in order], "fetch", (ids,), {})):
                rows.update((d, r) for d, r in got.items() if sh.shard_of(d, n) == i)
        return rows


class ShardedIndex:
    """A sharded index searched as one: ``shards`` in shard order (local
    :class:`~retrieval.sharded.shard.ShardSearcher` objects or remote handles with their methods),
    ``call`` how to call them all (default: one after the other in this thread). Results equal the
    search of one folder holding every shard's documents (see the package docstring)."""

    def __init__(self, shards: Sequence[Any], call: Optional[Caller] = None, path: Optional[Path] = None,
                 pins=None, auto_refresh: bool = True):
        if not shards:
            raise InputError("a sharded index needs at least one shard")
        self.shards = list(shards)
        self.path = path
        self._options: Dict[str, dict] = {}
        # pseudo-relevance feedback configured per retriever: run by this router (retrieval.sharded.prf),
        # never set on the shards, whose own expansion would read their own top documents
        self._prf: Dict[str, Any] = {}
        from retrieval.sharded.pins import Pins

        # local shards move to each commit together; remote ones are told the commit (pins.Commits)
        self._pins = pins if pins is not None else Pins.of(path, self.shards, auto=auto_refresh)
        self._router = Router(self.shards, call or call_each, self._pins, self._options)
        self._describe()

    @classmethod
    def open(cls, path: Union[str, Path], auto_refresh: bool = True) -> "ShardedIndex":
        """The sharded index at ``path``, every shard opened in this process at the newest commit;
        ``auto_refresh``: each call first moves every shard to the newest commit (False: only
        :meth:`refresh` moves them), as :meth:`retrieval.index.Index.open`."""
        from retrieval.sharded.shard import open_shards

        _record, shards = open_shards(path)
        return cls(shards, path=Path(path), auto_refresh=auto_refresh)

    @property
    def _call(self) -> Caller:
        """How the rounds call the shards (set: every round, the feedback's and the documents' too)."""
        return self._router.caller

    @_call.setter
    def _call(self, call: Caller) -> None:
        self._router.caller = call

    def _all(self, method: str, *args, **kwargs) -> List[Any]:
        return self._router.all(method, *args, **kwargs)

    def _reading(self):
        """Hold one commit of every shard (the newest, see :mod:`retrieval.sharded.pins`) for the calls
        made inside: local shards pinned, remote ones told it (``pins``); remote shards without
        ``pins`` each follow the commit record themselves."""
        return self._router.reading()

    def _describe(self) -> List[dict]:
        """Every shard's ``describe()``, checked to be the shards of one index, in order."""
        infos = self._all("describe")
        first = infos[0]
        for i, d in enumerate(infos):
            if len(infos) > 1 and (d.get("id") != first.get("id") or d.get("shards") != len(infos)
                                   or d.get("shard") != i):
                raise IndexFormatError(f"shard {i} answers as shard {d.get('shard')!r} of {d.get('shards')!r} of "
                                       f"index {d.get('id')!r}: not shard {i} of {len(infos)} of {first.get('id')!r}")
            if d.get("retrievers") != first.get("retrievers"):
                raise IndexFormatError(f"shard {i} has the sub-indexes {sorted(d.get('retrievers') or {})}, shard 0 "
                                       f"{sorted(first.get('retrievers') or {})}")
        self._info = self._router.info = infos
        return infos

    # -- introspection ---------------------------------------------------------------------
    @property
    def retrievers(self) -> List[str]:
        return list(self._info[0]["retrievers"])

    def __len__(self) -> int:
        return self._router.count()

    def fields(self) -> Dict[str, int]:
        """The metadata fields of every shard's documents."""
        return self._fields(fresh=True)

    def _fields(self, fresh: bool) -> Dict[str, int]:
        """:meth:`fields` (``fresh=False``: as the last ``describe`` saw them)."""
        out: Dict[str, int] = {}
        for d in (self._describe() if fresh else self._info):
            for f, n in d.get("fields", {}).items():
                out[f] = out.get(f, 0) + int(n)
        return dict(sorted(out.items()))

    def info(self) -> dict:
        infos = self._describe()
        return {"path": str(self.path) if self.path else None, "sharded": True, "shards": len(infos),
                "id": infos[0].get("id"), "documents": sum(d["documents"] for d in infos),
                "generations": [d["generation"] for d in infos], "retrievers": infos[0]["retrievers"],
                "default_pipeline": self.default_pipeline().to_dict(), "fields": self.fields()}

    def default_pipeline(self) -> DefaultPipeline:
        """What a search that names no retriever runs, and why: the shards' (one folder's) default,
        :func:`retrieval.request.default_pipeline` of their sub-indexes and tuned pipelines."""
        d = self._info[0]
        return default_pipeline(d.get("subindexes") or {n: {} for n in d["retrievers"]}, d.get("pipelines", {}))

    def pipeline(self, retriever: Optional[str] = None, fusion: Optional[str] = None) -> Pipeline:
        """As :meth:`retrieval.index.Index.pipeline` (None: :meth:`default_pipeline`)."""
        if retriever is None:
            retriever = self.default_pipeline().spec
        base = retriever.split(":", 1)[0].strip()
        tuned = self._info[0].get("pipelines", {}).get(base, {}).get("spec")
        p = parse_pipeline(retriever, fusion, default=tuned)
        have = self._info[0]["retrievers"]
        for name in p.retrievers:
            if name not in have:
                raise InputError(f"index has no {name!r} sub-index (it has: {', '.join(have) or 'none'})", self.path)
        return p

    def local(self) -> list:
        """The shard folders' own :class:`retrieval.index.Index` objects, at the commit this index reads
        now (in-process shards only): what a change of the whole index (a tuning) is computed from."""
        with self._reading():
            out = [getattr(s, "index", None) for s in self.shards]
        if any(ix is None for ix in out):
            raise InputError("this sharded index is searched through remote shards; open it by its folder to "
                             "read or change the shards' records", self.path)
        return out

    def begin_change(self, what: str):
        """:meth:`retrieval.index.Index.begin_change` for the whole index: the shards' records are read
        now (what the change is computed from; in-process shards only); ``commit(edit)`` records
        ``edit(change)`` in every shard as one commit of the sharded index, refused where another
        writer committed since, and reads the shards' descriptions again."""
        from indexes.shard_commit import commit_manifests

        read = [ix.manifest for ix in self.local()]

        def commit(edit) -> None:
            commit_manifests(self.path, edit, based_on=read)
            self._describe()
        return commit

    def confidences(self, texts: Sequence[str], lists: Dict[str, Sequence[list]]) -> List[dict]:
        """Per text, each retriever's ``(kind, value)`` confidence in its list (``lists``: {name: one
        list per text}) under the index's global statistics, as a fused search weighs them
        (:func:`retrieval.fusion.list_confidences` of one folder's retrievers)."""
        names, texts = list(lists), list(texts)
        with self._reading():
            stats = merge.sum_stats_by_name(self._all("stats", texts, names, self._options, None), names)
            per = {n: [list(x) for x in lists[n]] for n in names}
            return self._call(self.shards[:1], "confidence", (texts, per, stats, self._options), {})[0]

    def configure(self, retriever: str = PRIMARY, **options) -> List[str]:
        """Search options for the pipeline ``retriever`` (as :meth:`retrieval.index.Index.configure`),
        sent with every round to every shard. ``prf`` (pseudo-relevance feedback, as one folder's
        BM25 takes it) stays with this router, which runs it over the whole index
        (:mod:`retrieval.sharded.prf`)."""
        given = {k: v for k, v in options.items() if v is not None}
        if not given:
            return []
        _no_document_dimsel(given.get("dimsel"))
        prf = given.pop("prf", None)
        fb = self._configure_prf(retriever, prf) if prf is not None else []
        done = self._all("configure", retriever, given)[0] if given else []
        if given:
            self._options[retriever] = dict(self._options.get(retriever, {}), **given)
        return done + [n for n in fb if n not in done]

    def _configure_prf(self, retriever: str, prf) -> List[str]:
        """``configure``'s ``prf``: checked as one folder checks it, kept per member that takes it."""
        from indexes.errors import ParameterError
        from retrieval.bm25.prf import parse
        from retrieval.sharded.prf import check_vectors

        setting = parse(prf)
        p = self.pipeline(retriever)
        takes = self._info[0].get("prf") or {}
        takers = [n for n in p.retrievers if n in takes]
        if not takers:
            raise ParameterError("{prf} applies to no retriever of {_p} (its retrievers do not take it)", _p=str(p))
        if setting:
            check_vectors(self._router, takers)
        for n in takers:
            if setting:
                self._prf[n] = setting
            else:
                self._prf.pop(n, None)
        return takers

    @property
    def manifest(self) -> dict:
        """The index's record at the newest commit, as one folder's manifest holds it: ``subindexes`` (shard
        0's entries, the same in every shard, with ``doc_count`` summed over the shards), ``pipelines``
        (the tuned ones), the earliest ``created_at`` and the latest ``updated_at``
        (:attr:`ShardedSnapshot.manifest` of that commit)."""
        return self._router.summary()["manifest"]

    @property
    def generation(self) -> int:
        """The sum of the shards' generations (each change of a shard makes one), as
        :attr:`ShardedSnapshot.generation` counts them."""
        return sum(int(d["generation"]) for d in self._describe())

    def refresh(self) -> bool:
        """Move every shard to the newest commit (with ``auto_refresh``, each call does that first) and
        read their descriptions anew (sub-indexes, tuned pipelines, generations); True when some shard
        moved on since the last."""
        before = [d["generation"] for d in self._info]
        if self._pins is not None and not self._pins.gate.inside():
            self._pins.sync()
        return [d["generation"] for d in self._describe()] != before

    def follow(self) -> bool:
        """:meth:`retrieval.index.Index.follow` for a long-lived reader: :meth:`refresh` (with
        ``auto_refresh`` every call reads the newest commit already; this reads the descriptions anew)."""
        return self.refresh()

    def highlight(self, query: str, texts: Sequence[str], retriever: Optional[str] = None,
                  fusion: Optional[str] = None) -> Optional[List[List[Tuple[int, int]]]]:
        """:meth:`retrieval.index.Index.highlight` through the first shard (the analysis of a query's
        words is the same in every shard)."""
        spec = str(self.pipeline(retriever, fusion))
        with self._reading():
            local = getattr(self.shards[0], "index", None)
            if local is not None:
                return local.highlight(query, list(texts), retriever=spec)
            return self._call(self.shards[:1], "highlight", (query, list(texts), spec), {})[0]

    def search_df(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, fusion: Optional[str] = None,
                  qid: str = "1", text: bool = False, **options):
        """:meth:`retrieval.index.Index.search_df` across the shards."""
        from retrieval.frames import search_df

        return search_df(self, query, qid, text, k=k, retriever=retriever, fusion=fusion, **options)

    # -- search ----------------------------------------------------------------------------
    def search(self, query: str, k: int = DEFAULT_K, retriever: Optional[str] = None, *,
               request: Optional[SearchRequest] = None, **options: Unpack[SearchOptions]) -> Hits:
        """:meth:`retrieval.index.Index.search` across the shards (``prf``: this search's pseudo-relevance
        feedback, run over the whole index: :mod:`retrieval.sharded.prf`)."""
        req = search_request("ShardedIndex.search", request, k, retriever, options)
        if not isinstance(query, str) or not query.strip():
            raise InputError("query text is empty")
        hits = self._run([("0", query)], req)["0"]
        for h in hits:
            h.qid = None
        return hits

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = DEFAULT_K,
                     retriever: Optional[str] = None, *, request: Optional[SearchRequest] = None,
                     **options: Unpack[BatchOptions]) -> Dict[str, List[Hit]]:
        """:meth:`retrieval.index.Index.batch_search` across the shards (every form of ``queries``)."""
        from retrieval.frames import batch_result

        qs, k = as_queries(queries, qids, k)
        req, run = batch_request("ShardedIndex.batch_search", request, k, retriever, options)
        size = run["batch_size"] or max(len(qs), 1)
        out: Dict[str, List[Hit]] = {}
        for i in range(0, len(qs), size):
            chunk = [(q.qid, q.text) for q in qs[i:i + size]]
            out.update(self._run(chunk, req.but(ranks=False), run["threads"]))
        return batch_result(out, qs, req.text, run["as_frame"])

    def _run(self, queries: List[Tuple[str, str]], req: SearchRequest, threads: int = 1) -> Dict[str, List[Hit]]:
        if req.per_document:
            raise InputError("per_document does not apply to a sharded index yet")
        _no_document_dimsel(req.dimsel)
        from retrieval.sharded.pins import MovedOn

        for attempt in range(3):
            try:
                with self._reading():  # every round reads the same commit of every shard
                    return self._rounds(queries, req, threads)
            except MovedOn:  # a replica moved past the commit read (restarted, a commit between): the newest
                if attempt == 2 or (self._pins is not None and self._pins.gate.inside()):
                    raise
        raise AssertionError("unreachable")

    def _rounds(self, queries: List[Tuple[str, str]], req: SearchRequest, threads: int) -> Dict[str, List[Hit]]:
        from retrieval.sharded import prf as fb

        p = self.pipeline(req.retriever, req.fusion)
        feedback = fb.settings(self._router, p, req.prf, self._prf)  # {member: Feedback}: expanded by this router
        self._warn_fields(req.filter)
        k, text, timings, ranks = req.k, req.text, req.timings, req.ranks
        kk = k if not p.fused else max(k, req.depth or DEPTH)
        texts = [t for _, t in queries]
        names = list(p.retrievers)
        stats, lists, rows = self._lists(p, queries, kk, req, threads, feedback)
        conf = self._confidence(p, texts, {n: [lists[n][q] for q, _ in queries] for n in names}, stats)
        out = {}
        for j, (qid, _t) in enumerate(queries):
            out[qid] = Hits(self._hits(p, {n: lists[n][qid] for n in names}, k, qid, conf and conf[j], ranks),
                            str(p))
        if text:
            t0 = time.perf_counter()
            self._texts([h for hs in out.values() for h in hs], rows)
            _tick(timings, "text", t0)
        return out

    def _lists(self, p: Pipeline, queries: List[Tuple[str, str]], kk: int, req: SearchRequest, threads: int = 1,
               feedback=None):
        """Rounds 1 to 3 for the members of ``p``: (the global statistics, ``{name: {qid: the merged
        global list of its first kk}}``, the texts the search round sent along or None). ``feedback``:
        {member: Feedback} expanded by this router (:mod:`retrieval.sharded.prf`). Of ``req`` it reads
        the filter, the dimension selection, ``text`` and ``timings``."""
        from retrieval.sharded import prf as fb

        filter, text, timings = req.filter, req.text, req.timings
        # what every shard is asked for in this round: kk hits under the filter and dimension selection
        # (the texts only where they come along); the rest of the request is the router's own
        shard_req = SearchRequest(k=kk, filter=filter, dimsel=req.dimsel, text=False)
        feedback = feedback or {}
        texts = [t for _, t in queries]
        names = list(p.retrievers)
        t0 = time.perf_counter()
        stats, answers = self._stats(texts, names, filter)
        _tick(timings, "stats", t0)
        rules = {n: self._info[0]["retrievers"][n] for n in names}
        deep = self._deepened(answers, rules)
        t0 = time.perf_counter()
        plain = {n: r for n, r in rules.items() if n not in deep and n not in feedback}
        lists, rows = {}, None
        if plain:
            along = bool(text and not p.fused and not deep)  # the hits' texts come with the lists: no fetch round
            found = self._all("search", queries, list(plain), shard_req.but(text=along), stats, self._options,
                              threads)
            if along:
                from retrieval.sharded.shard import TEXTS

                rows = {d: r for a in found for d, r in (a.get(TEXTS) or {}).items()}
            lists = merge.merge_all(plain, found, [q for q, _ in queries], kk)
        for n in deep:
            lists[n] = self._deep_search(n, rules[n], queries, shard_req, stats, threads, deep[n], feedback.get(n))
        for n in feedback:
            if n not in deep:
                expanded, st = fb.expand(self._router, n, feedback[n], queries, kk, stats[n], threads)
                found = self._all("search", queries, [n], shard_req, dict(stats, **{n: st}), self._options, threads,
                                  expanded={n: expanded})
                lists.update(merge.merge_all({n: rules[n]}, found, [q for q, _ in queries], kk))
        _tick(timings, "search", t0)
        return stats, lists, rows

    def _confidence(self, p: Pipeline, texts: List[str], per: Dict[str, list], stats) -> Optional[List[dict]]:
        """Round 4 for a fusion that weighs by confidence: per text, each member's confidence in its
        merged list (``per``: {name: one list per text}), on one shard; else None."""
        if not (p.fused and p.fusion.confidence):
            return None
        if len(self.shards) == 1:
            return self.shards[0].confidence(texts, per, stats, self._options)
        return self._call(self.shards[:1], "confidence", (texts, per, stats, self._options), {})[0]

    # -- explain ---------------------------------------------------------------------------
    def explain(self, query: str, docid: str, retriever: Optional[str] = None, fusion: Optional[str] = None,
                depth: Optional[int] = None, dimsel=None, filter=None, request: Optional[SearchRequest] = None) -> dict:
        """:meth:`retrieval.index.Index.explain` across the shards: the same JSON-ready dict one
        folder holding every shard's documents answers. The members' lists are the merged global
        lists (rounds 1 to 3 of a search, ``depth or 100`` deep, the filter applied as a search
        applies it), the fusion's arithmetic runs on them with the global confidences, and each
        member's parts come from the shard that owns ``docid`` (:func:`indexes.sharded.shard_of`):
        its retrievers scoring with the global statistics (BM25 and DeepCT's BM25 mode through the
        Java helper's ``explainWith``: Lucene's explanation with the summed df, N and avgdl), so the
        parts add up to the global score. Only ``details.lucene_explanation``, Lucene's own text,
        differs from one folder's: it names the shard's doc number. An unknown ``docid`` raises
        :class:`indexes.errors.NotFound`, bad input InputError, as one folder's."""
        from indexes.errors import NotFound
        from retrieval.index import explanation, member_of
        from retrieval.kinds import Explained
        from retrieval.sharded.pins import MovedOn

        req = request_of(request, retriever=retriever, fusion=fusion, depth=depth, dimsel=dimsel, filter=filter)
        depth, dimsel, filter = req.depth, req.dimsel, req.filter
        if not isinstance(query, str) or not query.strip():
            raise InputError("query text is empty")
        _no_document_dimsel(dimsel)
        p = self.pipeline(req.retriever, req.fusion)
        if any(n in self._prf for n in p.retrievers):  # one folder explains its configured expansion; not built here
            from indexes.errors import ParameterError

            raise ParameterError("explain is not available on a sharded index whose {_p} is configured with "
                                 "{prf} (pseudo-relevance feedback): configure it off to explain the query as typed",
                                 _p=str(p))
        if not isinstance(docid, str) or not docid:
            raise NotFound(f"no document {str(docid)[:200]!r} in the index")
        n = depth or DEPTH
        owner = self.shards[sh.shard_of(docid, len(self.shards))]
        self._warn_fields(filter)
        for attempt in range(3):
            try:
                with self._reading():  # every round reads the same commit of every shard
                    if not self._call([owner], "fetch", ([docid],), {})[0]:
                        raise NotFound(f"no document {str(docid)[:200]!r} in the index")
                    stats, lists, _rows = self._lists(p, [("0", query)], n, req.but(text=False))
                    lists = {name: per["0"] for name, per in lists.items()}
                    conf = self._confidence(p, [query], {name: [v] for name, v in lists.items()}, stats)
                    got = self._call([owner], "explain", (query, docid, lists, stats, self._options, filter,
                                                         dimsel, p.fused), {})[0]
                break
            except MovedOn:  # as _run: a replica moved past the commit read
                if attempt == 2 or (self._pins is not None and self._pins.gate.inside()):
                    raise
        refused = bool(got["refused"])
        members = {}
        for name in p.retrievers:
            e = got["explained"][name]
            ex = Explained(e["score"], e["parts"], e["formula"], tuple(tuple(c) for c in e["columns"]),
                           e["details"], e["notes"])
            members[name] = member_of(e["kind"], ex, docid, lists[name], n, refused, p.fused)
        return explanation(p, query, docid, n, filter, lists, members, conf and conf[0])

    def _stats(self, texts: List[str], names: List[str], filter) -> Tuple[Dict[str, Any], List[dict]]:
        """Round 1: the statistics summed over the shards, and each shard's answer. Skipped (every
        retriever's None, as its shards would answer) when no retriever of the pipeline reads any
        statistics and there is no filter to count (``describe``'s ``needs_stats``)."""
        need = self._info[0].get("needs_stats") or {}
        if filter is None and not any(need.get(n, True) for n in names):
            return {n: None for n in names}, [{} for _ in self.shards]
        answers = self._all("stats", texts, names, self._options, filter)
        return merge.sum_stats_by_name(answers, names), answers

    @staticmethod
    def _deepened(answers: List[dict], rules: Dict[str, str]) -> Dict[str, Tuple[int, int]]:
        """The retrievers whose filtered lists one folder cuts from its unfiltered ranking (a filter
        allowing DEEPEN_SHARE of the documents or more, a Lucene retriever: its rounding and tie offsets
        are then the unfiltered list's), with the filter's (allowed, total) over every shard."""
        from retrieval.index import DEEPEN_SHARE
        from retrieval.sharded.shard import ALLOWED

        counts = [a.get(ALLOWED) for a in answers]
        if any(c is None for c in counts):
            return {}
        n, total = sum(c[0] for c in counts), max(sum(c[1] for c in counts), 1)
        if not n or n < DEEPEN_SHARE * total:
            return {}
        return {name: (n, total) for name, rule in rules.items() if rule == "anserini"}

    def _deep_search(self, name: str, rule: str, queries, req: SearchRequest, stats, threads,
                     counts: Tuple[int, int], feedback=None) -> Dict[str, list]:
        """Each query's first ``req.k`` allowed documents (``req.filter``) of the merged unfiltered
        ranking, read deep enough, as :func:`retrieval.filters.first_allowed` reads one folder's.
        With ``feedback``, the ranking of the query expanded for a search of each depth read, as one
        folder's reader asks its feedback retriever for that many hits."""
        from retrieval.sharded import prf as fb

        k, (n, total) = req.k, counts
        depth = min(total, max(k + 10, -(-2 * k * total // max(1, n))))
        todo, out, scoring = list(queries), {}, stats
        while todo:
            more = {}
            if feedback is not None:
                expanded, st = fb.expand(self._router, name, feedback, todo, depth, stats[name], threads)
                more = {"expanded": {name: expanded}}
                scoring = dict(stats, **{name: st})
            found = self._all("search", todo, [name], req.but(k=depth), scoring, self._options, threads, True,
                              **more)
            merged = merge.merge_all({name: rule}, found, [q for q, _ in todo], depth)[name]
            later = []
            for q in todo:
                got = merge.filtered_first(merged[q[0]], k)
                if len(got) >= k or depth >= total or len(merged[q[0]]) < depth:
                    out[q[0]] = got
                else:
                    later.append(q)
            todo, depth = later, min(total, depth * 4)
        return out

    @staticmethod
    def _hits(p: Pipeline, lists, k: int, qid: str, conf, ranks: bool) -> List[Hit]:
        if not p.fused:
            one = p.retrievers[0]
            hits = [Hit(docid=d, score=s, rank=i, qid=qid, scores={one: s}) for i, (d, s) in enumerate(lists[one], 1)]
        else:
            hits = [Hit(docid=d, score=s, rank=i, qid=qid, scores=raw)
                    for i, (d, s, raw) in enumerate(merge.fuse_lists(p, lists, k, conf), 1)]
        if ranks:
            pos = {n: {d: i for i, (d, _s) in enumerate(lists[n], 1)} for n in p.retrievers}
            for h in hits:
                h.ranks = {n: pos[n].get(h.docid) for n in p.retrievers}
        return hits

    def _texts(self, hits: List[Hit], rows: Optional[Dict[str, tuple]] = None) -> None:
        """Each hit's title, text and metadata: from ``rows`` (sent with the lists), else fetched from
        the hit's own shard (:meth:`Router.fetch`)."""
        rows = dict(rows or {})
        rows.update(self._router.fetch([h.docid for h in hits if h.docid not in rows]))
        for h in hits:
            row = rows.get(h.docid)
            if row is not None:
                h.title, h.text, h.metadata = row[0], row[1], row[2] or {}

    def unknown_fields(self, filter) -> List[str]:
        """:meth:`retrieval.index.Index.unknown_fields` for the whole index: the fields of ``filter`` that no
        shard's documents carry, in the filter's order."""
        return self._unknown(filter, fresh=True)[0]

    def _unknown(self, filter, fresh: bool) -> Tuple[List[str], Dict[str, int]]:
        """(the fields of ``filter`` no document carries, every field): ``fresh=False`` reads the last
        ``describe``'s fields first and asks the shards again only where one is unknown there."""
        flt = parse_filter(filter)
        if flt is None:
            return [], {}

        def unknown_in(fields):
            return list(dict.fromkeys(f for f, _, _ in flt.conditions if f != DOCID and f not in fields))

        fields = self._fields(fresh=fresh)
        unknown = unknown_in(fields)
        if unknown and not fresh:  # perhaps added since: ask the shards again
            fields = self.fields()
            unknown = unknown_in(fields)
        return unknown, fields

    def _warn_fields(self, filter) -> None:
        unknown, fields = self._unknown(filter, fresh=False)
        if unknown:
            warnings.warn(unknown_fields_message(unknown, fields), FilterWarning, stacklevel=4)

    def get(self, docid: str) -> Optional[Document]:
        i = sh.shard_of(docid, len(self.shards))
        with self._reading():
            return self._call(self.shards[i:i + 1], "get", (docid,), {})[0]

    @property
    def docstore(self) -> "ShardedDocs":
        """:attr:`retrieval.index.Index.docstore`'s reading for the whole index: rows ``(docid, title,
        text, metadata)`` by id (``get``, ``get_many``), each from its own shard, and ``len``."""
        return ShardedDocs(self._router)

    def snapshot(self) -> "ShardedSnapshot":
        """:meth:`retrieval.index.Index.snapshot` for the whole index: the newest commit of every shard,
        held until the snapshot is closed (``with ix.snapshot() as s``), so that its searches, counts
        and documents all read that one commit whatever writers commit meanwhile; the index itself moves
        on. Shards in other processes (Ray Serve replicas) keep no old generation for a caller: there
        each call of the snapshot reads the newest commit at that time."""
        return ShardedSnapshot(self, self._router)

    def close(self) -> None:
        for s in self.shards:
            close = getattr(s, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> "ShardedIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ShardedDocs:
    """The documents of a sharded index by id, as :attr:`retrieval.index.Index.docstore` gives a
    folder's: rows ``(docid, title, text, metadata)``, each read from its own shard. ``inside``: the
    context every read runs in (a snapshot's hold)."""

    def __init__(self, router: Router, inside: Optional[Callable[[], Any]] = None):
        self._router = router
        self._inside = inside or contextlib.nullcontext

    def get_many(self, docids) -> Dict[str, tuple]:
        """The rows of those of ``docids`` the index holds, in the order asked (each id once)."""
        ids = list(dict.fromkeys(docids))
        with self._inside(), self._router.reading():
            rows = self._router.fetch(ids)
        return {d: (d, *rows[d]) for d in ids if d in rows}

    def get(self, docid: str) -> Optional[tuple]:
        return self.get_many([docid]).get(docid)

    def __len__(self) -> int:
        with self._inside():
            return self._router.count()

    def close(self) -> None:
        """Nothing to let go: each shard's store belongs to its shard."""


class ShardedSnapshot:
    """One commit of every shard of a :class:`ShardedIndex`, held until closed (see
    :meth:`ShardedIndex.snapshot`): the surface of :class:`retrieval.index.Snapshot` (search,
    batch_search, explain, get, ``len``, docstore, manifest, generation, close, ``with``), each call
    made through the index with every shard reading its held generation."""

    def __init__(self, index: ShardedIndex, router: Router):
        self._ix, self._router = index, router
        self.path = index.path
        self._held = router.hold_commit()
        self._open = True
        self._summary: Optional[dict] = None

    @contextlib.contextmanager
    def _inside(self):
        if not self._open:
            raise InputError("this snapshot is closed")
        with ExitStack() as stack:
            for s, view in zip(self._ix.shards, self._held or ()):
                stack.enter_context(s.holding(view))
            yield

    def search(self, query: str, k: int = 10, **options) -> List[Hit]:
        """:meth:`ShardedIndex.search` on this commit."""
        with self._inside():
            return self._ix.search(query, k, **options)

    def batch_search(self, queries: QueriesArg, qids: Optional[Sequence[str]] = None, k: int = 10,
                     **options) -> Dict[str, List[Hit]]:
        """:meth:`ShardedIndex.batch_search` on this commit."""
        with self._inside():
            return self._ix.batch_search(queries, qids, k, **options)

    def explain(self, query: str, docid: str, **options) -> dict:
        """:meth:`ShardedIndex.explain` on this commit."""
        with self._inside():
            return self._ix.explain(query, docid, **options)

    def get(self, docid: str) -> Optional[Document]:
        with self._inside():
            return self._ix.get(docid)

    def __len__(self) -> int:
        with self._inside():
            return len(self._ix)

    @property
    def docstore(self) -> ShardedDocs:
        return ShardedDocs(self._router, self._inside)

    def _described(self) -> dict:
        if self._summary is None:
            with self._inside():
                self._summary = self._router.summary()
        return self._summary

    @property
    def manifest(self) -> dict:
        """:meth:`Router.summary`'s ``manifest`` of this commit."""
        return self._described()["manifest"]

    @property
    def generation(self) -> int:
        """The sum of the shards' generations in this commit."""
        return self._described()["generation"]

    @property
    def shards(self) -> List[dict]:
        """Each shard's folder, documents and generation in this commit."""
        return self._described()["shards"]

    @property
    def retrievers(self) -> List[str]:
        return self._ix.retrievers

    def pipeline(self, retriever: Optional[str] = None, fusion: Optional[str] = None) -> Pipeline:
        return self._ix.pipeline(retriever, fusion)

    def default_pipeline(self) -> DefaultPipeline:
        return self._ix.default_pipeline()

    def fields(self) -> Dict[str, int]:
        with self._inside():
            return self._ix.fields()

    def close(self) -> None:
        held, self._held, self._open = self._held, None, False
        for view in held or ():
            view.close()

    def __enter__(self) -> "ShardedSnapshot":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_index(path: Union[str, Path], auto_refresh: bool = True):
    """:func:`retrieval.open_index`: a sharded index's :class:`ShardedIndex` (its folder holds the
    sharded manifest), else the folder's :class:`retrieval.index.Index`; ``auto_refresh`` as both
    classes' ``open`` take it."""
    if sh.is_sharded(path):
        return ShardedIndex.open(path, auto_refresh=auto_refresh)
    from retrieval.index import Index

    return Index.open(path, auto_refresh=auto_refresh)
