"""A local stand-in for the Hugging Face hub (tests, bench/make_db.py): the endpoints huggingface_hub uses to
list and download a dataset (repository info, the file tree, HEAD and GET of /resolve/ with Range), and faults
to inject per file.

Tests point huggingface_hub at it with HF_ENDPOINT. It listens on all interfaces so that a container (the
loader of `make db`) can reach it through the Docker bridge too.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "c" * 40


def repository_files(root: Path, leave_out: frozenset[str] = frozenset()) -> dict[str, bytes]:
    """Repository path -> content of every file under `root` (but those named in `leave_out`), to serve."""
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file() and path.name not in leave_out}


def git_blob_id(body: bytes) -> str:
    return hashlib.sha1(f"blob {len(body)}\0".encode() + body).hexdigest()  # noqa: S324 - git's object id


@dataclass
class Faults:
    """What goes wrong, per repository path."""

    drop_midway: set[str] = field(default_factory=set)  # the first GET sends half the body, then hangs up
    server_errors: Counter = field(default_factory=Counter)  # path -> how many GETs answer 500 first
    corrupt: set[str] = field(default_factory=set)  # the tree lists the real checksum, GET serves other bytes
    unlisted: set[str] = field(default_factory=set)  # kept out of the tree and answered 404
    slow: dict[str, float] = field(default_factory=dict)  # path -> seconds per 64 kB chunk


class FakeHub:
    def __init__(self, repo: str, files: dict[str, bytes], lfs_suffixes: tuple[str, ...] = (".tif", ".geojson"),
                 host: str = "127.0.0.1") -> None:
        self.repo, self.files, self.lfs_suffixes = repo, files, lfs_suffixes
        self.faults = Faults()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                hub._route(self, send_body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                hub._route(self, send_body=False)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that hangs up mid-file (a killed fetch) is part of the tests

        self.server = Server((host, 0), Handler)
        self.port = self.server.server_port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def endpoint(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def gets(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of one file, in order."""
        return [ranged for method, requested, ranged in self.requests if method == "GET" and requested == path]

    def _tree_entry(self, path: str, body: bytes) -> dict:
        entry = {"type": "file", "path": path, "size": len(body), "oid": git_blob_id(body)}
        if path.endswith(self.lfs_suffixes):
            entry["lfs"] = {"oid": hashlib.sha256(body).hexdigest(), "size": len(body), "pointerSize": 130}
        return entry

    def _listed(self) -> dict[str, bytes]:
        return {path: body for path, body in self.files.items() if path not in self.faults.unlisted}

    def _route(self, handler: BaseHTTPRequestHandler, send_body: bool) -> None:
        path = handler.path.split("?")[0]
        api = f"/api/datasets/{self.repo}"
        resolve = f"/datasets/{self.repo}/resolve/{COMMIT}/"
        if path in (api, f"{api}/revision/{COMMIT}", f"{api}/revision/main"):
            info = {"id": self.repo, "sha": COMMIT, "siblings": [{"rfilename": name} for name in self._listed()]}
            self._json(handler, info, send_body)
        elif path.startswith(f"{api}/tree/{COMMIT}"):
            prefix = path[len(f"{api}/tree/{COMMIT}"):].strip("/")
            tree = [self._tree_entry(name, body) for name, body in sorted(self._listed().items())
                    if not prefix or name.startswith(prefix + "/")]
            self._json(handler, tree, send_body)
        elif path.startswith(resolve) and path[len(resolve):] in self._listed():
            self._file(handler, path[len(resolve):], send_body)
        else:
            handler.send_response(404)
            handler.send_header("X-Error-Code", "EntryNotFound")
            handler.send_header("Content-Length", "0")
            handler.end_headers()

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, payload: object, send_body: bool) -> None:
        body = json.dumps(payload).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if send_body:
            handler.wfile.write(body)

    def _file(self, handler: BaseHTTPRequestHandler, name: str, send_body: bool) -> None:
        body = self.files[name]
        ranged = handler.headers.get("Range")
        self.requests.append(("GET" if send_body else "HEAD", name, ranged))
        if send_body and self.faults.server_errors[name] > 0:
            self.faults.server_errors[name] -= 1
            handler.send_response(500)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        entry = self._tree_entry(name, body)
        etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
        served = b"X" * len(body) if name in self.faults.corrupt else body
        start = int(ranged.split("=")[1].split("-")[0]) if ranged and send_body else 0
        handler.send_response(206 if start else 200)
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", f'"{etag}"')
        handler.send_header("Content-Length", str(len(served) - start))
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(served) - 1}/{len(served)}")
        handler.end_headers()
        if not send_body:
            return
        if name in self.faults.drop_midway:
            self.faults.drop_midway.discard(name)
            handler.wfile.write(served[start:start + (len(served) - start) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            return
        delay = self.faults.slow.get(name, 0.0)
        for offset in range(start, len(served), 65536):
            handler.wfile.write(served[offset:offset + 65536])
            if delay:
                handler.wfile.flush()
                time.sleep(delay)
