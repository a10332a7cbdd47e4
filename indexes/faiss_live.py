"""A faiss sub-index that changes without rewriting its base file.

One generation's folder holds the base index as built (``index.faiss``,
``docids.txt``, ``faiss.json``; hard links shared with other generations) plus
files that never change once written:

- ``delta-g<N>.npy`` / ``delta-g<N>.ids``: the vectors (float32) and docids added in generation N;
- ``deleted-g<N>.rows``: the rows deleted in generation N, one number per line.

Rows are numbered base first (its faiss ids), then each delta file in generation
order, so a number never changes until compaction. A search asks the base index
for ``k`` plus the number of deleted base rows, drops the deleted ones (a deletion
mask applied at search time, which works for every faiss index type; removing rows
from the base in place would rewrite the whole file), searches the live delta rows
exactly, and merges the two lists by score. :func:`compact` writes a new base
without the deleted rows, with the delta rows appended, as a fresh build would order
them (the document store's order), and no delta files.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from indexes.atomic import atomic_write, write_text
from indexes.errors import IndexFormatError, InputError
from indexes.faiss_index import FaissIndex, _as_matrix, exact_scores, rank_exact, rescore_margin

_DELTA = re.compile(r"^delta-g(\d+)\.npy$")
_DELETED = re.compile(r"^deleted-g(\d+)\.rows$")


def _atomic_npy(path: Path, array: np.ndarray) -> None:
    with atomic_write(path, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array, dtype=np.float32))


def changed(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` holds delta or deletion files (else it is a plain FaissIndex folder)."""
    return any(_DELTA.match(n) or _DELETED.match(n) for n in os.listdir(folder))


class _Rows:
    """``reconstruct*`` over the live rows, in :attr:`LiveFaiss.docids` order (for code that
    reads vectors back, such as dimension selection)."""

    def __init__(self, live: "LiveFaiss"):
        self._live = live
        self.d = live.dim
        self.ntotal = live.ntotal

    def reconstruct_batch(self, positions) -> np.ndarray:
        return self._live.vectors(np.asarray(positions, dtype=np.int64))

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self._live.vectors(np.arange(start, start + n, dtype=np.int64))

    def reconstruct(self, i: int) -> np.ndarray:
        return self._live.vectors(np.asarray([i], dtype=np.int64))[0]


class LiveFaiss:
    """A base :class:`FaissIndex` with delta rows and a deletion mask; searched like one."""

    def __init__(self, base: FaissIndex, folder: Path):
        self.base = base
        self.folder = Path(folder)
        deltas = sorted((int(m.group(1)), n) for n in os.listdir(folder) if (m := _DELTA.match(n)))
        vecs, ids = [], []
        for _g, name in deltas:
            v = np.load(self.folder / name)
            d = (self.folder / name.replace(".npy", ".ids")).read_text(encoding="utf-8").split("\n")[:-1]
            if len(d) != len(v):
                raise IndexFormatError(f"{self.folder / name}: {len(v)} vectors but {len(d)} docids")
            vecs.append(np.asarray(v, dtype=np.float32))
            ids += d
        self.delta_files = [n for _g, n in deltas]
        dim = base.dim
        self._dv_all = np.concatenate(vecs) if vecs else np.zeros((0, dim), dtype=np.float32)
        if self._dv_all.shape[1] != dim:
            raise IndexFormatError(f"{self.folder}: delta vectors have dimension {self._dv_all.shape[1]}, "
                                   f"the index {dim}")
        self._dids_all = ids
        deleted = set()
        for n in os.listdir(folder):
            if _DELETED.match(n):
                deleted.update(int(x) for x in (self.folder / n).read_text().split())
        self.deleted_rows = deleted
        nb = base.ntotal
        bdocs = base.docids
        self._base_deleted = {bdocs[r] for r in deleted if r < nb}
        keep = np.array([nb + i not in deleted for i in range(len(ids))], dtype=bool)
        self._delta_rows = np.nonzero(keep)[0]
        self._dv = np.ascontiguousarray(self._dv_all[keep])
        self._dids = [ids[i] for i in self._delta_rows]
        self._base_live = [i for i in range(nb) if i not in deleted] if self._base_deleted else None
        self._docids = ([bdocs[i] for i in self._base_live] if self._base_live is not None else bdocs) + self._dids

    # -- what FaissIndex offers ---------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.base.dim

    @property
    def ntotal(self) -> int:
        return len(self._docids)

    def __len__(self) -> int:
        return self.ntotal

    @property
    def factory(self) -> str:
        return self.base.factory

    @property
    def params(self) -> dict:
        return self.base.params

    @property
    def docids(self) -> List[str]:
        return list(self._docids)

    @property
    def index(self) -> _Rows:
        return _Rows(self)

    def set_search_params(self, **kw) -> None:
        self.base.set_search_params(**kw)

    def _check_dim(self, v: np.ndarray) -> np.ndarray:
        return self.base._check_dim(v)

    def describe(self, folder: Optional[Path] = None) -> dict:
        d = self.base.describe(folder)
        d.update(ntotal=self.ntotal, base_rows=self.base.ntotal, delta_rows=int(len(self._dids_all)),
                 deleted_rows=len(self.deleted_rows))
        return d

    def vectors(self, positions: np.ndarray) -> np.ndarray:
        """The vectors of live rows at ``positions`` (of :attr:`docids`)."""
        nb_live = len(self._base_live) if self._base_live is not None else self.base.ntotal
        out = np.zeros((len(positions), self.dim), dtype=np.float32)
        b = positions < nb_live
        if b.any():
            rows = positions[b] if self._base_live is None else np.asarray(self._base_live)[positions[b]]
            idx = self.base.index
            try:
                out[b] = np.asarray(idx.reconstruct_batch(rows.astype(np.int64)), dtype=np.float32)
            except (RuntimeError, AttributeError):
                out[b] = np.stack([idx.reconstruct(int(i)) for i in rows])
        if (~b).any():
            out[~b] = self._dv[positions[~b] - nb_live]
        return out

    def search(self, queries: np.ndarray, k: int = 10) -> Tuple[np.ndarray, List[List[str]]]:
        q = self._check_dim(_as_matrix(queries))
        if k < 1:
            raise InputError(f"k must be positive, got {k}")
        n = len(q)
        lists: List[List[Tuple[float, str]]] = [[] for _ in range(n)]
        nb = self.base.ntotal
        if nb:
            kb = min(k + len(self._base_deleted), nb)
            D, names = self.base.search(q, kb)
            drop = self._base_deleted
            for i in range(n):
                row = [(float(s), d) for s, d in zip(D[i], names[i]) if d not in drop]
                lists[i] = row[:k]
        m = len(self._dids)
        if m:
            S = q @ self._dv.T
            exact = self.base._exact_storage() is not None
            kk = min(k + rescore_margin(k), m) if exact else min(k, m)
            top = np.argpartition(-S, kk - 1, axis=1)[:, :kk] if kk < m else np.tile(np.arange(m), (n, 1))
            for i in range(n):
                if exact:  # scored and ordered as the base's rows are (FaissIndex._rescored)
                    scores = [s for s, _ in lists[i]] + exact_scores(q[i], self._dv[top[i]]).tolist()
                    ids = [d for _, d in lists[i]] + [self._dids[j] for j in top[i]]
                    lists[i] = rank_exact(scores, ids)[:k]
                    continue
                cand = [(float(S[i, j]), self._dids[j]) for j in top[i]]
                # base first on equal scores, as one index holding every row would order them
                lists[i] = sorted(lists[i] + cand, key=lambda x: -x[0])[:k]
        out_d = np.full((n, k), -np.inf, dtype=np.float32)
        out_n = []
        for i, row in enumerate(lists):
            out_d[i, :len(row)] = [s for s, _ in row]
            out_n.append([d for _, d in row])
        return out_d, out_n


def open_live(folder: Union[str, Path], mmap: bool = True, use_gpu: Union[bool, str] = "auto"
              ) -> Union[FaissIndex, LiveFaiss]:
    """The faiss sub-index in ``folder``: a plain FaissIndex when nothing changed since it was
    built or compacted, else a :class:`LiveFaiss`."""
    base = FaissIndex.open(folder, mmap=mmap, use_gpu=use_gpu)
    return LiveFaiss(base, Path(folder)) if changed(folder) else base


def add_delta(folder: Union[str, Path], vectors: np.ndarray, docids: Sequence[str], generation: int) -> None:
    """Record ``vectors`` for ``docids`` as added in ``generation`` (new files only)."""
    folder = Path(folder)
    live = open_live(folder, mmap=True)
    v = live._check_dim(_as_matrix(vectors))
    docids = [str(d) for d in docids]
    if len(docids) != len(v):
        raise InputError(f"{len(v)} vectors but {len(docids)} docids")
    if any("\n" in d or "\r" in d for d in docids):
        raise InputError("docids must not contain line breaks")
    have = set(live.docids)
    dup = next((d for d in docids if d in have), None)
    if dup is not None or len(set(docids)) != len(docids):
        raise InputError(f"duplicate docid {dup!r}: already in the index or repeated in this batch")
    name = f"delta-g{int(generation)}"
    if (folder / f"{name}.npy").exists():
        raise IndexFormatError(f"{folder}: generation {generation} already has added rows")
    write_text(folder / f"{name}.ids", "".join(d + "\n" for d in docids))
    _atomic_npy(folder / f"{name}.npy", v)


def delete_rows(folder: Union[str, Path], docids: Sequence[str], generation: int) -> int:
    """Mask the live rows of ``docids`` as deleted in ``generation``; returns how many."""
    folder = Path(folder)
    live = open_live(folder, mmap=True)
    base = live.base if isinstance(live, LiveFaiss) else live
    deleted = live.deleted_rows if isinstance(live, LiveFaiss) else set()
    row: Dict[str, int] = {}
    for i, d in enumerate(base.docids):
        if i not in deleted:
            row[d] = i
    if isinstance(live, LiveFaiss):
        nb = base.ntotal
        for j, d in enumerate(live._dids_all):
            if nb + j not in deleted:
                row[d] = nb + j
    rows = sorted({row[d] for d in docids if d in row})
    if rows:
        write_text(folder / f"deleted-g{int(generation)}.rows", "".join(f"{r}\n" for r in rows))
    return len(rows)


class NotReconstructible(Exception):
    """The base index cannot give its vectors back exactly (a compressed type)."""


_LOSSY = re.compile(r"PQ|SQ|LSH|RaBitQ|Residual", re.I)


def lossy(factory: Optional[str]) -> bool:
    """Whether a faiss index of this factory string stores its vectors approximately (compressed)."""
    return bool(_LOSSY.search(factory or ""))


def compact(folder: Union[str, Path], quiet: bool = True) -> FaissIndex:
    """Write a new base into ``folder`` holding the live rows only (base rows in order, then
    delta rows), rebuilt with the same factory string and search parameters (trained again
    where the type needs it, on the same rows a fresh build would train on); the delta and
    deletion files are removed. Raises NotReconstructible for compressed index types, whose
    vectors cannot be read back exactly (re-encode instead)."""
    import faiss

    folder = Path(folder)
    live = open_live(folder, mmap=False)
    if not isinstance(live, LiveFaiss):
        return live
    base = live.base
    if _LOSSY.search(base.factory or ""):
        raise NotReconstructible(base.factory)
    keep = (np.asarray(live._base_live, dtype=np.int64) if live._base_live is not None
            else np.arange(base.ntotal, dtype=np.int64))
    try:
        ivf = faiss.extract_index_ivf(base.index)
        ivf.make_direct_map()
    except (RuntimeError, TypeError, AttributeError):
        pass
    try:
        bv = (np.asarray(base.index.reconstruct_batch(keep), dtype=np.float32) if len(keep)
              else np.zeros((0, base.dim), dtype=np.float32))
    except (RuntimeError, AttributeError) as e:
        raise NotReconstructible(f"{base.factory}: {e}") from None
    ids = [base.docids[i] for i in keep] + live._dids
    vectors = np.concatenate([bv, live._dv]) if len(live._dv) else bv
    if not len(ids):
        raise InputError("no vectors left to index")
    params = dict(base.params)
    fi = FaissIndex.build(vectors, ids, factory=base.factory, dim=base.dim, use_gpu=False, quiet=quiet)
    if params:
        fi.set_search_params(**params)
    fi.save(folder)
    for n in os.listdir(folder):
        if _DELTA.match(n) or _DELETED.match(n) or n.endswith(".ids") and _DELTA.match(n[:-4] + ".npy"):
            (folder / n).unlink()
    return fi
