"""A real `retr serve` in a child process on 127.0.0.1 (a free port), over real indexes."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`retr serve ARGS` on a free loopback port (run in ``cwd``, default the repository); stopped
    with SIGTERM (then killed) by stop()."""

    def __init__(self, *args, token=None, tmp=None, ready=True, cwd=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        cmd = [sys.executable, "-m", "cli.main", "serve", "--port", str(self.port), *map(str, args)]
        if token:
            tf = tmp / f"token-{self.port}"
            tf.write_text(token + "\n")
            cmd += ["--token-file", str(tf)]
        self.log = open(tmp / f"server-{self.port}.log", "w+")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(cmd, cwd=cwd or ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        path = "/readyz" if ready else "/healthz"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.output()}")
            try:
                if httpx.get(self.url + path, headers=self.headers(), timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server not {path[1:]} in 120 s: {self.output()}")
            time.sleep(0.2)

    def headers(self, token=None):
        t = token or self.token
        return {"Authorization": f"Bearer {t}"} if t else {}

    def post(self, path, json=None, token=None, **kw):
        return httpx.post(self.url + path, json=json, headers=self.headers(token), timeout=120, **kw)

    def client_put(self, path, json=None, token=None):
        return httpx.put(self.url + path, json=json, headers=self.headers(token), timeout=120)

    def get(self, path, token=None, **kw):
        return httpx.get(self.url + path, headers=self.headers(token), timeout=120, **kw)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def stalled_request(server, path="/v1/sf/search"):
    """A request whose headers are in and whose body is not: it holds one in-flight slot."""
    body = json.dumps({"query": "aspirin colorectal cancer", "k": 3}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in server.headers().items()) +
            "\r\n").encode()
    s.sendall(head + body[:5])
    return s, body[5:]


def finish(sock, rest) -> str:
    sock.sendall(rest)
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < int(
            [l for l in data.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1]):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return data.decode("utf-8", "replace")


@pytest.fixture(scope="session")
def token():
    return secrets.token_hex(16)


@pytest.fixture(scope="session")
def server(tmp_path_factory, meta_index, meta_dense_index, token):
    """Read-only, with a token: sf = BM25 with metadata, hy = BM25 + dense with metadata."""
    s = Server("--index", f"sf={meta_index.path}", "--index", f"hy={meta_dense_index.path}", token=token,
               tmp=tmp_path_factory.mktemp("srv"))
    yield s
    s.stop()


@pytest.fixture
def writable_copy(tmp_path, meta_index):
    """A private copy of the BM25 metadata index, for writes."""
    dst = tmp_path / "W"
    shutil.copytree(meta_index.path, dst)
    return dst
