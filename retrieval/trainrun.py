"""What every trainer's run shares: the output folder's rules, the file hashes a card records, and the
Ctrl-C that says where the last finished epoch is. Used by the dense encoder's training, SPLADE's,
DeepCT's and the dimension selector's (``--output``).

The output folder (:class:`TrainOutput`):

- A finished model has its card; an unfinished run leaves ``.checkpoint`` (with a ``trainer`` file
  naming the trainer), resumed only with the same settings.
- A trainer writes only into a missing path, an empty folder, or a folder that the same trainer
  made (recognised by the files it writes, :func:`made_by`); ``overwrite`` lets it replace its own
  finished model. Anything else (an index, a thesis, another trainer's model) is refused before
  anything is read or written.
- Nothing of the old folder is removed before the run's inputs are read and checked
  (:meth:`TrainOutput.begin`), and the finished model is written beside the folder and swapped in
  with one atomic exchange (:meth:`TrainOutput.finishing`), so a kill leaves the old output or the
  new one. The checkpoint of a run lives in ``OUTPUT/.checkpoint`` throughout, so `--resume` finds
  it where it always has; an interrupted ``overwrite`` keeps the old model beside it until the end.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Set, Tuple

from indexes.errors import InputError, ParameterError

CARD = "retr_train.json"
CHECKPOINT = ".checkpoint"
MARK = "trainer"       # OUTPUT/.checkpoint/trainer: the command whose unfinished run it is
LEGACY = "a retr training run (.checkpoint)"  # a checkpoint from before MARK
UNKNOWN = "another program"
_LEGACY_CHECKPOINT = ("state.pt", "best.pt", "bm25", "pretrained", "final")
_COMMAND = re.compile(r"^retr train [a-z][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class Trainer:
    """A trainer, as its output folder knows it: ``command`` (``retr train dense``) names it in
    messages, on its card's ``kind`` (``retr train KIND``) and in ``OUTPUT/.checkpoint/trainer``;
    ``finished`` is the file only its finished model has (its card); ``checkpoints``: it writes
    ``OUTPUT/.checkpoint``. Each trainer's package defines its own."""

    command: str
    finished: str
    checkpoints: bool = True


@dataclass(frozen=True)
class RunOptions:
    """How a trainer's run goes, apart from what it trains (its config): ``index`` (a folder of the
    corpus to mine negatives from), ``resume``, ``overwrite``, ``quiet``, ``allow_test`` (train on
    what looks like test qrels)."""
    index: Any = None
    resume: bool = False
    overwrite: bool = False
    quiet: bool = False
    allow_test: bool = False

    @classmethod
    def split(cls, how: Optional["RunOptions"], settings: Dict[str, Any]) -> Tuple["RunOptions", Dict[str, Any]]:
        """``how`` (default: :class:`RunOptions`) with the keywords of ``settings`` that name its fields
        over it, and the other keywords (a trainer's config fields, which it validates)."""
        names = {f.name for f in fields(cls)}
        return (replace(how or cls(), **{k: v for k, v in settings.items() if k in names}),
                {k: v for k, v in settings.items() if k not in names})


class TrainingStopped(KeyboardInterrupt):
    """Ctrl-C during training, after the message saying where the last finished epoch is."""


def is_trained(path) -> bool:
    return (Path(path) / CARD).is_file()


def _json(path: Path) -> Optional[dict]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return d if isinstance(d, dict) else None


def made_by(path) -> Set[str]:
    """The commands whose output the folder ``path`` holds, by the files retr's trainers write: a
    ``retr_train.json`` card (``retr train KIND`` by its ``kind``; cards from before ``kind`` were
    only dense's), a DeepCT model (``deepct_head.safetensors`` or ``deepct.json``), a dimension
    selector (``selector.json`` and ``selector.pt``), the command a ``.checkpoint/trainer`` file
    names, or :data:`LEGACY` for a ``.checkpoint`` from before that file. Empty for a folder no
    trainer made; :data:`UNKNOWN` among them for traces no trainer leaves."""
    path = Path(path)
    who: Set[str] = set()
    card = _json(path / CARD)
    if card is not None:
        kind = card.get("kind", "dense")
        who.add(f"retr train {kind}" if isinstance(kind, str) and _COMMAND.match(f"retr train {kind}") else UNKNOWN)
    if (path / "deepct_head.safetensors").is_file() or (path / "deepct.json").is_file():
        who.add("retr train deepct")
    if (path / "selector.json").is_file() and (path / "selector.pt").is_file():
        who.add("retr train dimsel")
    ck = path / CHECKPOINT
    if ck.is_dir() and not ck.is_symlink():
        try:
            mark = (ck / MARK).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            mark = None
        if mark is not None:
            who.add(mark if _COMMAND.match(mark) else UNKNOWN)
        elif not any(ck.iterdir()) or any((ck / n).exists() for n in _LEGACY_CHECKPOINT):
            who.add(LEGACY)
        else:
            who.add(UNKNOWN)
    elif ck.exists() or ck.is_symlink():
        who.add(UNKNOWN)
    return who


class TrainOutput:
    """The output folder of one run of ``trainer`` (a :class:`Trainer`). Construction checks it
    and touches nothing; ``state`` is the checkpoint to resume from (``OUTPUT/.checkpoint/state.pt``,
    made with the settings whose key is ``key``), or None.

    - A missing path or an empty folder: a new run.
    - The trainer's finished model: refused, unless ``overwrite`` (then replaced at the end; a
      checkpoint of an interrupted replacement is resumed with ``resume`` and the same settings).
    - The trainer's unfinished run: resumed with ``resume`` (and the same settings), else refused
      unless ``overwrite`` starts over.
    - Anything else: refused (:class:`ParameterError`, naming ``{output}``), whatever ``overwrite`` says."""

    def __init__(self, path, trainer: Trainer, key: Optional[str] = None, *, resume: bool = False,
                 overwrite: bool = False, quiet: bool = True):
        path = Path(path)
        if path.is_symlink() and path.is_dir():  # the user's own link: the folder it names is the output
            path = Path(os.path.realpath(path))
        self.path, self.trainer, self.key = path, trainer, key
        self.existed = path.exists()
        self.state: Optional[dict] = None
        self.discard = False   # begin() removes the checkpoint there (what overwrite starts over from)
        self.begun = False
        if path.is_symlink() or (self.existed and not path.is_dir()):
            raise InputError("exists and is not a folder", path)
        if not self.existed or not any(path.iterdir()):
            return
        owners = made_by(path)
        mine = {trainer.command, LEGACY} if trainer.checkpoints else {trainer.command}
        command = trainer.command
        if not owners:
            raise ParameterError("{_path}: is a folder that `%s` did not make (it holds no model or checkpoint "
                                 "of its own); refusing to write into it or replace it (remove what is there, or "
                                 "choose another {output})" % command, _path=str(path))
        if not owners <= mine:
            others = " and ".join(sorted(o if o in (LEGACY, UNKNOWN) else f"`{o}`" for o in owners - mine))
            raise ParameterError("{_path}: holds the output of %s, not of `%s`; refusing to write into it or replace "
                                 "it (choose another {output})" % (others, command), _path=str(path))
        ck = path / CHECKPOINT / "state.pt"
        if (path / trainer.finished).is_file() and not overwrite:
            raise ParameterError("{_path}: already holds a trained model ({overwrite} replaces it)", _path=str(path))
        if not ck.is_file():
            self.discard = (path / CHECKPOINT).exists()  # a run stopped before its first epoch ended: nothing to keep
            if resume and not quiet:
                print(f"retr: no checkpoint in {path}; training from the start", file=sys.stderr)
            return
        if not resume and not overwrite:
            raise ParameterError("{_path}: holds an unfinished run (.checkpoint); {resume} continues it, "
                                 "{overwrite} starts over", _path=str(path))
        state = self._load(ck, overwrite) if resume else None
        if state is not None and state.get("config_key") == key:
            self.state = state
            return
        if not overwrite:
            raise ParameterError("{_path}: its checkpoint was made with other settings; run with the same "
                                 "settings to resume, or {overwrite} to start over", _path=str(path))
        if resume and not quiet:
            print(f"retr: the checkpoint in {path} was made with other settings; training from the start",
                  file=sys.stderr)
        self.discard = True

    @staticmethod
    def _load(ck: Path, overwrite: bool) -> Optional[dict]:
        import torch

        try:
            state = torch.load(ck, weights_only=False)
        except Exception as e:  # a damaged checkpoint: resuming is not possible
            if overwrite:
                return None  # starting over: it is discarded
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ParameterError("{_path}: cannot read the checkpoint ({_why}); {overwrite} starts over",
                                 _path=str(ck), _why=why) from None
        return state if isinstance(state, dict) else None

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    def begin(self) -> None:
        """Start writing: called once the run's inputs are read and checked. Removes leftovers of
        killed runs beside the folder, the checkpoint ``overwrite`` starts over from, and makes
        ``OUTPUT/.checkpoint`` with the trainer's name in it (trainers without checkpoints make nothing)."""
        from indexes import folder, generations as gens
        from indexes.atomic import write_text

        for p, _pid in folder.sibling_leftovers(self.path):
            gens.remove(p)
        if self.discard:
            shutil.rmtree(self.checkpoint, ignore_errors=True)
        self.begun = True
        if self.trainer.checkpoints:
            self.checkpoint.mkdir(parents=True, exist_ok=True)
            write_text(self.checkpoint / MARK, self.trainer.command + "\n")

    def failed(self) -> None:
        """The run failed: without a checkpoint worth keeping (``state.pt``), remove what it made."""
        if not self.begun or (self.checkpoint / "state.pt").is_file():
            return
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        if not self.existed:
            shutil.rmtree(self.path, ignore_errors=True)

    @contextlib.contextmanager
    def finishing(self) -> Iterator[Path]:
        """An empty folder beside the output to write the finished model into; when the block
        succeeds it replaces the output in one atomic exchange (the old folder, checkpoint
        included, is then removed); when it fails it is removed and the output stays as it was."""
        from indexes import folder, generations as gens

        stage = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")  # what sibling_leftovers knows
        gens.remove(stage)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        stage.mkdir()
        try:
            yield stage
            gens.pause("train:before-swap")
            if self.path.exists():
                folder.exchange_in(stage, self.path)
            else:
                os.rename(stage, self.path)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise


def check_output_file(path, command: str = "retr quality train") -> Path:
    """The output file of a trainer that writes one file (`retr quality train`'s head): a missing
    path, or a file that trainer wrote (replaced when the run ends, with one ``os.replace``);
    anything else is refused before the run reads its inputs."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return path
    if path.is_dir() or not path.is_file():
        raise InputError("exists and is not a file", path)
    head = _json(path)
    if head is None or not str(head.get("format", "")).startswith("retr-quality-head/"):
        raise ParameterError("{_path}: is not a file that `%s` wrote; refusing to replace it (choose another "
                             "{output})" % command, _path=str(path))
    return path


def prepare_output(out: Path, trainer: Trainer, key: str, resume: bool, overwrite: bool,
                   quiet: bool) -> TrainOutput:
    """The checked output folder of a run of ``trainer`` (see :class:`TrainOutput`)."""
    return TrainOutput(out, trainer, key, resume=resume, overwrite=overwrite, quiet=quiet)


def file_hash(path) -> Optional[str]:
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file())
    else:
        files = [p]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


