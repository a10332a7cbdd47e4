"""Sub-index kinds: the one protocol every kind of sub-index follows, and the
registry that finds a kind by the ``kind`` field of its manifest entry.

A kind answers the same questions whatever it stores:

- ``build(folder, name, ctx, spec)``: write a new sub-index into ``folder`` from
  the folder's documents (``ctx``: :class:`BuildContext`); returns its manifest entry.
- ``append(folder, entry, docs, ctx)``: add documents; returns the updated entry.
- ``delete(folder, entry, docids, ctx)``: remove documents by id; returns the updated entry.
- ``compact(folder, entry, ctx)``: drop what deletions left behind (Lucene segments with
  deletes expunged, faiss rebuilt without masked rows); returns the updated entry.
- ``retriever(folder, entry)``: open it for search, a :class:`Retriever` (every kind's
  derives from :class:`RetrieverBase`); ``reopen(old, folder, entry)`` opens another
  generation, keeping what does not change between generations (a loaded encoder).
- ``count(folder, entry)``: live documents per physical index it keeps, for ``retr check``;
  ``ids(folder, entry)`` their ids, ``present(folder, entry, docids)`` which of ``docids``
  each physical index holds.

The writer calls ``append``, ``delete`` and ``compact`` on ``folder``, a new
generation's folder that starts as a hard-link copy of the current one (see
:mod:`indexes.generations`): a kind writes new files there, or replaces a name with
``os.replace``, and never writes into a file it did not create in that call.
- ``stats(folder, entry)``: figures `retr info` shows, read from the sub-index's files.
- ``entries(name, entry)``: the manifest entries one build contributes (DeepCT adds
  a DeepCT-Query alias over the same folder); ``dimsel``: whether query-aware
  dimension selection applies to it, and ``with_dimsel`` to apply it.

A kind is a package registered by one line of :data:`KINDS`: its ``subindex``
module holds ``KIND`` (the :class:`SubIndexKind`) and its spec (a dataclass whose
``kind`` names the kind), its ``options`` module ``OPTIONS`` (:class:`KindOptions`: the
options and commands it adds to the command line, as data). Nothing outside the package
names the kind. Packages are imported only when a folder (or the command line)
uses them, so opening a BM25-only folder loads neither torch nor the DeepCT code,
and no module is imported just for the side effect of registering something.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple,
                    runtime_checkable)

from indexes.errors import IndexFormatError, InputError
from retrieval.options import Command, Option
from retrieval.types import Query, Scored, contents

if TYPE_CHECKING:
    from retrieval.filters import Allowed

Confidence = Optional[Tuple[str, float]]  # (kind, value) of a list, for confidence-weighted fusion

#: kind name -> its package (``<package>.subindex:KIND``, ``<package>.options:OPTIONS``)
KINDS: Dict[str, str] = {
    "bm25": "retrieval.bm25",
    "dense": "retrieval.dense",
    "deepct": "retrieval.deepct",
    "splade": "retrieval.splade",
}

#: the kind every folder is built with: it indexes the corpus as it streams in (``SubIndexKind.streams``),
#: its sub-index is named after it, and a search names it when it names nothing else
PRIMARY = "bm25"


@dataclass
class BuildContext:
    """What a kind may read while it builds: the document store (``docs()`` streams
    ``(docid, contents)`` from it), the corpus fingerprint, a cache folder for
    resumable work, vectors another stage already computed (``precomputed``: the quality
    estimator's), what the kinds computed ahead for the documents (``shared``, per sub-index name,
    :meth:`SubIndexKind.encode_documents`; :meth:`shared_part` is the one of ``subindex``: a sharded
    build computes it once for all its shards), and the executor that
    runs the kind's model (``retrieval.executors.runner_of(ctx.executor)``)."""

    store_path: Path
    fingerprint: str
    cache_base: Path
    quiet: bool = False
    threads: int = 2
    precomputed: Optional[dict] = None
    shared: Optional[Dict[str, Any]] = None              # sub-index name -> what its kind encoded ahead
    subindex: str = ""                                   # the name of the sub-index being built or changed
    generation: int = 0                                  # the generation being written
    stream: Optional[Iterable[Tuple[str, str]]] = None   # docs as they are read (BM25 during a build)
    meanwhile: Optional[Callable[[], None]] = None       # work that overlaps the Lucene indexer
    executor: Any = None  # where model stages run: an opened runner of retrieval.executors (None: in-process)

    def docs(self) -> Iterable[Tuple[str, str]]:
        if self.stream is not None:
            return self.stream
        from indexes.docstore import DocStore

        return ((docid, contents(title, text)) for docid, title, text, _meta in DocStore(self.store_path).iter_docs())

    def shared_part(self) -> Any:
        """What the kind of the sub-index being built or changed computed ahead for these documents
        (its :meth:`SubIndexKind.encode_documents`, read by that kind alone), or None."""
        return (self.shared or {}).get(self.subindex) if self.subindex else None


@dataclass
class Explained:
    """A retriever's account of one document's score for one query (``Retriever.explain``): the
    parts its search added up, read from the sub-index itself (Lucene's explanation of a term, a
    stored impact, a stored vector). ``parts`` are dicts with a ``label`` (a query term, a step)
    and a ``value``; the values add up to ``score``, the score its search gives the document.
    ``columns`` are the parts' further keys worth a column in a table, with their headings."""

    score: Optional[float]                  # None: the sub-index does not hold the document
    parts: List[Dict[str, Any]] = field(default_factory=list)
    formula: str = ""                       # how the parts make the score, in one line
    columns: Tuple[Tuple[str, str], ...] = ()
    details: Dict[str, Any] = field(default_factory=dict)   # parameters and statistics (k1, b, N, dimensions)
    notes: List[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        """The parts added up (what ``score`` must be, to float precision)."""
        return float(sum(p["value"] for p in self.parts))


@runtime_checkable
class Retriever(Protocol):
    """What a kind's retriever answers (``SubIndexKind.retriever``); the reader and fusion call
    these and nothing else. Beyond ``search`` and ``batch_search`` they are capabilities a kind
    may lack, and :class:`RetrieverBase` (every kind's retriever derives from it) answers them
    for a kind that does: no options, no filtered search of its own, no confidence, no rebind,
    nothing to close."""

    kind: str
    options: Tuple[str, ...]  # what Index.configure may set (configure's keywords)

    def search(self, text: str, k: int) -> Scored: ...

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]: ...

    @property
    def native_filter(self) -> bool:
        """Whether :meth:`search_filtered` is its own (a Lucene FILTER clause, a faiss selector);
        without one the reader filters its full ranking."""
        ...

    def search_filtered(self, text: str, k: int, allowed: "Allowed") -> Scored:
        """The first ``k`` documents of ``allowed`` in its ranking, exactly."""
        ...

    def configure(self, **options: Any) -> Any:
        """Set search options (keys of ``options``) for later searches."""
        ...

    def explain(self, text: str, docid: str, ranked: Scored) -> Explained:
        """How its search scores ``docid`` for ``text``, part by part (:class:`Explained`), with the
        options in use. ``ranked``: the list its search returned for ``text`` (the score there is
        the one to account for, where the document is in it)."""
        ...

    def confidence(self, texts: Sequence[str], lists: Sequence[Scored]) -> List[Confidence]:
        """Per text, its confidence in the list it returned for it (``retrieval.fusion``), or None."""
        ...

    merge_rule: str  # how a sharded index merges its shards' lists (retrieval.sharded.merge.merge_lists)

    def collection_stats(self, texts: Sequence[str]) -> Any:
        """The statistics its scores of ``texts`` read from this sub-index, as nested dicts/lists of
        integers that add up over shards (``retrieval.sharded.merge.sum_stats``): BM25's document
        count, lengths and the terms' document frequencies; None: its scores need none."""
        ...

    def with_stats(self, stats: Any) -> "Retriever":
        """This retriever scoring with ``stats`` (:meth:`collection_stats` summed over a sharded
        index's shards; None: its own) and returning scores as :attr:`merge_rule` merges them
        (Lucene's: before Anserini's rounding and tie offsets). Its confidence uses ``stats`` too."""
        ...

    def rebind(self, new: "Retriever") -> Optional["Retriever"]:
        """The same retriever over ``new``, another generation's retriever of its sub-index (a
        wrapper such as dimension selection follows the index so), or None: it does not follow."""
        ...

    def close(self) -> None:
        """Release what it holds (a Lucene reader); it is not searched again."""
        ...


class RetrieverBase:
    """The defaults of :class:`Retriever`'s capabilities; a kind's retriever overrides what it has."""

    kind = ""
    options: Tuple[str, ...] = ()

    def search(self, text: str, k: int) -> Scored:
        raise NotImplementedError

    def batch_search(self, queries: Sequence[Query], k: int, threads: int = 1) -> Dict[str, Scored]:
        raise NotImplementedError

    @property
    def native_filter(self) -> bool:
        return type(self).search_filtered is not RetrieverBase.search_filtered

    def search_filtered(self, text: str, k: int, allowed: "Allowed") -> Scored:
        # none of its own: the reader reads its full ranking and filters it (native_filter is False)
        raise NotImplementedError

    def configure(self, **options: Any) -> Any:
        if options:
            raise InputError(f"{', '.join(options)} do not apply to the {self.kind or type(self).__name__} retriever")
        return self

    #: the options one search may set for itself (:meth:`with_options`; Index.search's keywords)
    call_options: Tuple[str, ...] = ()

    def with_options(self, **options: Any) -> "RetrieverBase":
        """This retriever with ``options`` (keys of :attr:`call_options`) for the searches made
        through what it returns, its own settings left as they are: one request's options."""
        if options:
            raise InputError(f"{', '.join(options)} do not apply to one search of the "
                             f"{self.kind or type(self).__name__} retriever")
        return self

    def confidence(self, texts: Sequence[str], lists: Sequence[Scored]) -> List[Confidence]:
        return [None] * len(texts)

    def explain(self, text: str, docid: str, ranked: Scored) -> Explained:
        raise InputError(f"the {self.kind or type(self).__name__} retriever cannot explain its scores")

    def highlight(self, text: str, passages: Sequence[str]) -> Optional[List[List[Tuple[int, int]]]]:
        # per passage, the (start, end) character spans of its words that match the query's terms
        # under this retriever's own analysis (stemming); None: it has no analyser to tell
        return None

    merge_rule = "score"  # score descending (faiss); Lucene's retrievers: "anserini"

    def collection_stats(self, texts: Sequence[str]) -> Any:
        return None  # its scores read no collection statistics

    def with_stats(self, stats: Any) -> "RetrieverBase":
        return self

    def rebind(self, new: Retriever) -> Optional[Retriever]:
        return None

    def close(self) -> None:
        pass


class SubIndexKind:
    """Base class of every kind; a kind overrides what it can do."""

    name = ""
    dimsel = False  # query-aware dimension selection applies (dense vectors)
    streams = False  # built from the corpus as it is first read (ctx.docs() is that stream), not from the store
    uses_model = False  # its build runs a model stage (an executor, such as Ray, can run it)
    alias_fields: tuple = ()  # entry fields of this kind that an alias of it (entries()) mirrors after a change

    def default_spec(self):
        """The spec a build uses when it is given none of this kind (the primary kind's)."""
        raise InputError(f"a {self.name} sub-index needs a spec")

    def build(self, folder: Path, name: str, ctx: BuildContext, spec) -> dict:
        raise NotImplementedError

    def append(self, folder: Path, entry: dict, docs: Sequence, ctx: BuildContext) -> dict:
        raise InputError(f"sub-index kind {self.name!r} cannot take new documents; rebuild the index instead")

    def delete(self, folder: Path, entry: dict, docids: Sequence[str], ctx: BuildContext) -> dict:
        raise InputError(f"sub-index kind {self.name!r} cannot delete documents; rebuild the index instead")

    def compact(self, folder: Path, entry: dict, ctx: BuildContext) -> dict:
        return entry

    def retriever(self, folder: Path, entry: dict) -> Retriever:
        raise NotImplementedError

    def reopen(self, old: Retriever, folder: Path, entry: dict) -> Retriever:
        return self.retriever(folder, entry)

    def count(self, folder: Path, entry: dict) -> Dict[str, int]:
        raise NotImplementedError

    def ids(self, folder: Path, entry: dict) -> Dict[str, List[str]]:
        raise NotImplementedError

    def present(self, folder: Path, entry: dict, docids: Sequence[str]) -> Dict[str, set]:
        return {k: set(v) & set(docids) for k, v in self.ids(folder, entry).items()}

    def entries(self, name: str, entry: dict) -> Dict[str, dict]:
        return {name: entry}

    def stats(self, folder: Path, entry: dict) -> Dict[str, Any]:
        """What `retr info` shows of the sub-index beyond its manifest entry, read from its files
        (a sparse kind's postings and mean terms per passage); nothing by default."""
        return {}

    def encode_documents(self, docs: Sequence, spec=None, entry: Optional[dict] = None, quiet: bool = False,
                         executor=None, threads: int = 2, given: Any = None) -> Any:
        """What this kind's model makes of ``docs`` (``retrieval.types.Document``), in one pass, as a
        build of ``spec`` or a change of ``entry`` (``threads``: the writer's) makes it, in a form the
        kind alone reads: a build or change given it (``BuildContext.shared``) finds it as
        ``BuildContext.shared_part()`` and takes its own documents' part instead of encoding them in
        batches of their own, which would differ in the last bits (a writer that builds several folders
        from one corpus, a sharded build, computes it once for all). ``given``: what the caller already
        made of ``docs`` (a build's ``precomputed``), which a kind returns if it is its own form. None:
        the kind has no model stage to run ahead."""
        return None

    def after_add(self, index, name: str, spec, quiet: bool = False) -> None:
        """Runs once the sub-index built from ``spec`` is listed in the manifest of ``index``
        (DeepCT tunes a fusion)."""

    def untuned(self, spec):
        """``spec`` with nothing chosen on the documents at build time: a writer that builds the
        documents in parts (a sharded build) builds each part with it, then asks :meth:`choose` once
        over the whole index. By default ``spec`` itself (a kind that chooses nothing)."""
        return spec

    def choose(self, index, name: str, spec, quiet: bool = False) -> Optional[Callable[[Any], None]]:
        """What a build of ``spec`` chooses on its documents (DeepCT's defaults and fusion), chosen
        through the search of ``index`` (a :class:`retrieval.searcher.Searcher` opened by its folder,
        which this may configure: a folder, or a sharded folder as a whole), as ``edit(change)`` of the
        index's record (``indexes.folder.Change``), which the caller commits (``begin_change``; a
        sharded index records it in every shard as one commit). None: nothing to choose."""
        return None

    def with_dimsel(self, index, name: str, dimsel):
        # Not this kind's feature: the kind that has it says what the folder lacks.
        for other in KINDS:
            k = get_kind(other)
            if k.dimsel:
                return k.with_dimsel(index, name, dimsel)
        raise InputError(f"dimension selection does not apply to {name!r} ({self.name})")


class KindOptions:
    """What a kind adds to the command line (its package's ``options.OPTIONS``), as data: its
    :class:`retrieval.options.Option` values, each added to the commands it ``applies_to``
    (``"index"``: `retr index`; ``"search"``: `retr search` and `retr explain`) and listed under the
    kind's ``title`` in ``--help``, and its own :class:`retrieval.options.Command` values. The
    commands that show the options hand every value they parsed to the methods below, which take
    what is theirs (the shared ``device``, ``batch_size`` and ``threads`` too). Errors name
    parameters; ``flags`` says which flag is which."""

    title = ""                      # heading of its options in --help
    flag = ""                       # the option of `retr index` that asks for its sub-index ("" : always built)
    options: Sequence[Option] = ()  # options of `retr index` and `retr search`
    commands: Sequence[Command] = ()  # commands it adds (`retr train dense`)
    flags: Dict[str, str] = {}      # parameter -> flag, for ParameterError messages (cli.params.flags)

    def options_for(self, command: str) -> Tuple[Option, ...]:
        """Its options of ``command`` (``"index"`` or ``"search"``), each with its heading."""
        return tuple(o if o.section else replace(o, section=self.title)
                     for o in self.options if command in o.applies_to)

    def specs(self, values: Dict[str, Any]) -> Dict[str, Any]:
        """The sub-indexes (name -> spec) that `retr index` was asked for."""
        return {}

    def configure(self, values: Dict[str, Any]) -> Dict[str, Any]:
        """``Index.configure`` options from `retr search`'s values (None: keep the default)."""
        return {}

    def search_args(self, values: Dict[str, Any]) -> Dict[str, Any]:
        """Further keyword arguments of ``Index.search`` / ``batch_search`` (``dimsel``)."""
        return {}

    def retriever(self, values: Dict[str, Any]) -> Optional[str]:
        """The retriever these `retr search` values ask for by a flag of their own (Pyserini's
        ``--bm25``), or None."""
        return None

    def tag(self, values: Dict[str, Any]) -> Optional[str]:
        """What these `retr search` values change in how the pipeline runs, as one word for a run's
        tag (``dimsel-learned``; :func:`retrieval.runs.run_tag`), or None when they change nothing."""
        return None


_loaded: Dict[str, SubIndexKind] = {}
_options: Dict[str, KindOptions] = {}


def _package(kind: str) -> str:
    where = KINDS.get(kind)
    if where is None:
        raise IndexFormatError(f"unknown sub-index kind {kind!r} (this retr knows: {', '.join(KINDS)})")
    return where


def get_kind(kind: str) -> SubIndexKind:
    """The kind registered under ``kind``, imported on first use."""
    k = _loaded.get(kind)
    if k is None:
        k = _loaded[kind] = importlib.import_module(_package(kind) + ".subindex").KIND
    return k


def options_of(kind: str) -> KindOptions:
    """What the kind registered under ``kind`` adds to the command line."""
    o = _options.get(kind)
    if o is None:
        o = _options[kind] = importlib.import_module(_package(kind) + ".options").OPTIONS
    return o


def kind_part(kind: str, part: str):
    """The module ``part`` of the package of the kind registered under ``kind`` (``kind_part("dense",
    "encoder").DenseEncoder``), imported on first use: how another method uses a kind's model (a
    quality estimator the dense encoder, masked-LM pre-training DeepCT's term weights), by the kind's
    name through this registry, so that no method's package imports another's."""
    return importlib.import_module(f"{_package(kind)}.{part}")


def kind_of(entry: dict) -> SubIndexKind:
    return get_kind(entry.get("kind", ""))


def kind_of_spec(spec) -> SubIndexKind:
    """The kind a spec builds (its ``kind`` names it)."""
    name = getattr(spec, "kind", None)
    if not isinstance(name, str):
        raise InputError(f"a sub-index spec names its kind (a {type(spec).__name__} does not)")
    if name not in KINDS:
        raise InputError(f"unknown sub-index kind {name!r} (this retr knows: {', '.join(KINDS)})")
    k = get_kind(name)
    if hasattr(spec, "validate"):
        spec.validate()
    return k


def known() -> List[str]:
    return list(KINDS)
