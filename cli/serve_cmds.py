"""`retr serve` (HTTP + MCP) and `retr mcp` (MCP over stdio); the work is in retrieval.server."""
from __future__ import annotations

from pathlib import Path

import click

from cli import params

MAX_RESPONSE_CHARS = 50_000_000  # retrieval.server.guard.MAX_RESPONSE_CHARS (not imported: the CLI loads lazily)


#: retrieval.server.run's parameters -> the flags of retr serve / retr mcp
SERVE_FLAGS = {"index_specs": "--index", "token_file": "--token-file", "max_inflight": "--max-inflight",
               "max_response_chars": "--max-response-chars", "sharded": "--sharded", "ray_address": "--ray-address",
               "replicas": "--replicas"}


def _inflight(f):
    return click.option("--max-inflight", type=click.IntRange(min=1), default=64, show_default=True,
                        help="Requests answered at once (searches, document reads, MCP tool calls together); "
                             "more are refused at once (HTTP 429 with Retry-After, MCP error -32000).")(f)


def _budget(f):
    return click.option("--max-response-chars", type=click.IntRange(min=1), default=MAX_RESPONSE_CHARS,
                        show_default=True,
                        help="The most one response may carry: each hit counts 100 characters plus its title and "
                             "text; a request over it gets 413 (MCP: a tool error), before any search when "
                             "queries x k x (100 + text_chars) already is.")(f)


@click.command("serve")
@click.option("--index", "indexes", multiple=True, metavar="[NAME=]DIR",
              help="An index folder to serve, named NAME (default: the folder's name); repeat for more. A sharded "
                   "index (retr index --shards) is served with its shards in this process.")
@click.option("--sharded", multiple=True, metavar="[NAME=]DIR",
              help="A sharded index whose shards are served as Ray Serve deployments (one per shard, placed on "
                   "the nodes advertising the shard folder's name as a custom resource), this process being their "
                   "router; repeat for more. Not with --index.")
@click.option("--ray-address", default="local", show_default=True, metavar="local|auto|HOST:PORT",
              help="With --sharded: the Ray cluster to deploy the shards on (local: start one on this machine).")
@click.option("--replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --sharded: replicas of each shard (Serve restarts any that dies).")
@click.option("--shard-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="With --sharded: seconds a shard may take to answer before the request fails with 503.")
@click.option("--replica-cpus", type=click.FloatRange(min=0.01), default=0.5, show_default=True,
              help="With --sharded: CPUs each replica reserves on its node.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs --token-file.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--token-file", type=click.Path(path_type=Path), default=None,
              help="File holding the bearer token every endpoint but /healthz then requires.")
@click.option("--writable", is_flag=True, help="Enable adding, updating and deleting documents.")
@_inflight
@_budget
@click.option("--search-threads", type=click.IntRange(1, 256), default=None,
              help="Searches answered at once, in worker threads (the rest wait, within --max-inflight) "
                   "[default: the machine's cores, at least 2].")
@click.option("--no-mcp", is_flag=True, help="Do not mount the MCP endpoint at /mcp.")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="warning",
              show_default=True)
def serve_cmd(indexes, sharded, ray_address, replicas, shard_timeout, replica_cpus, host, port, token_file, writable,
              max_inflight, max_response_chars, search_threads, no_mcp, log_level):
    """Serve index folders over HTTP (JSON API under /v1, OpenAPI at /docs, MCP at /mcp)."""
    from retrieval.server.run import serve

    if not indexes and not sharded:
        raise click.UsageError("give at least one --index or --sharded")
    with params.flags(SERVE_FLAGS):
        serve(indexes, host=host, port=port, token_file=token_file, writable=writable, max_inflight=max_inflight,
              mcp=not no_mcp, log_level=log_level, max_response_chars=max_response_chars,
              search_threads=search_threads, sharded=sharded, ray_address=ray_address, replicas=replicas,
              shard_timeout=shard_timeout, replica_cpus=replica_cpus)


@click.command("mcp")
@click.option("--index", "indexes", multiple=True, required=True, metavar="[NAME=]DIR",
              help="An index folder to serve; repeat for more.")
@_inflight
@_budget
def mcp_cmd(indexes, max_inflight, max_response_chars):
    """Serve index folders as MCP tools (search, get_document, list_indexes) over stdio."""
    from retrieval.server.run import serve_mcp_stdio

    with params.flags(SERVE_FLAGS):
        serve_mcp_stdio(indexes, max_inflight=max_inflight, max_response_chars=max_response_chars)
