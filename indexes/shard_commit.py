"""One commit of a sharded index's shard folders: the writer lock of the sharded index and of every
shard, recovery of what a killed writer left, the shards' changes prepared under the caller's block
and switched in by one replace of the sharded record (``shards.json``), then rolled forward shard by
shard. The steps, and the pause points of the crash tests, are told in :mod:`retrieval.sharded.write`,
whose changes all commit through :func:`transaction`; :func:`commit_manifests` is a manifest-only change
of every shard (a tuned default, a tuned fusion), as :func:`indexes.folder.commit_manifest` is one
folder's. On-disk work only: it imports nothing of ``retrieval``."""
from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from indexes import folder
from indexes import generations as gens
from indexes import manifest as mf
from indexes import sharded as sh
from indexes.errors import InputError


_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?:sharding|replaced)-(?P<pid>\d+)$")


def leftovers(index_dir: Union[str, Path]) -> List[Tuple[Path, int]]:
    """Whole-index copies that killed sharded builds of ``index_dir`` left beside it (``.NAME.sharding-PID``:
    a build's stage, or after its switch the index it replaced; ``.NAME.replaced-PID``), as ``(path, pid)``:
    only those of processes no longer alive."""
    index_dir = Path(index_dir)
    parent = index_dir.parent
    if not parent.is_dir():
        return []
    out = []
    for p in parent.iterdir():
        m = _LEFTOVER.match(p.name)
        if m and m.group("name") == index_dir.name and not gens.pid_alive(int(m.group("pid"))):
            out.append((p, int(m.group("pid"))))
    return out


def remove_leftovers(index_dir: Union[str, Path]) -> List[str]:
    """Remove :func:`leftovers` (a symbolic link by that name is removed itself, never followed)."""
    done = []
    for p, _pid in leftovers(index_dir):
        gens.remove(p)
        done.append(str(p))
    return done


def shard_folders(path: Union[str, Path]) -> List[Path]:
    """The shard folders of the sharded index ``path``, each checked to be its own."""
    record = sh.read(path)
    paths = sh.shard_paths(path, record)
    for i, p in enumerate(paths):
        if not p.is_dir():
            from indexes.errors import IndexFormatError

            raise IndexFormatError(f"{p}: shard {i} of {record['shards']} is missing")
        sh.check_member(mf.read_manifest(p), record, i, p)
    return paths


def notice(path: Path, quiet: bool):
    """What a writer of ``path`` shows while it waits for another one's lock (on stderr, as the bars;
    None when ``quiet``): the callback of :func:`indexes.generations.writer_lock`."""
    if quiet:
        return None

    def say(pid) -> None:
        from tqdm.auto import tqdm

        tqdm.write(f"retr: waiting for another writer of {path}" + (f" (pid {pid})" if pid and pid > 0 else ""),
                   file=sys.stderr)

    return say


def _identity(path: Path) -> tuple:
    """What tells this sharded index from one that replaced it at the same path: the folder's inode and
    its record's id."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, sh.read(path)["id"]


@contextlib.contextmanager
def transaction(path: Union[str, Path], quiet: bool = True):
    """Steps 1-5 of :mod:`retrieval.sharded.write`'s docstring around the block, which makes its shard changes through
    the folder's writer (each one prepared, not switched in: :func:`indexes.folder.deferred`); yields the
    shard folders."""
    path = Path(path)
    sh.read(path)  # one error line for a folder that is not a sharded index, before any lock file is made
    with gens.writer_lock(path, notice(path, quiet)):
        ident = _identity(path)  # (a rebuild switched in while this waited is the index read from here on)
        remove_leftovers(path)  # whole-index copies of killed builds of this path
        paths = shard_folders(path)
        with contextlib.ExitStack() as locks:
            for p in paths:
                locks.enter_context(gens.writer_lock(p))
            for p in paths:  # step 2: what a writer killed after its switch left
                folder.settle(p, mf.read_manifest(p))
            try:
                with folder.deferred(paths) as prepared:
                    yield paths
            except BaseException:
                if _same(path, ident):  # (else these paths are another index's, whose locks this does not hold)
                    for p in paths:  # this change's prepared generations: leftovers now, removed at once
                        if os.path.realpath(p) in prepared:
                            folder.clean_leftovers(p, mf.read_manifest(p))
                raise
            if prepared:
                _switch(path, paths, prepared, ident)


def _same(path: Path, ident: tuple) -> bool:
    from indexes.errors import RetrError

    try:
        return _identity(path) == ident
    except (OSError, RetrError):
        return False


def _switch(path: Path, paths: Sequence[Path], prepared: Dict[str, int], ident: Optional[tuple] = None) -> None:
    """Steps 4 and 5: one replace of ``shards.json`` naming every shard's generation, then each
    prepared manifest moved onto its shard's own and what no reader holds collected. ``ident``: the
    index the change was made in (:func:`_identity`); if another has taken its place meanwhile (a
    replacement that did not take the writer lock, which a rebuild takes), nothing is committed."""
    gens.pause("sharded:before-switch")
    if ident is not None and not _same(path, ident):
        raise InputError("was replaced by another index while this change was made; nothing was changed (run it "
                         "again)", path)
    record = sh.read(path)
    record["generations"] = [prepared.get(os.path.realpath(p), int(mf.read_manifest(p).get("generation", 0)))
                             for p in paths]
    record["committed_at"] = mf.now()
    sh.write(path, record)
    gens.pause("sharded:after-switch")
    for p in paths:
        if os.path.realpath(p) in prepared:
            folder.collect_all(p, folder.settle(p, mf.read_manifest(p)))
            gens.pause(f"sharded:rolled:{p.name}")


def commit_manifests(path: Union[str, Path], edit: Callable[[Any], None],
                     based_on: Optional[Sequence[dict]] = None, quiet: bool = True) -> None:
    """A manifest-only change of every shard (a tuned default, a tuned fusion: ``edit(change)`` of
    each shard's :func:`indexes.folder.commit_manifest`) as one commit of the sharded index.
    ``based_on``: each shard's manifest the edit was computed from, in shard order; a shard whose
    documents changed since refuses it, and nothing is committed."""
    with transaction(path, quiet) as paths:
        if based_on is not None and len(based_on) != len(paths):
            raise InputError(f"the edit was computed on {len(based_on)} shards, the index has {len(paths)}", path)
        for i, p in enumerate(paths):
            folder.commit_manifest(p, edit, based_on=based_on[i] if based_on is not None else None)
