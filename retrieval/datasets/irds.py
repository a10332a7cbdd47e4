"""Collections by name through ir_datasets: ``irds:beir/scifact/test`` names a dataset of the installed
``ir_datasets`` package, whose documents, queries and qrels this module reads (:mod:`retrieval.datasets`
hands them on: documents as raw records to :mod:`retrieval.collections`, qrels to the evaluator).

Only ir_datasets' local cache is read (``IR_DATASETS_HOME``, default ``~/.ir_datasets``): nothing is
downloaded. ir_datasets 0.6.3 has no offline switch, and a file missing from its cache starts a download
(three tries, 15 s of silence each before a retry where the network drops packets). So while retr reads,
``ir_datasets.util.Download.path``/``.stream`` refuse any file that is not on disk yet (``_guard``): every
download of ir_datasets goes through that class, and the refusal becomes one error line that names the
dataset, the missing file and how to fetch it. The guard is per thread and holds only while retr's own
calls run (``guarded`` lifts it between documents), so other users of ir_datasets in the process can
still download. ir_datasets is imported on first use only: ``retr --help`` does not pay for it.
"""
from __future__ import annotations

import contextlib
import difflib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator

from indexes.errors import InputError

PREFIX = "irds:"
_local = threading.local()
_install_lock = threading.Lock()


def name_of(source) -> str | None:
    """The dataset name of an ``irds:NAME`` source (a str or a path object), else None."""
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if isinstance(text, str) and text.startswith(PREFIX):
            return text[len(PREFIX):].strip("/")
    return None


def _module():
    try:
        import ir_datasets
    except ImportError:  # pragma: no cover - the 'datasets' extra is not installed
        raise InputError("irds: sources need the ir_datasets package (pip install 'retr[datasets]')") from None
    _guard(ir_datasets)
    ir_datasets.log.easy().logger()  # made now: its first use sets INFO, which would undo offline()'s level
    return ir_datasets


def home() -> str:
    """ir_datasets' cache folder, as ir_datasets itself resolves it."""
    return os.environ.get("IR_DATASETS_HOME") or os.path.join(os.path.expanduser("~"), ".ir_datasets")


class _NotCached(Exception):
    """Raised inside ir_datasets where it would download; turned into an InputError by :func:`offline`."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def _on_disk(download) -> bool:
    cache = getattr(download, "_cache_path", None)
    if cache and os.path.exists(cache):
        return True
    return any(type(m).__name__ == "LocalDownload" and os.path.exists(m._path) for m in download.mirrors)


def _wanted(download) -> str:
    cache = getattr(download, "_cache_path", None)
    if cache:
        return str(cache)
    urls = [getattr(m, "url", None) for m in download.mirrors]
    return next((u for u in urls if u), "a file")


def _guard(ir_datasets) -> None:
    """Wrap ``Download.path`` and ``Download.stream`` once: with the calling thread inside :func:`offline`,
    a file that is not on disk raises _NotCached instead of being downloaded; otherwise they do what they did."""
    download = ir_datasets.util.download.Download
    with _install_lock:
        if getattr(download, "_retr_offline_guard", False):
            return
        path, stream = download.path, download.stream

        def guarded_path(self, force=True):
            if force and getattr(_local, "depth", 0) and self._path is None and not _on_disk(self):
                raise _NotCached(_wanted(self))
            return path(self, force)

        def guarded_stream(self):
            if getattr(_local, "depth", 0) and self._stream and not _on_disk(self):
                raise _NotCached(_wanted(self))
            return stream(self)

        download.path, download.stream = guarded_path, guarded_stream
        download._retr_offline_guard = True


def _fetch_hint(name: str, part: str) -> str:
    return (f"fetch it where there is internet with `ir_datasets export {name} {part} > /dev/null` and copy that "
            f"cache folder here, or set IR_DATASETS_HOME to a cache that holds it")


@contextlib.contextmanager
def offline(name: str, part: str):
    """Run ir_datasets calls for ``part`` (docs, queries, qrels) of ``name`` without downloading; a missing
    file, or a cache ir_datasets cannot read, becomes one InputError line."""
    _local.depth = getattr(_local, "depth", 0) + 1
    # ir_datasets logs its steps at INFO ("[error] opening zip file" before retr's own error line reads as a
    # second error); retr reports progress and errors itself, so only its warnings pass while retr reads
    log = logging.getLogger("ir_datasets")
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        yield
    except _NotCached as e:
        raise InputError(f"{PREFIX}{name}: the {part} are not in ir_datasets' cache {home()} ({e.what} is missing; "
                        f"retr downloads nothing); {_fetch_hint(name, part)}") from None
    except InputError:
        raise
    except Exception as e:  # a damaged cache file: zip, lz4, JSON, a short read
        detail = " ".join(str(e).split())[:300] or type(e).__name__
        raise InputError(f"{PREFIX}{name}: ir_datasets could not read the {part} from its cache {home()} "
                        f"({type(e).__name__}: {detail})") from None
    finally:
        _local.depth -= 1
        log.setLevel(level)


def guarded(name: str, part: str, make: Callable[[], Iterable]) -> Iterator:
    """Iterate ``make()`` with the guard held while ir_datasets works (each step), not while the caller
    holds a yielded item, so a suspended reader never blocks another's downloads."""
    with offline(name, part):
        it = iter(make())
    while True:
        with offline(name, part):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def dataset(source, part: str):
    """The ir_datasets dataset an ``irds:NAME`` source names, checked to provide ``part`` (docs, queries or
    qrels). Unknown names get the closest registered ones as a hint."""
    name = name_of(source)
    if not name:
        raise InputError(f"{source}: give a dataset after '{PREFIX}', e.g. {PREFIX}beir/scifact/test")
    irds = _module()
    with offline(name, part):
        try:
            ds = irds.load(name)
        except KeyError:
            close = difflib.get_close_matches(name, list(irds.registry), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else " (`ir_datasets list` shows them)"
            raise InputError(f"{PREFIX}{name}: ir_datasets {irds.__version__} has no dataset of that name{hint}") from None
        if not getattr(ds, f"has_{part}")():
            raise InputError(f"{PREFIX}{name}: this dataset has no {part}"
                            + (" (name a split, e.g. .../test)" if part != "docs" else ""))
    return ds


def read_qrels(source) -> dict[str, dict[str, int]]:
    """``{qid: {docid: grade}}`` of an ``irds:`` dataset; a document judged twice for a query is an error,
    as in a qrels file."""
    name = name_of(source)
    ds = dataset(source, "qrels")
    out: dict[str, dict[str, int]] = {}
    for n, q in enumerate(guarded(name, "qrels", ds.qrels_iter), 1):
        qid, docid, rel = str(q.query_id), str(q.doc_id), q.relevance
        judged = out.setdefault(qid, {})
        if docid in judged:
            raise InputError(f"{PREFIX}{name}: judgment {n}: document {docid!r} judged twice for query {qid!r}")
        if not isinstance(rel, int) or not -2**31 <= rel < 2**31:
            raise InputError(f"{PREFIX}{name}: judgment {n}: relevance {rel!r} is not an integer in range")
        judged[docid] = rel
    if not out:
        raise InputError(f"{PREFIX}{name}: the dataset's qrels are empty")
    return out


def read_queries(source) -> list[tuple[str, str]]:
    """``[(qid, text), ...]`` of an ``irds:`` dataset, in its order: the ``text`` field, or the query's
    ``default_text()`` where its type has no such field (TREC topics: the title)."""
    name = name_of(source)
    ds = dataset(source, "queries")
    out = []
    for q in guarded(name, "queries", ds.queries_iter):
        text = getattr(q, "text", None)
        out.append((str(q.query_id), text if isinstance(text, str) else q.default_text()))
    return out
