"""Filters on document metadata and ids, and the set of documents a filter allows.

A filter is a JSON object; every key is a condition and all of them must hold::

    {"shard": "odd"}                         equality (a string, number, boolean or null)
    {"shard": {"in": ["odd", "even"]}}       one of several values
    {"year": {"gte": 2000, "lt": 2010}}      numeric range (gt, gte, lt, lte; any subset)
    {"year": {"eq": 2003}}                   equality, spelled out
    {"docid": {"in": ["d1", "d7"]}}          an allow-list of document ids (``docid`` is reserved)

Conditions on a field the document's metadata lacks never hold. A metadata value
that is a list matches a condition when one of its elements does. Numbers compare
by value (``2003 == 2003.0``); booleans are not numbers (``true`` never equals
``1``). Ranges take numbers only; a document whose value is not a number never
falls in a range. Nested objects can't be matched (top-level fields only). A number in a
filter must be finite and within a double's range (:func:`retrieval.types.finite_number`,
the rule every write applies to metadata too); others are a :class:`FilterError`.

What a filtered search returns is defined in :mod:`retrieval.index`
(``Index.search``): for one retriever, the first ``k`` matching documents of its
full ranking; for a fused pipeline, the fusion of each member's filtered ranking.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from indexes.errors import InputError
from retrieval.types import Scored, finite_number

DOCID = "docid"
RANGE_OPS = ("gt", "gte", "lt", "lte")
OPS = ("eq", "in") + RANGE_OPS
MAX_VALUES = 100_000   # values in one "in" list


class FilterError(InputError):
    pass


def unknown_fields_message(unknown: Sequence[str], fields: Mapping[str, int]) -> str:
    """One sentence for a filter on fields no document carries: the unknown ones and those there are."""
    have = ", ".join(f"{f} ({n:,})" for f, n in fields.items()) or "none: the documents carry no metadata"
    names = ", ".join(repr(f) for f in unknown)
    return (f"filter field{'s' if len(unknown) > 1 else ''} {names} {'are' if len(unknown) > 1 else 'is'} "
            f"carried by no document, so {'they match' if len(unknown) > 1 else 'it matches'} nothing; "
            f"the fields there are (documents carrying each): {have}")


def _scalar_key(v: Any, where: str) -> Tuple[str, Any]:
    """A hashable key under which equal JSON scalars meet (1 == 1.0, True != 1)."""
    if v is None:
        return ("z", None)
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        try:
            return ("n", finite_number(v))
        except ValueError as e:
            raise FilterError(f"filter {where}: {e}") from None
    if isinstance(v, str):
        return ("s", v)
    raise FilterError(f"filter {where}: expected a string, number, boolean or null, got {type(v).__name__}")


def _number(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            shown = json.dumps(v)[:40]
        except (TypeError, ValueError):
            shown = type(v).__name__
        raise FilterError(f"filter {where}: a range bound must be a finite number, got {shown}")
    try:
        return finite_number(v)
    except ValueError as e:
        raise FilterError(f"filter {where}: a range bound must be a finite number, got {e}") from None


class Filter:
    """A parsed filter: ``conditions`` is a tuple of ``(field, op, value)`` with op one of
    ``eq`` (value: a scalar key), ``in`` (a frozenset of scalar keys) or a range op (a float).
    ``key`` is a canonical string: equal filters have equal keys."""

    def __init__(self, conditions: Sequence[Tuple[str, str, Any]]):
        self.conditions = tuple(conditions)
        canon = []
        for f, op, v in self.conditions:
            canon.append([f, op, sorted(map(list, v), key=repr) if op == "in" else (list(v) if op == "eq" else v)])
        self.key = json.dumps(sorted(canon, key=repr), separators=(",", ":"))

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def __repr__(self) -> str:
        return f"Filter({self.key})"


def parse_filter(obj: Optional[Mapping[str, Any]]) -> Optional[Filter]:
    """Check and parse a filter object (see the module doc); None or ``{}`` is no filter."""
    if obj is None:
        return None
    if isinstance(obj, Filter):
        return obj if obj else None
    if not isinstance(obj, Mapping):
        raise FilterError(f"a filter is a JSON object of field conditions, got {type(obj).__name__}")
    conds: List[Tuple[str, str, Any]] = []
    for field, cond in obj.items():
        if not isinstance(field, str) or not field:
            raise FilterError("filter field names must be non-empty strings")
        if isinstance(cond, Mapping):
            if not cond:
                raise FilterError(f"filter on {field!r}: empty condition (use a value, or in/eq/gt/gte/lt/lte)")
            for op, v in cond.items():
                where = f"on {field!r} ({op})"
                if op == "eq":
                    conds.append((field, "eq", _scalar_key(v, where)))
                elif op == "in":
                    if not isinstance(v, (list, tuple)):
                        raise FilterError(f"filter {where}: expected a list of values")
                    if len(v) > MAX_VALUES:
                        raise FilterError(f"filter {where}: at most {MAX_VALUES:,} values")
                    conds.append((field, "in", frozenset(_scalar_key(x, where) for x in v)))
                elif op in RANGE_OPS:
                    if field == DOCID:
                        raise FilterError(f"filter {where}: document ids take equality or 'in', not ranges")
                    conds.append((field, op, _number(v, where)))
                else:
                    raise FilterError(f"filter on {field!r}: unknown operator {op!r} (use one of {', '.join(OPS)})")
        elif isinstance(cond, (list, tuple)):
            raise FilterError(f"filter on {field!r}: a list needs an operator, e.g. {{\"in\": [...]}}")
        else:
            conds.append((field, "eq", _scalar_key(cond, f"on {field!r}")))
    for f, op, v in conds:
        if f == DOCID and any(k[0] != "s" for k in (v if op == "in" else [v])):
            raise FilterError("filter on 'docid': document ids are strings")
    return Filter(conds) if conds else None


class Allowed:
    """The documents a filter allows, in the document store's order. Backends keep
    their own form of it (a Lucene query, a faiss selector) in ``cache``."""

    def __init__(self, key: str, docids: List[str]):
        self.key = key
        self.docids = docids
        self._set: Optional[frozenset] = None
        self.cache: Dict[Any, Any] = {}
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.docids)

    @property
    def set(self) -> frozenset:
        if self._set is None:
            self._set = frozenset(self.docids)
        return self._set

    def __contains__(self, docid: str) -> bool:
        return docid in self.set

    def backend(self, key, build):
        """The backend form under ``key``, built once by ``build()``."""
        v = self.cache.get(key)
        if v is None:
            with self.lock:
                v = self.cache.get(key)
                if v is None:
                    v = self.cache[key] = build()
        return v


def first_allowed(search: Callable[[int], Sequence[Scored]], k: int, allowed: Allowed, total: int,
                  depth: Optional[int] = None) -> List[Scored]:
    """The first ``k`` documents of ``allowed`` in each ranking that ``search(depth)`` returns (one
    ranking per query), exactly, by reading the unfiltered rankings deep enough: to ``depth``
    (default: about ``2k / share``, the share of the ``total`` documents that ``allowed`` holds),
    then four times deeper until each ranking holds ``k`` of them, the rankings end, or the depth
    reaches ``total``. The one deepening loop of filtered search (the reader's, and dense's over a
    changed live index)."""
    if depth is None:
        depth = min(total, max(k + 10, -(-2 * k * total // max(1, len(allowed)))))
    while True:
        ranked = search(depth)
        out = [[x for x in r if x[0] in allowed.set][:k] for r in ranked]
        if all(len(o) >= k for o in out) or depth >= total or all(len(r) < depth for r in ranked):
            return out
        depth = min(total, depth * 4)


class _Field:
    """One metadata field across the collection: ordinals per equal value, and the
    numeric values sorted (for ranges)."""

    def __init__(self, values: Dict[Tuple[str, Any], List[int]]):
        self.eq = {k: np.asarray(v, dtype=np.int64) for k, v in values.items()}
        nums = [(k[1], o) for k, ords in values.items() if k[0] == "n" for o in ords]
        nums.sort()
        self.num_vals = np.asarray([v for v, _ in nums], dtype=np.float64)
        self.num_ords = np.asarray([o for _, o in nums], dtype=np.int64)


class MetadataTable:
    """Metadata of every document, indexed for filters. Built from ``(docid, meta)`` rows
    (the document store's order); each field's index is built on its first use."""

    def __init__(self, rows: Iterable[Tuple[str, Optional[dict]]], cache_size: int = 64):
        self.docids: List[str] = []
        self._meta: List[Optional[dict]] = []
        for docid, meta in rows:
            self.docids.append(docid)
            self._meta.append(meta or None)
        self._ord = None
        self._counts: Optional[Dict[str, int]] = None
        self._fields: Dict[str, _Field] = {}
        self._lock = threading.Lock()
        self._cache: "OrderedDict[str, Allowed]" = OrderedDict()
        self._cache_size = cache_size

    def __len__(self) -> int:
        return len(self.docids)

    def fields(self) -> Dict[str, int]:
        """Each top-level metadata field any document carries -> how many documents carry it,
        by name (computed once, on first use)."""
        if self._counts is None:
            counts: Dict[str, int] = {}
            for m in self._meta:
                for name in (m or ()):
                    counts[name] = counts.get(name, 0) + 1
            self._counts = dict(sorted(counts.items()))
        return self._counts

    def unknown(self, flt: Optional[Filter]) -> List[str]:
        """The fields ``flt`` names that no document carries (``docid`` is always known): such a
        condition matches nothing."""
        if flt is None:
            return []
        have = self.fields()
        return list(dict.fromkeys(f for f, _, _ in flt.conditions if f != DOCID and f not in have))

    def _field(self, name: str) -> _Field:
        f = self._fields.get(name)
        if f is None:
            with self._lock:
                f = self._fields.get(name)
                if f is None:
                    values: Dict[Tuple[str, Any], List[int]] = {}
                    for i, m in enumerate(self._meta):
                        if not m or name not in m:
                            continue
                        v = m[name]
                        for x in (v if isinstance(v, list) else [v]):
                            try:
                                key = _scalar_key(x, "")
                            except FilterError:
                                continue  # an object or a non-finite number: no condition matches it
                            values.setdefault(key, []).append(i)
                    f = self._fields[name] = _Field(values)
        return f

    def _docid_ords(self, keys) -> np.ndarray:
        if self._ord is None:
            self._ord = {d: i for i, d in enumerate(self.docids)}
        return np.asarray([self._ord[k[1]] for k in keys if k[1] in self._ord], dtype=np.int64)

    def _mask(self, field: str, op: str, v) -> np.ndarray:
        mask = np.zeros(len(self.docids), dtype=bool)
        if field == DOCID:
            mask[self._docid_ords([v] if op == "eq" else v)] = True
            return mask
        f = self._field(field)
        if op == "eq":
            ords = f.eq.get(v)
            if ords is not None:
                mask[ords] = True
        elif op == "in":
            for key in v:
                ords = f.eq.get(key)
                if ords is not None:
                    mask[ords] = True
        else:
            vals = f.num_vals
            if op == "gt":
                sel = f.num_ords[np.searchsorted(vals, v, side="right"):]
            elif op == "gte":
                sel = f.num_ords[np.searchsorted(vals, v, side="left"):]
            elif op == "lt":
                sel = f.num_ords[:np.searchsorted(vals, v, side="left")]
            else:
                sel = f.num_ords[:np.searchsorted(vals, v, side="right")]
            mask[sel] = True
        return mask

    def cached(self, flt: Filter) -> bool:
        """Whether ``flt``'s documents are at hand (no work to find them)."""
        a = self._cache.get(flt.key)
        return a is not None and (len(a) == 0 or bool(a.cache) or a._set is not None)

    def allowed(self, flt: Filter) -> Allowed:
        """The documents ``flt`` allows (cached for the last ``cache_size`` filters)."""
        with self._lock:
            hit = self._cache.get(flt.key)
            if hit is not None:
                self._cache.move_to_end(flt.key)
                return hit
        mask = None
        for field, op, v in flt.conditions:
            m = self._mask(field, op, v)
            mask = m if mask is None else (mask & m)
        docids = [self.docids[i] for i in np.flatnonzero(mask)] if mask is not None else list(self.docids)
        a = Allowed(flt.key, docids)
        with self._lock:
            self._cache[flt.key] = a
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return a


def matches(docid: str, meta: Optional[dict], flt: Filter) -> bool:
    """Whether a document with ``docid`` and metadata ``meta`` passes ``flt``; the rules are
    those of :class:`MetadataTable`, written out plainly (tests use it as the oracle)."""
    for field, op, v in flt.conditions:
        if field == DOCID:
            vals = [docid]
        else:
            if not meta or field not in meta:
                return False
            raw = meta[field]
            vals = raw if isinstance(raw, list) else [raw]
        keys = []
        for x in vals:
            try:
                keys.append(_scalar_key(x, ""))
            except FilterError:
                pass
        if op == "eq":
            ok = v in keys
        elif op == "in":
            ok = any(k in v for k in keys)
        else:
            nums = [k[1] for k in keys if k[0] == "n"]
            ok = any((x > v if op == "gt" else x >= v if op == "gte" else x < v if op == "lt" else x <= v)
                     for x in nums)
        if not ok:
            return False
    return True
