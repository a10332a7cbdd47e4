"""A sharded index's own manifest, ``SHARDED/shards.json``: read (validated: it is untrusted input,
as every manifest), written, and the routing rule.

    {"format": "retr-sharded", "format_version": 1, "id": "<32 hex digits>", "shards": N,
     "routing": "blake2b-64", "folders": ["shard-000", ...], "created_at": ...,
     "generations": [G0, G1, ...], "committed_at": ...}

``generations`` is the sharded commit record: shard i's readers through the sharded index read its
generation ``Gi`` (or a later one its own folder committed alone). A write through the sharded index
prepares each changed shard's next generation without switching that shard's manifest, then replaces
this file once, naming them all (:mod:`retrieval.sharded.write` explains the protocol). A file
without it (written before it existed) names each shard's current generation.

Each shard is an ordinary retr folder whose own manifest records ``"sharded": {"id", "shard",
"shards"}``; :func:`check_member` compares that record with this file, so a folder copied in from
another sharded index (or moved to another position) is refused. Knows nothing of the shards'
contents, models or queries.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from indexes.atomic import atomic_write
from indexes.errors import IndexFormatError, InputError
from indexes.manifest import refuse_links

FORMAT = "retr-sharded"
FORMAT_VERSION = 1
SHARDS_FILE = "shards.json"
ROUTING = "blake2b-64"
MAX_SHARDS = 1024
_ID = re.compile(r"^[0-9a-f]{32}$")
_FOLDER = re.compile(r"^shard-[0-9]{3,4}$")


def shard_of(docid: str, shards: int) -> int:
    """The shard of ``docid``: the first 8 bytes of BLAKE2b (digest_size=8) of its UTF-8 bytes, read
    as a big-endian unsigned integer, modulo ``shards``. A documented hash, not Python's ``hash()``
    (salted per process), so every process and every language routes a document alike."""
    digest = hashlib.blake2b(docid.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def folder_name(i: int) -> str:
    return f"shard-{i:03d}"


def is_sharded(path: Path | str) -> bool:
    """Whether ``path`` is a sharded index's folder (it holds the sharded manifest)."""
    return os.path.isfile(os.path.join(path, SHARDS_FILE))


def new_record(shards: int) -> Dict[str, Any]:
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= MAX_SHARDS:
        raise InputError(f"the number of shards must be an integer from 1 to {MAX_SHARDS}, got {shards!r}")
    from indexes.manifest import now

    return {"format": FORMAT, "format_version": FORMAT_VERSION, "id": uuid.uuid4().hex, "shards": shards,
            "routing": ROUTING, "folders": [folder_name(i) for i in range(shards)], "created_at": now()}


def write(folder: Path | str, record: Dict[str, Any]) -> None:
    with atomic_write(Path(folder) / SHARDS_FILE, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def read(folder: Path | str) -> Dict[str, Any]:
    """The sharded manifest of ``folder``, checked: every field's type and range, folder names
    that are one plain name inside ``folder``, one per shard, distinct; neither this file nor a
    shard's folder (nor the folder's lock) is a symlink (:func:`indexes.manifest.refuse_links`)."""
    folder = Path(folder)
    path = folder / SHARDS_FILE
    if not folder.is_dir():
        raise InputError("index folder does not exist", folder)
    refuse_links(folder)  # a planted link: one line before anything is opened
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"{folder}: not a sharded retr index (no {SHARDS_FILE})") from None
    except (ValueError, RecursionError, OSError) as e:
        raise IndexFormatError(f"{path}: unreadable sharded manifest ({e})") from None
    _check(m, folder, path)
    refuse_links(folder, m["folders"])
    for f in m["folders"]:  # each shard's own locks and manifest too: a write then touches no shard of it
        refuse_links(folder / f)
    return m


def _check(m: Any, folder: Path, path: Path) -> None:
    def bad(what: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: damaged sharded manifest ({what}); refusing to use the folder")

    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise bad("not a retr-sharded manifest")
    v = m.get("format_version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise bad(f"format_version {v!r} is not a positive integer")
    if v > FORMAT_VERSION:
        raise IndexFormatError(f"{path}: sharded format {v} is newer than this retr understands ({FORMAT_VERSION})")
    if not isinstance(m.get("id"), str) or not _ID.match(m["id"]):
        raise bad(f"'id' must be 32 lower-case hex digits, not {m.get('id')!r}")
    n = m.get("shards")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SHARDS:
        raise bad(f"'shards' must be an integer from 1 to {MAX_SHARDS}, not {n!r}")
    if m.get("routing") != ROUTING:
        raise bad(f"unknown routing {m.get('routing')!r} (this retr routes by {ROUTING!r})")
    folders = m.get("folders")
    if not isinstance(folders, list) or len(folders) != n:
        raise bad(f"'folders' must list one folder per shard ({n})")
    root = os.path.realpath(folder)
    for f in folders:
        if not isinstance(f, str) or not _FOLDER.match(f):
            raise bad(f"shard folder {f!r} is not a name like 'shard-000'")
        if not os.path.realpath(folder / f).startswith(root + os.sep):
            raise bad(f"shard folder {f!r} leads outside the index folder")
    if len(set(folders)) != n:
        raise bad("a shard folder is listed twice")
    g = m.get("generations")
    if g is not None and (not isinstance(g, list) or len(g) != n or not all(
            isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 2 ** 53 for x in g)):
        raise bad(f"'generations' must list one generation (an integer >= 0) per shard ({n})")


def committed_generation(record: Dict[str, Any], member_rec: Dict[str, Any]) -> Optional[int]:
    """The generation ``record`` commits for the shard whose own manifest records ``member_rec``
    (``{"id", "shard", "shards"}``), or None (no record of generations, or not this index's shard)."""
    g = record.get("generations")
    i = member_rec.get("shard")
    if g is None or member_rec.get("id") != record["id"] or not isinstance(i, int) or not 0 <= i < len(g):
        return None
    return int(g[i])


def shard_paths(folder: Path | str, record: Dict[str, Any]) -> List[Path]:
    return [Path(folder) / f for f in record["folders"]]


def member(record: Dict[str, Any], i: int) -> Dict[str, Any]:
    """What shard ``i``'s own manifest records of the sharded index it belongs to."""
    return {"id": record["id"], "shard": i, "shards": record["shards"]}


def check_member(shard_manifest: Dict[str, Any], record: Dict[str, Any], i: int, where: Path) -> None:
    """Refuse shard ``i``'s folder unless its manifest says it is shard ``i`` of this sharded index."""
    got: Optional[Any] = shard_manifest.get("sharded")
    want = member(record, i)
    if not isinstance(got, dict):
        raise IndexFormatError(f"{where}: not a shard of a sharded index (its manifest has no 'sharded' record)")
    if got.get("id") != want["id"]:
        raise IndexFormatError(f"{where}: a shard of another sharded index (id {str(got.get('id'))[:40]!r}, "
                               f"this index is {want['id']!r})")
    if got != want:
        raise IndexFormatError(f"{where}: records shard {got.get('shard')!r} of {got.get('shards')!r}, but the "
                               f"sharded manifest lists it as shard {i} of {want['shards']}")


def refuse_one_shard(shard_manifest: Dict[str, Any], where: Path | str, what: str) -> None:
    """A choice made on the documents (a tuning) belongs to the whole sharded index: made in one shard
    folder alone it would be made on that shard's documents, and the shards would disagree. One
    error line naming the sharded index, for a folder whose manifest says it is a shard."""
    rec = shard_manifest.get("sharded")
    if isinstance(rec, dict):
        raise InputError(f"{where} is shard {rec.get('shard')} of {rec.get('shards')} of a sharded index: {what} "
                         f"the sharded index ({Path(where).parent}), so that every shard records one choice")
