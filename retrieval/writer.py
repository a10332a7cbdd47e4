"""The writer: every change to an index folder goes through here. A build
writes a new folder (document store, BM25, then each requested sub-index kind)
that appears only when everything succeeded; ``add_subindex`` adds a kind to an
existing folder; ``add_documents``, ``update_documents`` and ``delete_documents``
change every sub-index by the same documents; ``compact`` drops what deletions
left behind.

Every change of an existing folder makes a new generation (see
:mod:`indexes.generations`): under the folder's writer lock it re-reads the
manifest, cleans what dead writers left, writes the new generation's rows into
the document store and its sub-index folders as hard-link copies of the current
ones changed by the kinds, and then switches the manifest with one
``os.replace``. Readers of the old generation keep it until they move on; its
folders are removed once none holds it. A change costs what changed, not the
folder: shared files are linked, never copied.

Each sub-index kind is driven through :mod:`retrieval.kinds` (build, append,
delete, compact, entries, ...); this module holds no per-kind logic. Reading is
:mod:`retrieval.index`, which imports nothing from here.
"""
from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import (AbstractSet, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypedDict, Union)

from typing_extensions import Unpack

from indexes import generations as gens
from indexes import manifest as mf
from indexes import folder
from indexes.docstore import DocStoreWriter
from indexes.errors import DuplicateIds, InputError, ParameterError, RetrError
from retrieval.collections import check_lengths, check_metadata, count_lines, is_documents, read_corpus
from retrieval.executors import Executor, open_executor
from retrieval.index import Index
from retrieval.kinds import PRIMARY, BuildContext, SubIndexKind, get_kind, kind_of, kind_of_spec
from retrieval.options import check_keywords
from retrieval.progress import progress
from retrieval.types import Document

HISTORY = 50  # changes kept in the manifest's log (the counts cover all of them)


def _fingerprint_update(h, doc: Document) -> None:
    h.update(doc.docid.encode())
    h.update(b"\x00")
    h.update(doc.contents.encode())
    h.update(b"\x01")


_NAME = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}"  # a folder name, and searchable by name


def _check_name(name) -> None:
    if not isinstance(name, str) or not re.fullmatch(_NAME, name):
        raise InputError(f"sub-index name {name!r} must be 1-64 letters, digits, '_' or '-'")


def _plan(subindexes: Optional[Mapping[str, Any]]) -> Tuple[str, Any, Dict[str, Any]]:
    """``subindexes`` checked (names, kinds, specs) and split into the one whose kind indexes
    the corpus as it is first read (the primary kind's default spec when none does) and the rest."""
    if subindexes is not None and not isinstance(subindexes, Mapping):
        raise ParameterError("{subindexes} maps sub-index names to specs, not a {_t}", _t=type(subindexes).__name__)
    streaming, rest = [], {}
    for name, spec in (subindexes or {}).items():
        _check_name(name)
        if kind_of_spec(spec).streams:
            streaming.append((name, spec))
        else:
            rest[name] = spec
    if len(streaming) > 1:
        raise InputError("one sub-index indexes the corpus as it is read; this build asks for "
                         + ", ".join(n for n, _ in streaming))
    if not streaming:
        streaming.append((PRIMARY, get_kind(PRIMARY).default_spec()))
    return streaming[0][0], streaming[0][1], rest


class BuildOptions(TypedDict, total=False):
    """The keywords of :func:`build_index` beside its first seven (``**options: Unpack[BuildOptions]``:
    editors and type checkers know them; another keyword is a TypeError naming it), each None unless
    given: ``keep``, ``pruning``, ``precomputed``, ``generation``, ``executor``, ``shared``, ``chunk``,
    ``include``, ``exclude``, ``source`` (see :func:`build_index`)."""

    keep: Union[AbstractSet[str], Callable[[Document], bool], None]
    pruning: Optional[dict]
    precomputed: Optional[dict]
    generation: Optional[int]
    executor: Any
    shared: Optional[dict]
    chunk: Any
    include: Any
    exclude: Any
    source: Optional[str]


class CorpusOptions(TypedDict, total=False):
    """The keywords of :func:`index_corpus` beside its first seven (``**options: Unpack[CorpusOptions]``),
    each None unless given: ``prune``, ``quality``, ``executor``, ``chunk``, ``include``, ``exclude``."""

    prune: Optional[float]
    quality: Optional[str]
    executor: Any
    chunk: Any
    include: Any
    exclude: Any


def build_index(corpus: Union[str, Path, Iterable[Document]], index_dir: Union[str, Path], *,
                subindexes: Optional[Mapping[str, Any]] = None, threads: int = 2, overwrite: bool = False,
                empty: str = "error", quiet: bool = False, **options: Unpack[BuildOptions]) -> Index:
    """Build an index folder: a document store and the sub-indexes ``subindexes`` (name -> spec,
    each spec naming its kind: ``{"dense": DenseSpec()}``). The sub-index that indexes the corpus
    as it is read (BM25's kind) is built with its default spec unless ``subindexes`` holds one
    (``{"bm25": BM25Spec(k1=1.2, b=0.75)}``). The folder appears only when every sub-index is built.

    ``corpus`` is a path (BEIR folder, JSONL, TSV, .gz; a folder of .txt/.md/.html/.pdf
    documents, or one such file: :mod:`retrieval.documents`) or an iterable of
    :class:`Document`. ``empty`` is the policy for documents without text
    (``error``, ``skip`` or ``keep``).

    ``chunk`` splits long documents into passages (:mod:`retrieval.chunking`): None, the
    default, chunks a folder of documents (256 tokens, 32 overlapping) and leaves a JSONL/TSV
    corpus's passages as they are; False never; True, a token count or a ``Chunking`` always.
    ``include``/``exclude``: globs choosing a document folder's files. The manifest's
    ``corpus.reader`` records all three (what a later change of the folder reads with).
    ``source``: what the manifest names as the corpus (default: the path, or "<python iterable>").

    ``keep`` (a set of docids or a predicate on :class:`Document`) filters the
    document stream: other documents enter no sub-index and no document store,
    so they are never encoded (static pruning, see :mod:`retrieval.quality`).
    The corpus fingerprint still covers every document. ``pruning`` is recorded
    in the manifest as-is, with the number of documents dropped added.
    ``precomputed``: vectors another stage already computed for the documents (the quality
    estimator's), which a kind uses when they are its encoder's (``BuildContext.precomputed``).
    ``shared``: per sub-index name, what its kind already made of these documents for every shard of
    a sharded index (``SubIndexKind.encode_documents``; ``BuildContext.shared``).
    ``generation``: the folder's first generation (default: 0, or the one after that of
    the folder it replaces). ``executor`` (:class:`retrieval.executors.Executor`, or an
    opened runner) says where the kinds' models run; Lucene always runs here.

    The keywords after ``quiet`` are :class:`BuildOptions` (another keyword is a TypeError naming it).
    """
    check_keywords("build_index", options, BuildOptions, "_read_as")
    o = options.get
    index_dir = Path(index_dir)
    first, first_spec, rest = _plan(subindexes)  # fails on a bad option before reading the corpus
    gen = folder.next_build_generation(index_dir) if o("generation") is None else int(o("generation"))
    source = o("source") or (str(corpus) if isinstance(corpus, (str, Path)) else "<python iterable>")
    # a bad option fails before anything is read; ``_read_as``: how index_corpus already read ``corpus``
    reading = o("_read_as") or _reading(corpus, o("chunk"), o("include"), o("exclude"))
    t0 = time.perf_counter()
    how = _First(empty=empty, keep=o("keep"), pruning=o("pruning"), threads=threads, quiet=quiet, gen=gen,
                 cache=_cache_base(index_dir), source=source, reading=reading)
    with folder.atomic_folder(index_dir, overwrite=overwrite) as tmp:
        m = _build_first(corpus, tmp, first, first_spec, how)
        m["subindexes"][first]["build_seconds"] = round(time.perf_counter() - t0, 3)
        if rest:
            _build_rest(tmp, m, rest, how, _Stages(executor=o("executor"), precomputed=o("precomputed"),
                                                   shared=o("shared")))
        gens.pause("index:built")
        folder.write_built(tmp, m)
        for name, spec in rest.items():
            get_kind(spec.kind).after_add(Index.open(tmp), name, spec, quiet=quiet)
    return Index.open(index_dir)


def _reading(corpus, chunk, include, exclude) -> dict:
    """How a corpus is read (``read_corpus``'s ``chunk``, ``include``, ``exclude``), checked, as the
    manifest records it: ``form`` (documents, file, iterable), ``chunking`` (False or the
    :class:`retrieval.chunking.Chunking` record), the globs."""
    from retrieval import chunking

    path = isinstance(corpus, (str, Path))
    docs = path and is_documents(corpus)
    if (include or exclude) and not (docs and Path(corpus).is_dir()):
        raise ParameterError("{include} and {exclude} choose the files of a folder of documents; {_w} is not one",
                             _w=str(corpus) if path else "a Python iterable")
    plan = chunking.resolve(chunk, docs)
    out = {"form": "documents" if docs else "file" if path else "iterable",
           "chunking": plan.describe() if plan is not None else False}
    if docs:
        out.update(include=list(include or []) if not isinstance(include, str) else [include],
                   exclude=list(exclude or []) if not isinstance(exclude, str) else [exclude])
    return out


def _read_options(reading: dict) -> dict:
    """``read_corpus``'s keywords from a :func:`_reading` record."""
    return {"chunk": reading.get("chunking") or False, "include": reading.get("include") or None,
            "exclude": reading.get("exclude") or None}


def _chunked(docs: Iterable[Document], reading: dict) -> Iterable[Document]:
    """A Python iterable's documents, chunked as ``reading`` says."""
    from retrieval.chunking import Chunker, Chunking, chunk_document

    if not reading.get("chunking"):
        yield from docs
        return
    chunker = Chunker(Chunking(**reading["chunking"]))
    for d in docs:
        for pid, title, text, meta in chunk_document(chunker, d.docid, d.title, d.text, d.metadata):
            yield Document(pid, text, title, meta)


@dataclass(frozen=True)
class _Stages:
    """What the kinds' model stages of a build or change get (:class:`BuildContext`'s fields of the
    same names): ``executor`` (an :class:`Executor` spec, or an opened runner), ``precomputed``,
    ``shared``."""
    executor: Any = None
    precomputed: Optional[dict] = None
    shared: Optional[dict] = None


def _stages(fn: str, options: Mapping[str, Any]) -> _Stages:
    """``options`` (``executor``, ``precomputed``, ``shared``) as :class:`_Stages`; another keyword is a
    TypeError naming it, as Python's own for ``fn``."""
    bad = sorted(set(options) - {"executor", "precomputed", "shared"})
    if bad:
        raise TypeError(f"{fn}() got an unexpected keyword argument {bad[0]!r}")
    return _Stages(**options)


@dataclass(frozen=True)
class _First:
    """How :func:`build_index` reads and indexes the corpus (its keywords of the same names; ``gen``:
    the folder's first generation, ``cache``: the encoding cache's base, ``reading``: :func:`_reading`)."""
    empty: str
    keep: Any
    pruning: Optional[dict]
    threads: int
    quiet: bool
    gen: int
    cache: Path
    source: str
    reading: dict


def _build_rest(tmp: Path, m: dict, rest: Mapping[str, Any], how: _First, stages: _Stages) -> None:
    """The sub-indexes ``rest`` (those built from the document store), each in its folder of ``tmp``,
    listed in the manifest ``m``."""
    with open_executor(stages.executor) as ex:
        ctx = BuildContext(tmp / folder.DOCSTORE, m["corpus"]["fingerprint"], how.cache,
                           quiet=how.quiet, threads=how.threads, precomputed=stages.precomputed, generation=how.gen,
                           executor=ex, shared=stages.shared)
        for name, spec in rest.items():
            k = get_kind(spec.kind)
            (tmp / name).mkdir()  # a kind writes into the folder it is given, as in a change
            built = k.build(tmp / name, name, replace(ctx, subindex=name), spec)
            for n, e in k.entries(name, built).items():
                m["subindexes"][n] = dict(e, generation=how.gen)


def _build_first(corpus, tmp: Path, name: str, spec, how: _First) -> dict:
    """The document store and the sub-index that indexes the corpus as it is read, in ``tmp``;
    returns the new folder's manifest listing both."""
    empty, keep, pruning, threads, quiet, gen = how.empty, how.keep, how.pruning, how.threads, how.quiet, how.gen
    cache, source, reading = how.cache, how.source, how.reading
    total = count_lines(corpus) if isinstance(corpus, (str, Path)) else None
    skipped: List[str] = []
    opts = _read_options(reading)
    docs = (read_corpus(corpus, empty=empty, skipped=skipped, **opts) if isinstance(corpus, (str, Path))
            else _checked(_chunked(_checked(corpus), reading)) if reading.get("chunking") and reading["form"] == "iterable"
            else _checked(corpus))
    store = DocStoreWriter(tmp / folder.DOCSTORE, generation=gen)
    h = hashlib.sha256()
    kept = keep if keep is None or callable(keep) else (lambda d, ids=keep: d.docid in ids)
    dropped = [0]

    # A corpus file is read twice: the first pass validates, fingerprints and
    # writes Anserini's input; the document store is filled by the second
    # pass while the JVM indexes, so the two overlap. A Python iterable can
    # be read once only, so it fills the store in the first pass; so is a folder of documents
    # (parsing PDFs twice would cost twice, and warn twice).
    from_file = reading["form"] == "file"

    def stream():
        for doc in progress(docs, total=total, desc="reading corpus", unit="doc", quiet=quiet):
            _fingerprint_update(h, doc)
            if kept is not None and not kept(doc):
                dropped[0] += 1
                continue
            if not from_file:
                store.add(doc.docid, doc.title, doc.text, doc.metadata or None)
            yield doc.docid, doc.contents

    def fill_store():
        for doc in read_corpus(corpus, empty=empty, check_duplicates=False, **opts):
            if kept is None or kept(doc):
                store.add(doc.docid, doc.title, doc.text, doc.metadata or None)

    ctx = BuildContext(tmp / folder.DOCSTORE, "", cache, quiet=quiet, threads=threads,
                       stream=stream(), meanwhile=fill_store if from_file else None, generation=gen)
    try:
        entry = get_kind(spec.kind).build(tmp / name, name, ctx, spec)
    finally:
        n_docs = store.close()
    if n_docs == 0:
        raise InputError("corpus has no documents", source)
    if n_docs != int(entry["doc_count"]):
        raise InputError(f"the corpus changed while it was being indexed ({entry['doc_count']} documents "
                         f"in the first pass, {n_docs} in the second)", source)
    m = mf.new_manifest({"threads": threads, "empty": empty}, generation=gen)
    m["corpus"] = {"source": source, "doc_count": n_docs, "fingerprint": "sha256:" + h.hexdigest(),
                   "skipped_empty": len(skipped), "reader": reading}
    m["docstore"] = {"path": folder.DOCSTORE, "doc_count": n_docs, "schema": 2}
    if keep is not None or pruning is not None:
        m["pruning"] = {**(pruning or {}), "dropped": dropped[0], "kept": n_docs}
    m["subindexes"][name] = dict(entry, generation=gen)
    return m


def _cache_base(index_dir: Path) -> Path:
    # Keyed by the final folder name, so a rerun after a crash (another pid) resumes the encoding.
    return index_dir.parent / f".{index_dir.name.split('.tmp-')[0]}.encode"


def index_corpus(corpus: Union[str, Path], index_dir: Union[str, Path], *,
                 subindexes: Optional[Mapping[str, Any]] = None, threads: int = 2, overwrite: bool = False,
                 empty: str = "error", quiet: bool = False, **options: Unpack[CorpusOptions]) -> Index:
    """What `retr index` does, as one call.

    - ``chunk``, ``include``, ``exclude``: how the corpus is read, as :func:`build_index` takes
      them (a folder of documents is chunked by default; JSONL/TSV passages stay as they are).

    - A new folder (or ``overwrite``) gets the document store and the sub-indexes
      ``subindexes`` (name -> spec, as :func:`build_index`), optionally pruned to the top
      ``1 - prune`` share by the ``quality`` estimator. All of it is built in a staging
      folder that replaces ``index_dir`` only when everything succeeded.
    - An existing folder built from the same corpus (same fingerprint) gains the
      requested sub-indexes (but the one that indexes the corpus as it is read: the
      folder has its own); ``overwrite`` then rebuilds those only.
    - ``executor`` (:class:`retrieval.executors.Executor`: ``local`` or ``ray``) runs the
      model stages (quality scores, the kinds' models); one Ray session serves them all.

    The keywords after ``quiet`` are :class:`CorpusOptions` (another keyword is a TypeError naming it).
    """
    check_keywords("index_corpus", options, CorpusOptions)
    prune, quality, o = options.get("prune"), options.get("quality"), options.get
    index_dir = Path(index_dir)
    executor = _executor_spec(o("executor"))
    _, _, rest = _plan(subindexes)
    if quality is not None and prune is None:
        raise ParameterError("{quality} only applies with a pruning share ({prune})")
    if prune is not None:
        from retrieval.quality.prune import check_share
        check_share(prune)
    modelled = [n for n, s in rest.items() if get_kind(s.kind).uses_model]
    if isinstance(executor, Executor) and executor.kind == "ray" and not modelled and prune is None:
        raise ParameterError("{executor=ray} runs the model stages (a sub-index with a model, {prune}); "
                             "this build has none")
    existing = folder.manifest_path(index_dir).exists()
    adding = existing and prune is None and bool(rest)
    if existing and not adding and not overwrite:
        hint = " pruned" if prune is not None else ", or ask for a new sub-index ({subindexes}) to add it"
        raise ParameterError("{_path}: index folder already exists; pass {overwrite} to rebuild it" + hint,
                             _path=str(index_dir))
    reading = _reading(corpus, o("chunk"), o("include"), o("exclude"))
    if adding:
        return _add_to_built(corpus, index_dir, rest, reading, overwrite=overwrite, quiet=quiet, executor=executor)
    kw = dict(subindexes=subindexes, threads=threads, overwrite=True, empty=empty, quiet=quiet,
              generation=folder.next_build_generation(index_dir), _read_as=reading)
    with folder.atomic_folder(index_dir, overwrite=overwrite) as stage, open_executor(executor) as ex:
        if prune is not None:
            if reading["form"] == "documents" or reading["chunking"]:
                # pruning reads the corpus once to score it and again to build: read the files
                # (and chunk them) once, so both passes see the same passages
                kw["source"] = str(corpus)
                corpus = list(read_corpus(corpus, empty=empty, **_read_options(reading)))
            build_pruned_index(corpus, stage, prune, quality, executor=ex, **kw)
        else:
            build_index(corpus, stage, executor=ex, **kw)
    return Index.open(index_dir)


def _add_to_built(corpus, index_dir: Path, rest: Mapping[str, Any], reading: dict, *, overwrite: bool, quiet: bool,
                  executor) -> Index:
    """:func:`index_corpus` on a folder built from ``corpus``: the sub-indexes ``rest`` added to it."""
    idx = Index.open(index_dir)
    fp, _ = corpus_fingerprint(corpus, empty=idx.manifest.get("config", {}).get("empty", "error"),
                               **_read_options(reading))
    if fp != idx.manifest["corpus"]["fingerprint"]:
        raise ParameterError("{_path}: was built from a different corpus; pass a new {index_dir} or rebuild "
                             "it with {overwrite}", _path=str(index_dir))
    with open_executor(executor) as ex:
        for name, spec in rest.items():
            idx = add_subindex(idx, spec, name, overwrite=overwrite, quiet=quiet, executor=ex)
    return idx


def _executor_spec(executor):
    """An :class:`Executor` (validated: fails before any work), an opened runner, or None."""
    if isinstance(executor, str):
        executor = Executor(executor)
    if isinstance(executor, Executor):
        executor.validate()
    return executor


def corpus_fingerprint(corpus: Union[str, Path], empty: str = "error", **read) -> Tuple[str, int]:
    """The fingerprint ``build_index`` records, without building anything (``read``: how
    :func:`retrieval.collections.read_corpus` reads it: ``chunk``, ``include``, ``exclude``)."""
    h = hashlib.sha256()
    n = 0
    for doc in read_corpus(corpus, empty=empty, **read):
        _fingerprint_update(h, doc)
        n += 1
    return "sha256:" + h.hexdigest(), n


def add_subindex(index: Index, spec, name: Optional[str] = None, overwrite: bool = False,
                 quiet: bool = False, executor=None) -> Index:
    """Build the sub-index ``spec`` describes (its ``kind`` names the kind; ``name`` defaults
    to the kind's name) from the folder's document store and list it, as a new generation:
    it is built beside the others and becomes visible only when the manifest that lists it
    is swapped in. Then the kind's ``after_add`` step runs (DeepCT tunes its fusion)."""
    k = kind_of_spec(spec)
    name = name or k.name
    _check_name(name)
    with open_executor(executor) as ex, _changing(index, quiet) as ch:
        if name in ch.old["subindexes"] and not overwrite:
            raise ParameterError("{_path}: index already has a {_name!r} sub-index (pass {overwrite} to rebuild it)",
                                 _path=str(ch.path), _name=name)
        rel = ch.fresh_folder(name)
        entry = k.build(ch.path / rel, rel, _context(ch, executor=ex), spec)
        for n, e in k.entries(name, entry).items():
            if n in ch.old["subindexes"]:
                ch.retire(ch.old["subindexes"][n])
            ch.new["subindexes"][n] = dict(e, generation=ch.gen)
        ch.commit()
    k.after_add(Index.open(ch.path), name, spec, quiet=quiet)
    return Index.open(ch.path)


def build_pruned_index(corpus, index_dir, prune: float, quality: Optional[str] = None, empty: str = "error",
                       quiet: bool = False, executor=None, **build_kwargs) -> Index:
    """:func:`build_index` on the top ``1 - prune`` share of ``corpus`` by passage quality
    (:func:`retrieval.quality.prune.prune_keep_set`)."""
    from retrieval.quality.prune import prune_keep_set

    vectors: dict = {}
    with open_executor(executor) as ex:
        keep, record = prune_keep_set(corpus, prune, quality, empty=empty, quiet=quiet, vectors=vectors, executor=ex)
        return build_index(corpus, index_dir, empty=empty, quiet=quiet, keep=keep, pruning=record,
                           precomputed=vectors or None, executor=ex, **build_kwargs)


def _checked(docs: Iterable[Document]) -> Iterable[Document]:
    seen = set()
    for i, d in enumerate(docs, 1):
        if not isinstance(d, Document):
            raise InputError(f"item {i} is a {type(d).__name__}, expected retrieval.Document")
        if not d.docid or any(c.isspace() for c in d.docid):
            raise InputError(f"item {i}: invalid document id {d.docid!r}")
        if d.docid in seen:
            raise InputError(f"item {i}: duplicate document id {d.docid!r}")
        if not d.contents.strip():
            raise InputError(f"item {i}: document {d.docid!r} has empty text")
        check_lengths(d.docid, d.title, d.text, f"item {i}")
        check_metadata(d.docid, d.metadata, f"item {i}")
        seen.add(d.docid)
        yield d



# ------------------------------------------------------------------------------ generations
def _notice(msg: str) -> None:
    """A progress line on stderr (like the bars, silenced by quiet)."""
    from tqdm.auto import tqdm

    tqdm.write(msg, file=sys.stderr)


def _path_of(index) -> Path:
    return Path(index.path if hasattr(index, "path") else index)


@contextlib.contextmanager
def _changing(index, quiet: bool = False, threads: int = 2) -> Iterator[folder.Change]:
    """The next generation's change of ``index``'s folder (:func:`indexes.folder.changing`), with
    the writer's settings for the kinds' contexts (``quiet``, ``threads``)."""
    path = _path_of(index)
    on_wait = None if quiet else (lambda pid: _notice(f"retr: waiting for another writer of {path}"
                                                       + (f" (pid {pid})" if pid and pid > 0 else "")))
    with folder.changing(path, on_wait) as ch:
        ch.quiet, ch.threads = quiet, threads
        yield ch


def _context(ch: folder.Change, **kw) -> BuildContext:
    """What a kind needs to change its sub-index in ``ch``'s generation."""
    return BuildContext(ch.store_path, ch.old.get("corpus", {}).get("fingerprint", ""), _cache_base(ch.path),
                        quiet=ch.quiet, threads=ch.threads, generation=ch.gen, **kw)


def _read_docs(corpus, empty: str, path: Optional[Path] = None) -> List[Document]:
    """The documents of a change. A path is read as the folder ``path`` was built: a folder of
    documents chunked as its manifest's ``corpus.reader`` records (its defaults for a folder
    built before that record existed)."""
    opts: dict = {}
    if isinstance(corpus, (str, Path)) and path is not None and is_documents(corpus):
        try:
            rec = mf.read_manifest(path).get("corpus", {}).get("reader") or {}
        except RetrError:  # the change itself reports an unreadable folder, under its lock
            rec = {}
        if "chunking" in rec:
            opts["chunk"] = rec["chunking"] or False
    docs = list(read_corpus(corpus, empty=empty, **opts) if isinstance(corpus, (str, Path)) else _checked(corpus))
    if not docs:
        raise InputError("no documents given", corpus if isinstance(corpus, (str, Path)) else None)
    return docs


def _source(corpus) -> str:
    return str(corpus) if isinstance(corpus, (str, Path)) else "<python iterable>"


def _apply(ch: folder.Change, removed: Sequence[str], added: Sequence[Document], op: str, source: str,
           t0: float, extra: Optional[dict] = None, stages: _Stages = _Stages()) -> None:
    """Change every sub-index (and the store) of ``ch``'s new generation by the same documents
    (their model stages on ``stages.executor``, an opened runner)."""
    m = ch.old
    kinds = {name: kind_of(e) for name, e in m["subindexes"].items()}
    n_old = int(m["corpus"]["doc_count"])
    n = n_old - len(removed) + len(added)
    if n <= 0:
        raise InputError(f"this would leave the index without documents ({len(removed)} deleted); "
                         f"build a new one instead", ch.path)
    ch.store.change(ch.gen, removed, added)
    gens.pause("write:after-docstore")
    ctx = _context(ch, executor=stages.executor, precomputed=stages.precomputed, shared=stages.shared)
    physical = [name for name, e in m["subindexes"].items() if not e.get("alias_of")]
    for name in progress(physical, desc=f"{op}: updating sub-indexes", unit="sub-index", quiet=ch.quiet):
        folder = ch.stage(name)
        e = ch.new["subindexes"][name]
        k = kinds[name]
        if removed:
            e = k.delete(folder, e, removed, ctx)
        if added:
            e = k.append(folder, e, added, replace(ctx, subindex=name))
        ch.new["subindexes"][name] = dict(e, doc_count=int(e["doc_count"]) - len(removed) + len(added),
                                          deleted_pending=int(e.get("deleted_pending", 0)) + len(removed),
                                          added_pending=int(e.get("added_pending", 0)) + len(added),
                                          updated_at=mf.now())
    _mirror_aliases(ch, ("doc_count", "deleted_pending", "added_pending", "updated_at"))
    gens.pause("write:after-subindexes")
    h = hashlib.sha256(m["corpus"]["fingerprint"].encode())
    for d in removed:
        h.update(f"-{d}\x00".encode())
    for d in added:
        h.update(f"{d.docid}\x00{d.contents}\x01".encode())
    corpus = dict(m["corpus"], doc_count=n, fingerprint="sha256:" + h.hexdigest())
    rec = {"generation": ch.gen, "op": op, "added": len(added), "removed": len(removed), "source": source,
           "at": mf.now(), "seconds": round(time.perf_counter() - t0, 2), **(extra or {})}
    corpus["changes"] = (corpus.get("changes", []) + [rec])[-HISTORY:]
    corpus["added_total"] = int(corpus.get("added_total", 0)) + len(added)
    corpus["removed_total"] = int(corpus.get("removed_total", 0)) + len(removed)
    if op == "add":  # the log `retr add` always kept
        corpus["additions"] = (corpus.get("additions", []) + [
            {"source": source, "documents": len(added), "at": rec["at"], "seconds": rec["seconds"]}])[-HISTORY:]
    ch.new["corpus"] = corpus
    ch.new["docstore"] = dict(ch.new.get("docstore") or {}, path=ch.store_rel, doc_count=n, schema=2)
    if ch.new.get("pruning"):
        ch.new["pruning"] = dict(ch.new["pruning"], kept=n)
    ch.new.pop("pipelines", None)  # tuned on the old collection: retune
    ch.commit()


def _mirror_aliases(ch: folder.Change, fields: Sequence[str]) -> None:
    """An alias entry (DeepCT's ``-query`` view of its folder) takes its target's new state: the
    change's ``fields`` and the fields its kind names (``SubIndexKind.alias_fields``)."""
    subs = ch.new["subindexes"]
    for name, e in subs.items():
        t = subs.get(e.get("alias_of"))
        if t is not None:
            keys = (*kind_of(t).alias_fields, *fields)
            subs[name] = dict(e, **{k: t[k] for k in keys if k in t})


def _committed(ch: folder.Change, report: Optional[dict]) -> None:
    """What a caller's ``report`` learns of a commit: the generation it made and its document count
    (readers of that generation see exactly that many)."""
    if report is not None:
        report.update(generation=ch.gen, documents=int(ch.new["corpus"]["doc_count"]))


def _check_kinds(m: dict, path: Path, need: str) -> None:
    base = {"append": SubIndexKind.append, "delete": SubIndexKind.delete}[need]
    fixed = sorted({kind_of(e).name for e in m["subindexes"].values() if getattr(type(kind_of(e)), need) is base})
    if fixed:  # fail before any work
        verb = "take new documents" if need == "append" else "delete documents"
        raise InputError(f"sub-index kind(s) {', '.join(fixed)} cannot {verb}; rebuild the index from the full "
                         f"corpus instead", path)


def _pruned(pruning: Optional[dict], docs: List[Document], quiet: bool, path: Path, executor=None) -> List[Document]:
    if not pruning:
        return docs
    from retrieval.quality.prune import QualityError, prune_additions

    try:
        return prune_additions(pruning, docs, quiet=quiet, executor=executor)
    except QualityError as e:
        raise InputError(str(e), path) from None


def _pruning_record(ch: folder.Change, read: int, kept: int) -> None:
    pruning = ch.old.get("pruning")
    if pruning:
        ch.new["pruning"] = dict(pruning, considered=int(pruning.get("considered", 0)) + read,
                                 dropped=int(pruning.get("dropped", 0)) + read - kept)


def add_documents(index, corpus: Union[str, Path, Iterable[Document]], threads: int = 2, empty: str = "error",
                  quiet: bool = False, report: Optional[dict] = None, **stages: Any) -> Index:
    """Add the documents of ``corpus`` to every sub-index of ``index`` (an Index or its folder)
    as one new generation; returns the reopened Index. Ids already in the index are an error
    (use :func:`update_documents` to replace them). In a folder pruned by passage quality,
    new documents pass the same estimator and threshold first, and only those it keeps are
    added. ``report`` (a dict) receives the counts: ``read``, ``added``, ``pruned``.
    ``executor`` runs the model stages (:class:`retrieval.executors.Executor`), as in
    :func:`index_corpus`. ``precomputed``: vectors already made for these documents
    (``BuildContext.precomputed``); ``shared``: per sub-index name, what its kind made of them once
    for all shards of a sharded index (``BuildContext.shared``). These three are the only keywords
    ``**stages`` takes (another is a TypeError naming it)."""
    return _write(index, corpus, "add", threads, empty, quiet, report, _stages("add_documents", stages))


def update_documents(index, corpus: Union[str, Path, Iterable[Document]], threads: int = 2, empty: str = "error",
                     quiet: bool = False, report: Optional[dict] = None, **stages: Any) -> Index:
    """Replace the documents of ``index`` that have the ids of ``corpus``'s documents and add
    the others, in every sub-index, as one new generation; returns the reopened Index. Only
    the given text is encoded. In a pruned folder a new version below the threshold removes
    the old one. ``report``: ``read``, ``added`` (new ids), ``replaced``, ``pruned``, ``removed``.
    ``**stages``: ``executor``, ``precomputed``, ``shared``, as in :func:`add_documents`."""
    return _write(index, corpus, "update", threads, empty, quiet, report, _stages("update_documents", stages))


def _write(index, corpus, op: str, threads: int, empty: str, quiet: bool, report: Optional[dict],
           stages: _Stages) -> Index:
    path = _path_of(index)
    executor = _executor_spec(stages.executor)  # a bad option fails before the corpus is read
    docs = _read_docs(corpus, empty, path)  # read and checked before the lock: a bad file changes nothing
    t0 = time.perf_counter()
    # The executor (a Ray session) starts before the writer lock is taken, so other writers do
    # not wait on the cluster's start-up.
    with open_executor(executor) as ex, _changing(path, quiet, threads) as ch:
        m = ch.old
        _check_kinds(m, path, "append")
        have = ch.store.visible([d.docid for d in docs], ch.base)
        if op == "add" and have:
            first = next(d.docid for d in docs if d.docid in have)
            raise DuplicateIds(len(have), first, path)
        if have:
            _check_kinds(m, path, "delete")
        kept = _pruned(m.get("pruning"), docs, quiet, path, ex)
        kept_ids = {d.docid for d in kept}
        removed = [d.docid for d in docs if d.docid in have]
        rep = {"read": len(docs), "added": sum(1 for d in kept if d.docid not in have), "pruned": len(docs) - len(kept)}
        if op == "update":
            rep.update(replaced=sum(1 for d in kept if d.docid in have),
                       removed=sum(1 for d in removed if d not in kept_ids))
        if report is not None:
            report.update(rep)
        if not kept and not removed:
            return Index.open(path)  # every new document fell below the pruning threshold: nothing changes
        _pruning_record(ch, len(docs), len(kept))
        _apply(ch, removed, kept, op, _source(corpus), t0, stages=replace(stages, executor=ex))
        _committed(ch, report)
    return Index.open(path)


def read_ids(path: Union[str, Path]) -> List[str]:
    """Document ids from a file: one per line (blank lines and ``#`` comments skipped; a TSV
    line counts by its first column)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path)
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason})", path) from None
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line.split("\t")[0].strip())
    if not out:
        raise InputError("no document ids in the file", path)
    return out


def delete_documents(index, docids: Iterable[str], quiet: bool = False, missing_ok: bool = False,
                     report: Optional[dict] = None) -> Index:
    """Remove ``docids`` from every sub-index of ``index`` as one new generation; returns the
    reopened Index. Ids the index does not hold are an error unless ``missing_ok``. Lucene
    and faiss keep the deleted rows (masked) until :func:`compact`; see the README on what
    that does to BM25's collection statistics. ``report``: ``asked``, ``deleted``, ``missing``."""
    path = _path_of(index)
    ids = list(dict.fromkeys(str(d) for d in docids))
    if not ids:
        raise InputError("no document ids to delete")
    t0 = time.perf_counter()
    with _changing(path, quiet) as ch:
        _check_kinds(ch.old, path, "delete")
        have = ch.store.visible(ids, ch.base)
        missing = [d for d in ids if d not in have]
        if missing and not missing_ok:
            raise InputError(f"{len(missing)} of {len(ids)} document id(s) are not in the index (first: "
                             f"{missing[0]!r}); nothing was deleted", path)
        removed = [d for d in ids if d in have]
        if report is not None:
            report.update(asked=len(ids), deleted=len(removed), missing=len(missing))
        if not removed:
            return Index.open(path)
        _apply(ch, removed, [], "delete", f"{len(removed)} id(s)", t0)
        _committed(ch, report)
    return Index.open(path)


def compact(index, quiet: bool = False, report: Optional[dict] = None) -> Index:
    """Drop what additions and deletions left behind, as one new generation: Lucene segments
    are merged with their deleted documents expunged (their statistics then count live
    documents only, as a fresh build's do), faiss is rebuilt without masked rows and delta
    files, DeepCT keeps one weights file. Also removes old generations no reader holds and
    leftovers of dead processes. Sub-indexes with nothing to drop are left as they are.
    Returns the reopened Index; ``report``: ``compacted`` (names), ``seconds``."""
    path = _path_of(index)
    t0 = time.perf_counter()
    with _changing(path, quiet) as ch:
        todo = [n for n, e in ch.old["subindexes"].items()
                if not e.get("alias_of") and (int(e.get("deleted_pending", 0)) or int(e.get("added_pending", 0)))]
        if report is not None:
            report.update(compacted=todo)
        if not todo and not ch.new.get("migrated"):
            ch.collect()
            if report is not None:
                report.update(seconds=round(time.perf_counter() - t0, 2))
            return Index.open(path)
        ctx = _context(ch)
        for name in progress(todo, desc="compacting", unit="sub-index", quiet=quiet):
            folder = ch.stage(name)
            e = kind_of(ch.new["subindexes"][name]).compact(folder, ch.new["subindexes"][name], ctx)
            ch.new["subindexes"][name] = dict(e, deleted_pending=0, added_pending=0, compacted_at=mf.now())
        _mirror_aliases(ch, ("deleted_pending", "added_pending", "compacted_at"))
        gens.pause("compact:before-switch")
        corpus = dict(ch.new["corpus"])
        corpus["changes"] = (corpus.get("changes", []) + [
            {"generation": ch.gen, "op": "compact", "sub_indexes": todo, "at": mf.now(),
             "seconds": round(time.perf_counter() - t0, 2)}])[-HISTORY:]
        ch.new["corpus"] = corpus
        ch.commit()
        _committed(ch, report)
    if report is not None:
        report.update(seconds=round(time.perf_counter() - t0, 2))
    return Index.open(path)

