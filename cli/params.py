"""Option types shared by the commands of cli/: click checks a value's range before any work is done,
and shows the range in ``--help``."""
from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Iterator, Mapping

import click

from indexes.errors import ParameterError
from retrieval import options

FLOAT32_MAX = 3.4028234663852886e38  # Lucene takes BM25's k1 and b as Java floats


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and infinities (every comparison with nan is false, so a
    plain FloatRange lets nan through), and numbers beyond a 32-bit float."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv) or abs(rv) > FLOAT32_MAX:
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def float_range(r: options.Range) -> FiniteFloatRange:
    return FiniteFloatRange(r.min, r.max, min_open=r.min_open, max_open=r.max_open)


K1 = float_range(options.K1)                                # Lucene's BM25Similarity: finite and >= 0
B = float_range(options.B)                                  # ... and b in [0, 1]
SHARE_OPEN_CLOSED = float_range(options.SHARE_OPEN_CLOSED)  # a share kept, (0, 1]
SHARE_CLOSED_OPEN = float_range(options.SHARE_CLOSED_OPEN)  # a share dropped or held out, [0, 1)
LEVEL = float_range(options.SHARE_OPEN)                     # a significance level, (0, 1)
POSITIVE = float_range(options.POSITIVE)                    # a rate, ratio or margin, > 0


class NamedOrPath(click.ParamType):
    """A collection by name, passed on as given (``irds:beir/scifact/test``: ir_datasets, read from its
    local cache; ``dmerit:PATH``: D-MERIT's files; ``subtopics:PATH``: TREC diversity qrels; the readers check them and name what is missing), or
    else a value ``path`` (a click.Path) takes. For options that would otherwise insist on an existing file."""
    name = "file"

    def __init__(self, path: click.Path):
        self.path = path

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.startswith(("irds:", "dmerit:", "subtopics:")):
            return value
        return self.path.convert(value, param, ctx)


# Every command that changes a folder (retr add, update, delete, compact).
nice_option = click.option("--nice", "nice", type=click.IntRange(0, 19), default=10, show_default=True,
                           help="Run at this lower CPU priority (Unix nice), so that searches of the folder keep "
                                "their speed while it changes; 0 for full speed.")


#: what the library calls an Executor's settings -> the flags of executor_options
EXECUTOR_FLAGS = {"kind=ray": "--executor ray", "executor=ray": "--executor ray", "address": "--ray-address",
                  "workers": "--workers", "cpus_per_worker": "--cpus-per-worker",
                  "gpus_per_worker": "--gpus-per-worker", "block_size": "--block-size"}


@contextlib.contextmanager
def flags(names: Mapping[str, str]) -> Iterator[None]:
    """Inside, a library error that names parameters (``ParameterError``) names the command's
    flags instead (``names``: parameter -> flag); the library never speaks of flags itself. Options
    that do not go together (``retrieval.options.UsageError``, raised by a kind's options module)
    are a usage error of the command."""
    try:
        yield
    except ParameterError as e:
        raise e.renamed(names) from None
    except options.UsageError as e:
        raise click.UsageError(str(e)) from None


def executor_options(f):
    """The options that say where model stages run (``retr index``, ``retr add``, ``retr update``);
    the command receives ``executor`` (a :class:`retrieval.executors.Executor`, checked by the
    library before any work)."""
    import functools

    opts = [
        click.option("--executor", "executor_kind", type=click.Choice(["local", "ray"]), default="local",
                     show_default=True, help="Where the model stages (dense, DeepCT, quality scores) run: in this "
                     "process, or on a Ray cluster (pip install 'retr[ray]')."),
        click.option("--ray-address", default=None, metavar="auto|HOST:PORT",
                     help="With --executor ray: join this running cluster [default: start a local one sized to "
                          "this machine, and stop it afterwards]."),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="With --executor ray: model workers (actors) [default: the cluster's CPUs, or GPUs "
                          "with --gpus-per-worker]."),
        click.option("--cpus-per-worker", type=POSITIVE, default=None,
                     help="With --executor ray: CPUs each worker reserves, fractions allowed [default: 1, less "
                          "when that would reserve every CPU]."),
        click.option("--gpus-per-worker", type=FiniteFloatRange(min=0), default=None,
                     help="With --executor ray: GPUs per worker [0]."),
        click.option("--block-size", type=click.IntRange(min=1), default=None,
                     help="Documents per block sent to a worker [default: the stage's own: dense 1024, "
                          "DeepCT 2048, quality 4096; other sizes change the float rounding of vectors, ~1e-7]."),
    ]

    @functools.wraps(f)
    def wrapper(*args, executor_kind, ray_address, workers, cpus_per_worker, gpus_per_worker, block_size, **kw):
        from retrieval.executors import Executor

        if executor_kind == "local" and gpus_per_worker is not None:
            raise click.UsageError("--gpus-per-worker only applies with --executor ray")
        kw["executor"] = Executor(executor_kind, address=ray_address, workers=workers,
                                  cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker or 0.0,
                                  block_size=block_size)
        with flags(EXECUTOR_FLAGS):
            return f(*args, **kw)

    for o in reversed(opts):
        wrapper = o(wrapper)
    return wrapper


# ------------------------------------------------------------------ options and commands as data
def click_type(o: options.Option):
    """The click type of an option declared as data (``retrieval.options.Option``): bounded numbers
    are click.IntRange or :class:`FiniteFloatRange`, paths pathlib Paths."""
    r = o.range
    if o.type == "int":
        return click.IntRange(r.min, r.max, min_open=r.min_open, max_open=r.max_open) if r else click.INT
    if o.type == "float":
        return float_range(r) if r else click.FLOAT
    if o.type == "choice":
        return click.Choice(list(o.choices))
    if o.type == "path":
        return click.Path(path_type=Path, file_okay=o.path_kind != "dir", dir_okay=o.path_kind != "file")
    if o.type == "index":
        return IndexFolder()
    return click.STRING


class IndexFolder(click.ParamType):
    """An index folder (a folder or a sharded folder), opened (``retrieval.open_index``): what an option of
    type ``"index"`` hands its command. A path that is no index is the library's error, one line."""
    name = "folder"

    def convert(self, value, param, ctx):
        if not isinstance(value, (str, Path)):
            return value  # already opened
        import retrieval

        return retrieval.open_index(value)


def click_option(o: options.Option) -> click.Option:
    """The click option of ``o``: the same flags, parameter name, help and default (shown in
    ``--help`` when there is one; a required option has none); a ``bool`` option is a flag."""
    common = dict(help=o.help, required=o.required, multiple=o.multiple, metavar=o.metavar)
    if o.type == "bool":
        if o.default:
            common.update(default=True)
        return click.Option([*o.flags, o.name], is_flag=True, **common)
    if o.bare_value is not None:
        common.update(is_flag=False, flag_value=o.bare_value)
    if o.default is not None:
        common.update(show_default=True)
    if not o.required:
        common.update(default=o.default)
    return click.Option([*o.flags, o.name], type=click_type(o), **common)


def click_command(c: options.Command) -> click.Command:
    """The click command of ``c``: its options in their order (under their ``section`` headings,
    if any), calling ``c.run`` with their values; errors naming its parameters name its flags."""
    def callback(**values):
        with flags(c.flags):
            return c.run(options.Values(values))

    callback.__retr_sections__ = _sections([(o.section, o.name) for o in c.options if o.section])
    return SectionedCommand(c.name, callback=callback, params=[click_option(o) for o in c.options], help=c.help,
                            context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})


def _sections(pairs) -> list:
    """[(heading, [parameter names])] in the order the headings first appear."""
    out: dict = {}
    for heading, name in pairs:
        out.setdefault(heading, []).append(name)
    return list(out.items())


# ------------------------------------------------------------------ the kinds' options
def kind_options(where: str):
    """Add the options every registered sub-index kind contributes to a command (``where``:
    ``"index"`` or ``"search"``: each kind's options that apply to it), each kind's under its
    own heading in ``--help`` (with :class:`SectionedCommand`). The command receives their
    values among its keyword arguments and hands them to :func:`kind_values`' users."""
    from retrieval.kinds import known, options_of

    def deco(f):
        declared = [o for kind in known() for o in options_of(kind).options_for(where)]
        names = [o.name for o in declared]
        taken = {p.name for p in getattr(f, "__click_params__", [])}
        twice = sorted({n for n in names if names.count(n) > 1} | (taken & set(names)))
        if twice:  # a programming error of a kind: two kinds declare one option
            raise RuntimeError(f"kinds declare options twice, or options the command has: {twice}")
        # decorators apply bottom-up: the options go last, in the registry's order
        f.__dict__.setdefault("__click_params__", [])
        f.__click_params__[:0] = [click_option(o) for o in reversed(declared)]
        f.__retr_sections__ = _sections([(o.section, o.name) for o in declared])
        return f

    return deco


def kind_flags() -> dict:
    """Every kind's parameter -> flag names, and ``subindexes`` -> the flags that ask for one."""
    from retrieval.kinds import known, options_of

    out, asks = {}, []
    for kind in known():
        o = options_of(kind)
        out.update(o.flags)
        if o.flag:
            asks.append(o.flag)
    out["subindexes"] = " / ".join(asks)
    return out


def each_kind():
    """The registered kinds' :class:`retrieval.kinds.KindOptions`, in registry order."""
    from retrieval.kinds import known, options_of

    return [options_of(k) for k in known()]


def configured_pipeline(idx, retriever, fusion, kind_values) -> tuple:
    """The pipeline spec of ``--retriever``/``--fusion`` with every kind's options applied to ``idx``
    (errors name the flags), and the search arguments those options add: what `retr search` and
    `retr explain` both search with."""
    retriever = asked_retriever(retriever, kind_values)
    with flags(dict(kind_flags(), retriever="--retriever", fusion="--fusion")):
        spec = str(idx.pipeline(retriever, fusion))
        idx.configure(spec, **{key: v for o in each_kind() for key, v in o.configure(kind_values).items()})
        extra = {key: v for o in each_kind() for key, v in o.search_args(kind_values).items()}
    return spec, extra


def asked_retriever(retriever, kind_values):
    """``--retriever``, or the retriever a kind's own flag asks for (Pyserini's ``--bm25``); one error
    line where they disagree."""
    asked = sorted({r for o in each_kind() if (r := o.retriever(kind_values))})
    if not asked:
        return retriever
    ctx = click.get_current_context(silent=True)
    given = ctx is not None and ctx.get_parameter_source("retriever") != click.core.ParameterSource.DEFAULT
    if len(asked) > 1:
        raise click.UsageError(f"flags ask for {' and '.join(asked)}; give --retriever instead")
    if given and retriever != asked[0]:
        raise click.UsageError(f"--retriever {retriever} and the flag asking for {asked[0]} disagree; give one")
    return asked[0]


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists the kinds' options (:func:`kind_options`) under their
    kinds' headings, after the command's own."""

    def format_options(self, ctx, formatter):
        sections = getattr(self.callback, "__retr_sections__", [])
        owned = {n for _, names in sections for n in names}
        params = {p.name: p for p in self.get_params(ctx)}

        def rows(names):  # in the command's order (the order they were declared in)
            return [r for r in (p.get_help_record(ctx) for n, p in params.items() if n in names) if r]

        general = rows([n for n in params if n not in owned])
        if general:
            with formatter.section("Options"):
                formatter.write_dl(general)
        for title, names in sections:
            mine = rows(names)
            if mine:
                with formatter.section(f"{title} options"):
                    formatter.write_dl(mine)


def echo_check_problems(index_dir, rep) -> None:
    """`retr check`'s notes (stderr) and problems (one line each, then exit 1), for a folder or a
    sharded index alike; returns only when there is no problem."""
    for note in rep.notes:
        click.echo(f"note: {note}", err=True)
    if rep.problems:
        for p in rep.problems:  # a problem raised as an error already names the folder
            click.echo(p if str(p).startswith(f"{index_dir}: ") else f"{index_dir}: {p}")
        raise click.exceptions.Exit(1)
