"""`retr`: the command-line face of the retrieval package. Thin by design:
this module only wires the commands, which live one module per method beside
it (index_cmds, search_cmds, explain_cmd, dense_cmds, quality_cmds, live_cmds, eval_cmd, train_cmd,
serve_cmds) or declared by a sub-index kind's package (its options.OPTIONS.commands), and turns
every known error into one line."""
from __future__ import annotations

import sys

import click

from indexes.errors import RetrError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _known_errors():
    """The error classes that become one line. eval's is looked up only if eval was imported: a command
    that never touched the evaluator cannot raise it, and importing eval (numpy, ir_measures) would cost
    every one-off `retr search` about 0.1 s."""
    errs = [RetrError]
    ev = sys.modules.get("eval.errors")
    if ev is not None:
        errs.append(ev.EvalError)
    return tuple(errs)


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="retr", prog_name="retr")
def retr():
    """retr: sparse (BM25, DeepCT) and dense retrieval with one index folder,
    one search command and an evaluator that handles partial judgments."""


# ------------------------------------------------------------------ plug-ins
def _register():
    """Every command, each implemented in a sibling module of cli/ (each stays thin too)."""
    import importlib

    for module, attr, parent, name in [
        ("cli.index_cmds", "index_cmd", None, "index"),
        ("cli.index_cmds", "add_cmd", None, "add"),
        ("cli.index_cmds", "info_cmd", None, "info"),
        ("cli.search_cmds", "search_cmd", None, "search"),
        ("cli.search_cmds", "tune_cmd", None, "tune"),
        ("cli.explain_cmd", "explain_cmd", None, "explain"),
        ("cli.eval_cmd", "eval_cmd", None, "eval"),
        ("cli.dense_cmds", "ditto_select", None, "ditto-select"),
        ("cli.dense_cmds", "sts", "eval", "sts"),
        ("cli.train_cmd", "train", None, "train"),
        ("cli.quality_cmds", "quality", None, "quality"),
        ("cli.live_cmds", "update_cmd", None, "update"),
        ("cli.live_cmds", "delete_cmd", None, "delete"),
        ("cli.live_cmds", "compact_cmd", None, "compact"),
        ("cli.live_cmds", "sync_cmd", None, "sync"),
        ("cli.live_cmds", "check_cmd", None, "check"),
        ("cli.serve_cmds", "serve_cmd", None, "serve"),
        ("cli.serve_cmds", "mcp_cmd", None, "mcp"),
    ]:
        cmd = getattr(importlib.import_module(module), attr)
        group = retr if parent is None else retr.commands.get(parent)
        if group is not None and name not in getattr(group, "commands", {}):
            group.add_command(cmd, name=name)
    from cli.params import click_command, each_kind

    for options in each_kind():
        for command in options.commands:  # declared as data (retrieval.options.Command)
            group = retr if command.group is None else retr.commands[command.group]
            if command.name not in group.commands:
                group.add_command(click_command(command))


_register()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that clean-up runs (the Java indexer is stopped,
    unfinished folders are removed)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv=None) -> int:
    """Entry point: every known error becomes one line on stderr and exit code 2."""
    import signal

    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a thread)
        pass
    try:
        rv = retr.main(args=argv, prog_name="retr", standalone_mode=False)
        if isinstance(rv, int) and rv:  # a command's click Exit(code) (retr check: 1 on problems)
            return rv
    except click.exceptions.NoArgsIsHelpError as e:  # pragma: no cover - click >= 8.2
        click.echo(e.ctx.get_help() if e.ctx else str(e))
        return 0
    except click.UsageError as e:
        cmd = e.ctx.command_path if e.ctx else "retr"
        click.echo(f"retr: error: {e.format_message()} (see '{cmd} --help')", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"retr: error: {e.format_message()}", err=True)
        return 2
    except click.exceptions.Abort as e:
        if isinstance(e.__cause__, Terminated):  # click turns a KeyboardInterrupt into Abort
            click.echo("retr: terminated", err=True)
            return 143
        if isinstance(e.__cause__, KeyboardInterrupt):
            click.echo("retr: interrupted", err=True)
            return 130
        click.echo("retr: aborted", err=True)
        return 130
    except Terminated:
        click.echo("retr: terminated", err=True)
        return 143
    except KeyboardInterrupt:
        click.echo("retr: interrupted", err=True)
        return 130
    except _known_errors() as e:
        click.echo(f"retr: error: {e}", err=True)
        return 2
    except OSError as e:  # what the library does not name itself (a full disk, a read-only mount, ...)
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"retr: error: {where}{e.strerror or e}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
