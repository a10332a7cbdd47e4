"""Command-line options and commands as plain data. A sub-index kind declares what it adds to
`retr index` and `retr search`, and the commands it brings (`retr train dense`), as :class:`Option`
and :class:`Command` values in its package's ``options`` module; the command line (``cli.params``)
turns them into click options and commands, so the library imports no command-line package and a
default is written once, where a spec or config dataclass already holds it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Tuple, Union

from indexes.errors import InputError

#: the value types an option takes (``"index"``: the path of an index folder, a folder's or a sharded one's,
#: handed to the command opened, as ``retrieval.open_index`` opens it)
TYPES = ("int", "float", "str", "bool", "choice", "path", "index")


class UsageError(InputError):
    """Options that do not go together (``--rm3`` with ``--rocchio``): the command line reports it as
    a usage error, pointing to the command's ``--help``."""


@dataclass(frozen=True)
class Range:
    """Bounds of a number (None: unbounded on that side; ``*_open``: the bound itself is refused)."""

    min: Optional[float] = None
    max: Optional[float] = None
    min_open: bool = False
    max_open: bool = False


K1 = Range(min=0)                                    # Lucene's BM25Similarity: k1 finite and >= 0
B = Range(0, 1)                                      # ... and b in [0, 1]
SHARE_OPEN_CLOSED = Range(0, 1, min_open=True)       # a share kept, (0, 1]
SHARE_CLOSED_OPEN = Range(0, 1, max_open=True)       # a share dropped or held out, [0, 1)
SHARE_OPEN = Range(0, 1, min_open=True, max_open=True)  # strictly between 0 and 1 (a significance level)
POSITIVE = Range(min=0, min_open=True)               # a rate, ratio or margin, > 0
DEVICES = ("auto", "cpu", "cuda")                    # where a model runs


def _tuple(v) -> tuple:
    return (v,) if isinstance(v, str) else tuple(v)


@dataclass(frozen=True)
class Option:
    """One option of a command. ``flags``: its spellings (``"--output"`` or ``("--output", "-o")``);
    ``name``: the parameter its value is handed over as (default: the first long flag, ``--dev-share``
    -> ``dev_share``). ``default`` is shown in ``--help`` unless None; a ``bool`` option is a flag
    (default False). ``bare_value``: the value of the flag given without one (``--dense`` alone:
    ``minilm``). ``path_kind``: ``"file"`` or ``"dir"`` for a path that must be one (None: either).
    ``applies_to``: for a kind's option, the commands it is added to (``"index"``: `retr index`;
    ``"search"``: `retr search` and `retr explain`); ``section``: the heading it is listed under in
    ``--help`` (a kind's options: the kind's title). A default is read from the spec or config dataclass
    that has it (``default=BM25Spec.k1``) where that module is light; where importing it would slow every
    command's start (numpy, the kinds' sub-index code), the option repeats the value and ``default_from``
    names where it lives (``"retrieval.dense.subindex:DenseSpec.pooling"``), which a test compares."""

    flags: Union[str, Tuple[str, ...]]
    type: str = "str"
    default: Any = None
    help: Optional[str] = None
    name: Optional[str] = None
    range: Optional[Range] = None
    choices: Tuple[str, ...] = ()
    required: bool = False
    multiple: bool = False
    metavar: Optional[str] = None
    bare_value: Any = None
    path_kind: Optional[str] = None
    applies_to: Union[str, Tuple[str, ...]] = ()
    section: Optional[str] = None
    default_from: Optional[str] = None

    def __post_init__(self):
        flags = _tuple(self.flags)
        long = [f for f in flags if f.startswith("--")]
        # a declaration's mistakes are the kind author's, found when the module is imported
        if not long or not all(f.startswith("-") for f in flags):
            raise ValueError(f"an option needs a --long flag: {flags}")
        if self.type not in TYPES:
            raise ValueError(f"{long[0]}: type {self.type!r} is not one of {TYPES}")
        if bool(self.choices) != (self.type == "choice"):
            raise ValueError(f"{long[0]}: choices go with type 'choice', and it needs them")
        if self.range is not None and self.type not in ("int", "float"):
            raise ValueError(f"{long[0]}: a range bounds a number")
        if self.path_kind not in (None, "file", "dir") or (self.path_kind and self.type != "path"):
            raise ValueError(f"{long[0]}: path_kind is 'file' or 'dir', for a path")
        if self.required and self.default is not None:
            raise ValueError(f"{long[0]}: a required option has no default")
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "choices", tuple(self.choices))
        object.__setattr__(self, "applies_to", _tuple(self.applies_to))
        if self.name is None:
            object.__setattr__(self, "name", long[0][2:].replace("-", "_").lower())

    @property
    def flag(self) -> str:
        """The long flag, as error messages name the option."""
        return next(f for f in self.flags if f.startswith("--"))


class Values:
    """What a command's options parsed, by each option's ``name``, handed to its ``run`` as one value: read as
    attributes (``v.output``); :meth:`config` makes a config dataclass of those named like its fields."""

    def __init__(self, values: Mapping[str, Any]):
        self.__dict__.update(values)

    def config(self, cls, **overrides):
        """``cls`` (a dataclass) from the values named like its fields, ``overrides`` put over them."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in vars(self).items() if k in names}, **overrides})


@dataclass(frozen=True)
class Command:
    """A command a kind adds: ``retr GROUP NAME`` (``group`` None: ``retr NAME``). The command line parses
    ``options`` and calls ``run`` with their :class:`Values` (each option's value by its ``name``);
    ``help`` (default: ``run``'s docstring) is its ``--help`` text. A library error naming parameters
    (``ParameterError``) names the command's flags instead through ``flags`` (parameter -> flag)."""

    name: str
    run: Callable[..., Any]
    options: Tuple[Option, ...]
    group: Optional[str] = None
    help: Optional[str] = None
    flags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        names = [o.name for o in self.options]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"command {self.name!r} declares {twice} twice")
        if "config" in names:  # Values.config
            raise ValueError(f"command {self.name!r}: an option's name may not be 'config'")
        object.__setattr__(self, "options", tuple(self.options))
        if self.help is None:
            object.__setattr__(self, "help", self.run.__doc__)


def training_options(base: str = "minilm") -> Tuple[Option, ...]:
    """The data and output options every `retr train` command shares: --corpus, --queries, --qrels
    (training qrels; the library refuses a test split), --output and --base (``base``: the encoder the
    command uses when none is given)."""
    return (
        Option("--corpus", type="path", required=True, help="The passages: BEIR folder or JSONL, TSV or TREC."),
        Option("--queries", type="path", help="Training queries (BEIR JSONL, TSV, TREC)."),
        Option("--qrels", type="path", help="Training qrels (a file named like a test split is refused)."),
        Option(("--output", "-o"), type="path", path_kind="dir", required=True, help="Model folder to write."),
        Option("--base", help=f"Base encoder: 'minilm', 'splade-tiny' or a local HF folder [default: {base}]."),
    )



def check_keywords(fn: str, given: Mapping[str, Any], declared, *private: str) -> None:
    """A keyword of ``given`` that ``declared`` (a TypedDict: the ``**options: Unpack[...]`` of ``fn``)
    does not name, nor ``private``, is a TypeError naming it, as Python's own for ``fn``: before any work."""
    names = set(declared.__required_keys__) | set(declared.__optional_keys__) | set(private)
    bad = sorted(set(given) - names)
    if bad:
        raise TypeError(f"{fn}() got an unexpected keyword argument {bad[0]!r}")
