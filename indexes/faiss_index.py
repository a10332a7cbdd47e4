"""faiss vector index with a docid map: build, add, save, open (memory-mapped), search.

Model-free: it stores and searches vectors; the encoders live in ``retrieval.dense``.
Scores are inner products (cosine when the vectors are L2-normalised, as DenseEncoder makes them).

Usage::

    idx = FaissIndex.build(vectors, docids, factory="HNSW32")   # or an iterable of (vectors, docids)
    idx.save("IDX/dense")
    idx = FaissIndex.open("IDX/dense")                          # memory-mapped where faiss allows
    scores, ids = idx.search(query_vectors, k=10)                # ids: list of docid lists
    idx.add(more_vectors, more_docids); idx.save("IDX/dense")

Folder layout: ``index.faiss`` (faiss.write_index), ``docids.txt`` (one docid per line, in faiss id
order) and ``faiss.json`` (:meth:`FaissIndex.describe`). Each file is written to a temporary name
and moved into place with ``os.replace`` (:mod:`indexes.atomic`, which gives it the umask's mode).
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Iterable, Optional, Sequence

import faiss
import numpy as np

from indexes.atomic import atomic_path, write_text
from indexes.errors import IndexFormatError, InputError

INDEX_FILE, DOCIDS_FILE, META_FILE = "index.faiss", "docids.txt", "faiss.json"


class FaissFactoryError(InputError):
    """faiss rejected the factory string."""


class FaissTrainError(InputError):
    """The index type needs training and the vectors could not train it (usually too few)."""


class DimensionMismatchError(InputError):
    """Vectors whose dimension differs from the index's."""


def _first_line(e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    # faiss messages start with "Error in <C++ signature> at file:line: "; keep the human part.
    return msg.rsplit(": ", 1)[-1] if msg.startswith("Error in") else msg


def gpu_available() -> bool:
    """True when this faiss build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


class FaissIndex:
    """A faiss index (inner product) plus the docid of every vector.

    Search parameters (``ef_search`` for HNSW, ``nprobe`` for IVF) are set with
    :meth:`set_search_params` and saved with the index.
    """

    def __init__(self, index: "faiss.Index", docids: Sequence[str], factory: str, params: Optional[dict] = None,
                 use_gpu: bool | str = "auto", mmapped_from: Optional[Path] = None):
        self.index = index
        self.factory = factory
        self._docids = list(docids)
        self._docid_set: Optional[set] = None
        self._mmapped_from = mmapped_from
        self.params: dict = {}
        self._want_gpu = use_gpu
        self._gpu_index = None
        self._gpu_res = None
        if len(self._docids) != self.index.ntotal:
            raise IndexFormatError(f"faiss index holds {self.index.ntotal} vectors but {len(self._docids)} docids")
        self.set_search_params(**(params or {}))

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def create(cls, dim: int, factory: str = "Flat", use_gpu: bool | str = "auto") -> "FaissIndex":
        """An empty index of dimension ``dim`` from a faiss factory string (``Flat``, ``HNSW32``, ``IVF1024,PQ32``...)."""
        if int(dim) < 1:
            raise InputError(f"vector dimension must be positive, got {dim}")
        if not isinstance(factory, str) or not factory.strip():
            raise FaissFactoryError("empty faiss factory string")
        try:
            index = faiss.index_factory(int(dim), factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as e:
            raise FaissFactoryError(f"faiss rejected the factory string {factory!r} for dimension {dim}: {_first_line(e)}")
        return cls(index, [], factory, use_gpu=use_gpu)

    @classmethod
    def build(cls, vectors, docids: Optional[Sequence[str]] = None, factory: str = "Flat",
              dim: Optional[int] = None, use_gpu: bool | str = "auto", quiet: bool = False,
              expected: Optional[int] = None, **training: int) -> "FaissIndex":
        """Build from an (N, d) array + ``docids``, or from an iterable of ``(vectors, docids)`` batches.

        If the index type needs training (``index.is_trained`` is False) the first ``train_size``
        vectors (``**training``: ``train_size``, default 100,000, and ``seed``, default 0; another
        keyword is a TypeError naming it) are buffered and a random sample of them (seeded) trains it
        before adding. ``expected``: the documents the index must then hold (e.g. the document store's
        count); another count raises IndexFormatError.
        """
        bad = sorted(set(training) - {"train_size", "seed"})
        if bad:
            raise TypeError(f"build() got an unexpected keyword argument {bad[0]!r}")
        train_size, seed = training.get("train_size", 100_000), training.get("seed", 0)
        if isinstance(vectors, np.ndarray):
            if docids is None:
                raise InputError("docids are required with a vector array")
            batches: Iterable = [(vectors, docids)]
        else:
            batches = vectors
        it = iter(batches)
        idx: Optional[FaissIndex] = None
        buf_v: list = []
        buf_d: list = []
        nbuf = 0
        for v, d in it:
            v = _as_matrix(v)
            if idx is None:
                idx = cls.create(dim or v.shape[1], factory, use_gpu)
            if idx.index.is_trained:
                idx.add(v, d)
                continue
            buf_v.append(v)
            buf_d.extend(d)
            nbuf += len(v)
            if nbuf >= train_size:
                idx._train_and_flush(buf_v, buf_d, train_size, seed)
                buf_v, buf_d = [], []
        if idx is None:
            if dim is None:
                raise InputError("no vectors to index (and no dimension given)")
            idx = cls.create(dim, factory, use_gpu)
        if buf_v:
            idx._train_and_flush(buf_v, buf_d, train_size, seed)
        if expected is not None and idx.ntotal != expected:
            raise IndexFormatError(f"faiss index holds {idx.ntotal} vectors but was to hold {expected} documents")
        return idx

    def _train_and_flush(self, buf_v: list, buf_d: list, train_size: int, seed: int) -> None:
        allv = np.concatenate(buf_v)
        sample = allv
        if len(allv) > train_size:
            sample = allv[np.sort(np.random.default_rng(seed).choice(len(allv), train_size, replace=False))]
        self.train(sample)
        self.add(allv, buf_d)

    def train(self, sample: np.ndarray) -> None:
        """Train the index (IVF centroids, PQ codebooks) on ``sample``; a no-op when already trained."""
        if self.index.is_trained:
            return
        sample = self._check_dim(_as_matrix(sample))
        try:
            self.index.train(sample)
        except RuntimeError as e:
            raise FaissTrainError(f"faiss could not train {self.factory!r} on {len(sample)} vectors "
                                  f"(too few for this index type?): {_first_line(e)}")

    # -- adding ----------------------------------------------------------------------------------
    def add(self, vectors: np.ndarray, docids: Sequence[str]) -> None:
        """Append vectors with their docids. Raises on a dimension mismatch, a count mismatch, a
        docid with a newline, or a docid already in the index."""
        v = self._check_dim(_as_matrix(vectors))
        docids = [str(d) for d in docids]
        if len(docids) != len(v):
            raise InputError(f"{len(v)} vectors but {len(docids)} docids")
        if not docids:
            return
        if any("\n" in d or "\r" in d for d in docids):
            raise InputError("docids must not contain line breaks")
        if self._docid_set is None:
            self._docid_set = set(self._docids)
        new = set(docids)
        if len(new) != len(docids) or not new.isdisjoint(self._docid_set):
            dup = next(d for d in docids if d in self._docid_set or docids.count(d) > 1)
            raise InputError(f"duplicate docid {dup!r}: already in the index or repeated in this batch")
        if not self.index.is_trained:
            raise FaissTrainError(f"index {self.factory!r} is not trained yet; call train() or use build()")
        self._make_writable()
        n0 = self.index.ntotal
        if hasattr(self.index, "id_map"):  # an "IDMap,..." factory string: ids are our positions
            self.index.add_with_ids(v, np.arange(n0, n0 + len(v), dtype=np.int64))
        else:
            self.index.add(v)
        if self.index.ntotal != n0 + len(v):  # the index must hold exactly the vectors it was given
            raise IndexFormatError(f"faiss {self.factory!r} index holds {self.index.ntotal} vectors after adding "
                                   f"{len(v)} to {n0}")
        self._docids.extend(docids)
        self._docid_set |= new
        self._gpu_index = None  # rebuilt from the CPU index at the next search

    def _make_writable(self) -> None:
        # A memory-mapped faiss index must not grow (faiss aborts the process): load it fully first.
        if self._mmapped_from is not None:
            params = dict(self.params)
            self.index = faiss.read_index(str(self._mmapped_from / INDEX_FILE))
            self._mmapped_from = None
            self.set_search_params(**params)

    # -- searching -------------------------------------------------------------------------------
    def set_search_params(self, ef_search: Optional[int] = None, nprobe: Optional[int] = None) -> None:
        """HNSW ``efSearch`` / IVF ``nprobe``; an option the index type lacks raises InputError."""
        for key, name, val in (("ef_search", "efSearch", ef_search), ("nprobe", "nprobe", nprobe)):
            if val is None:
                continue
            if int(val) < 1:
                raise InputError(f"{key} must be positive, got {val}")
            try:
                faiss.ParameterSpace().set_index_parameter(self.index, name, int(val))
            except RuntimeError:
                raise InputError(f"{key} does not apply to a {self.factory!r} index")
            self.params[key] = int(val)
            if self._gpu_index is not None:
                faiss.GpuParameterSpace().set_index_parameter(self._gpu_index, name, int(val))

    def _searcher(self):
        if self._want_gpu is False:
            return self.index
        if not gpu_available():
            if self._want_gpu is True:
                warnings.warn("faiss GPU requested but unavailable (no GPU build or no GPU); searching on CPU")
            self._want_gpu = False  # decided once per object: keeps the search path lean
            return self.index
        if self._gpu_index is None:
            try:
                self._gpu_res = self._gpu_res or faiss.StandardGpuResources()
                self._gpu_index = faiss.index_cpu_to_gpu(self._gpu_res, 0, self.index)
                for key, name in (("ef_search", "efSearch"), ("nprobe", "nprobe")):
                    if key in self.params:
                        faiss.GpuParameterSpace().set_index_parameter(self._gpu_index, name, self.params[key])
            except (RuntimeError, AttributeError) as e:  # e.g. HNSW has no GPU version
                print(f"retr: faiss GPU not used for {self.factory!r} ({_first_line(e)}); searching on CPU",
                      file=sys.stderr)
                self._want_gpu = False
                return self.index
        return self._gpu_index

    def search(self, queries: np.ndarray, k: int = 10, allowed=None) -> tuple[np.ndarray, list[list[str]]]:
        """Top-``k`` by inner product for each query row: ``(scores (n, k) float32, docid lists)``.

        Lists are shorter than ``k`` when the index holds fewer vectors (faiss's -1 slots are
        dropped; their scores are -inf). A single query runs faiss on one thread, which was
        several times faster than two threads here (benchmarks/results/dense_speed.md).

        ``allowed`` (a ``retrieval.filters.Allowed``) restricts the search to those documents
        with a faiss ID selector: for Flat indexes exactly the first ``k`` of them in the
        unfiltered ranking; HNSW and IVF search them as approximately as they search everything.
        """
        q = self._check_dim(_as_matrix(queries))
        if k < 1:
            raise InputError(f"k must be positive, got {k}")
        index = self._searcher() if allowed is None else self.index
        params = None if allowed is None else allowed.backend(("faiss", id(self)), self._selector_for(allowed))
        if allowed is not None and params is False:  # this index type takes no selector: rank all, then filter
            D, names = self.search(q, self.ntotal)
            out_d, out_n = np.full((len(q), min(k, self.ntotal)), -np.inf, dtype=np.float32), []
            for i, row in enumerate(names):
                keep = [j for j, d in enumerate(row) if d in allowed][:k]
                out_d[i, :len(keep)] = D[i, keep]
                out_n.append([row[j] for j in keep])
            return out_d, out_n
        kw = {} if params is None else {"params": params[0]}
        storage = self._exact_storage()
        kf = min(k + rescore_margin(k), self.ntotal) if storage is not None else k
        if len(q) == 1 and index is self.index:
            nt = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                D, I = index.search(q, max(kf, 1), **kw)
            finally:
                faiss.omp_set_num_threads(nt)
        else:
            D, I = index.search(q, max(kf, 1), **kw)
        if storage is not None:
            return self._rescored(storage, q, I, k)
        # Plain lists: for k=10 this is a few microseconds, cheaper than numpy object indexing.
        d, names, missing = self._docids, [], False
        for row in I.tolist():
            if row and row[-1] < 0:  # faiss pads absent results at the end with -1
                missing = True
                row = [i for i in row if i >= 0]
            names.append([d[i] for i in row])
        if missing:
            D = np.where(I < 0, -np.inf, D).astype(np.float32)
        return D, names

    def _exact_storage(self):
        """The faiss index whose rows are this index's vectors stored exactly (a Flat, or the flat
        storage under HNSW), or None for compressed and inverted-list types, whose candidates are
        not rescored."""
        # not cached: self.index is replaced when a memory-mapped index is made writable, and a
        # wrapper of the old one's storage would point at freed memory
        base = faiss.downcast_index(self.index.index if hasattr(self.index, "id_map") else self.index)
        if isinstance(base, faiss.IndexHNSW):
            base = faiss.downcast_index(base.storage)
        return base if type(base) in (faiss.IndexFlat, faiss.IndexFlatIP) else None

    def _rescored(self, storage, q: np.ndarray, I: np.ndarray, k: int):
        """faiss's candidates (``I``, a margin deeper than ``k``) scored again by :func:`exact_scores`
        and ordered by score, then docid, cut at ``k``. faiss's own inner products change in the last
        bit with how many rows its BLAS call holds, and it orders equal scores by row: neither is
        the same in an index split into shards, so both paths rank by this instead."""
        d = self._docids
        out_d = np.full((len(q), k), -np.inf, dtype=np.float32)
        names = []
        for i, row in enumerate(I):
            rows = row[row >= 0]
            if not len(rows):
                names.append([])
                continue
            vecs = rows_of(storage, rows)
            ranked = rank_exact(exact_scores(q[i], vecs), [d[r] for r in rows.tolist()])[:k]
            out_d[i, :len(ranked)] = [s for s, _ in ranked]
            names.append([n for _, n in ranked])
        return out_d, names

    def _selector_for(self, allowed):
        """A builder of the faiss search parameters that restrict a search to ``allowed`` (with
        this index's own efSearch / nprobe), or of False where the index type takes none."""
        def build():
            pos = getattr(self, "_pos", None)
            if pos is None or len(pos) != len(self._docids):
                pos = self._pos = {d: i for i, d in enumerate(self._docids)}
            mask = np.zeros(self.ntotal, dtype=bool)
            rows = [pos[d] for d in allowed.docids if d in pos]
            mask[np.asarray(rows, dtype=np.int64)] = True
            bits = np.packbits(mask, bitorder="little")
            sel = faiss.IDSelectorBitmap(self.ntotal, faiss.swig_ptr(bits))
            base = faiss.downcast_index(self.index.index if hasattr(self.index, "id_map") else self.index)
            if isinstance(base, faiss.IndexHNSW):
                p = faiss.SearchParametersHNSW(sel=sel, efSearch=int(base.hnsw.efSearch))
            elif isinstance(base, faiss.IndexIVF):
                p = faiss.SearchParametersIVF(sel=sel, nprobe=int(base.nprobe))
            elif isinstance(base, (faiss.IndexFlat, faiss.IndexScalarQuantizer, faiss.IndexPQ)):
                p = faiss.SearchParameters(sel=sel)
            else:
                return False
            return p, sel, bits  # the selector reads the bitmap: all three live together
        return build

    # -- persistence -----------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``index.faiss``, ``docids.txt`` and ``faiss.json`` into ``folder`` (atomically per file)."""
        folder = Path(folder)
        if self.index.ntotal != len(self._docids):
            raise IndexFormatError(f"faiss index holds {self.index.ntotal} vectors but {len(self._docids)} docids")
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / INDEX_FILE) as tmp:
            faiss.write_index(self.index, str(tmp))
        write_text(folder / DOCIDS_FILE, "".join(d + "\n" for d in self._docids))
        write_text(folder / META_FILE, json.dumps(self.describe(folder), indent=2))
        return folder

    @classmethod
    def open(cls, folder: str | os.PathLike, mmap: bool = True, use_gpu: bool | str = "auto") -> "FaissIndex":
        """Open a saved index; with ``mmap`` the vectors stay on disk (``IO_FLAG_MMAP_IFC``, then
        ``IO_FLAG_MMAP``) where this faiss build can map the index type, else it is read into memory."""
        folder = Path(folder)
        for f in (INDEX_FILE, DOCIDS_FILE, META_FILE):
            if not (folder / f).is_file():
                raise IndexFormatError(f"{folder}: faiss index folder is missing {f}")
        try:
            meta = json.loads((folder / META_FILE).read_text())
        except ValueError as e:
            raise IndexFormatError(f"{folder / META_FILE}: not valid JSON ({e})")
        index, mapped = None, None
        if mmap:
            for flag in ("IO_FLAG_MMAP_IFC", "IO_FLAG_MMAP"):
                if hasattr(faiss, flag):
                    try:
                        index = faiss.read_index(str(folder / INDEX_FILE), getattr(faiss, flag))
                        mapped = folder
                        break
                    except RuntimeError:
                        continue
        if index is None:
            try:
                index = faiss.read_index(str(folder / INDEX_FILE))
            except RuntimeError as e:
                raise IndexFormatError(f"{folder / INDEX_FILE}: faiss cannot read it ({_first_line(e)})")
        docids = (folder / DOCIDS_FILE).read_text(encoding="utf-8").split("\n")[:-1]
        return cls(index, docids, meta.get("factory", "?"), params=meta.get("params"), use_gpu=use_gpu,
                   mmapped_from=mapped)

    # -- info ------------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return int(self.index.d)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def __len__(self) -> int:
        return self.ntotal

    @property
    def docids(self) -> list[str]:
        return list(self._docids)

    @property
    def on_gpu(self) -> bool:
        return self._gpu_index is not None

    def describe(self, folder: Optional[Path] = None) -> dict:
        """Facts for a manifest: factory, dim, ntotal, metric, faiss version, search params, size."""
        d = {"backend": "faiss", "factory": self.factory, "dim": self.dim, "ntotal": self.ntotal,
             "metric": "inner_product", "index_class": type(faiss.downcast_index(self.index)).__name__,
             "is_trained": bool(self.index.is_trained), "params": dict(self.params),
             "faiss_version": faiss.__version__, "files": [INDEX_FILE, DOCIDS_FILE, META_FILE]}
        if folder is not None and (Path(folder) / INDEX_FILE).is_file():
            d["index_bytes"] = (Path(folder) / INDEX_FILE).stat().st_size
        return d

    def _check_dim(self, v: np.ndarray) -> np.ndarray:
        if v.shape[1] != self.dim:
            raise DimensionMismatchError(f"vectors have dimension {v.shape[1]} but the index has {self.dim}")
        return v


def rescore_margin(k: int) -> int:
    """How many candidates past ``k`` an exact-storage search takes from faiss before rescoring:
    enough that rows whose faiss scores differ from their exact ones in the last bit still reach
    the rescoring."""
    return max(16, int(k) // 8)


def rows_of(storage, rows: np.ndarray) -> np.ndarray:
    """The stored vectors at ``rows`` of a flat faiss index: a numpy view of its codes, indexed
    (reconstruct_batch copies row by row, ~60x slower for a thousand rows here)."""
    try:
        xb = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d)
        return xb.reshape(storage.ntotal, storage.d)[rows]
    except (AttributeError, TypeError, ValueError):
        return storage.reconstruct_batch(np.asarray(rows, dtype=np.int64))


def exact_scores(query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Inner products of one float32 ``query`` with float32 ``vectors`` rows, as float32: each
    product is exact in float64, and einsum (without ``optimize``, so no BLAS call whose blocking
    depends on the number of rows) sums every row the same way, so a row's score does not depend on
    which index or shard holds it, nor on how many candidates it came with."""
    return np.einsum("ij,j->i", np.asarray(vectors, dtype=np.float64),
                     np.asarray(query, dtype=np.float64), optimize=False).astype(np.float32)


def rank_exact(scores, docids) -> list:
    """``[(score, docid)]`` by score descending, then the docid's UTF-8 bytes (the sharded merge's
    order: retrieval.sharded.merge). Sorted by numpy, with Python only for runs of equal scores."""
    s = np.asarray(scores, dtype=np.float32)
    order = np.argsort(-s, kind="stable").tolist()
    out = list(zip(s[order].tolist(), [docids[i] for i in order]))
    if len(s) > 1 and np.any(np.diff(s[order]) == 0):
        out.sort(key=lambda x: (-x[0], x[1].encode("utf-8")))
    return out


def _as_matrix(v) -> np.ndarray:
    a = np.asarray(v)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise InputError(f"expected a 2-d array of vectors, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number):
        raise InputError(f"vectors must be numeric, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float32)
