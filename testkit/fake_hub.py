"""A local stand-in for the Hugging Face hub (tests, bench/make_db.py): the endpoints huggingface_hub uses to
list and download a dataset (repository info, the file tree, HEAD and GET of /resolve/ with Range), those
`upload_folder` uses without Xet (create the repository, preupload, the LFS batch API and its PUTs, commit),
and faults to inject per file.

Tests point huggingface_hub at it with HF_ENDPOINT. It listens on all interfaces so that a container (the
loader of `make db`) can reach it through the Docker bridge too.
"""

from __future__ import annotations

import base64
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
    slow_uploads: float = 0.0  # seconds before each LFS upload is answered
    ignore_range: set[str] = field(default_factory=set)  # a GET with Range gets the whole file (200), as a CDN may


class FakeHub:
    def __init__(self, repo: str, files: dict[str, bytes], lfs_suffixes: tuple[str, ...] = (".tif", ".geojson"),
                 host: str = "127.0.0.1") -> None:
        self.repo, self.files, self.lfs_suffixes = repo, files, lfs_suffixes
        self.faults = Faults()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> content, uploaded and not yet committed or committed
        self.uploads: list[str] = []  # the sha256 of every LFS upload received, in order
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                hub._route(self, send_body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                hub._route(self, send_body=False)

            def do_POST(self) -> None:  # noqa: N802
                hub._upload_route(self)

            def do_PUT(self) -> None:  # noqa: N802
                hub._upload_route(self)

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

    def _upload_route(self, handler: BaseHTTPRequestHandler) -> None:
        path, body = handler.path.split("?")[0], _request_body(handler)
        api = f"/api/datasets/{self.repo}"
        if path in ("/api/repos/create", "/api/validate-yaml"):
            self._json(handler, {"url": f"{self.endpoint()}/datasets/{self.repo}"}, True)
        elif path.startswith(f"{api}/preupload/"):
            files = [{"path": item["path"], "uploadMode": "lfs" if item["size"] else "regular", "shouldIgnore": False}
                     for item in json.loads(body)["files"]]
            self._json(handler, {"files": files}, True)
        elif path == f"/datasets/{self.repo}.git/info/lfs/objects/batch":
            objects = [{"oid": item["oid"], "size": item["size"]} | ({} if item["oid"] in self.lfs_objects else {
                "actions": {"upload": {"href": f"{self.endpoint()}/lfs-upload/{item['oid']}"}}})
                for item in json.loads(body)["objects"]]
            self._json(handler, {"transfer": "basic", "objects": objects}, True)
        elif path.startswith("/lfs-upload/"):
            time.sleep(self.faults.slow_uploads)
            self.lfs_objects[hashlib.sha256(body).hexdigest()] = body
            self.uploads.append(hashlib.sha256(body).hexdigest())
            self._json(handler, {}, True)
        elif path.startswith(f"{api}/commit/"):
            self._commit([json.loads(line) for line in body.splitlines() if line.strip()])
            self._json(handler, {"commitUrl": f"{self.endpoint()}/datasets/{self.repo}/commit/{COMMIT}",
                                 "commitOid": COMMIT, "pullRequestUrl": None}, True)
        else:
            handler.send_response(404)
            handler.send_header("Content-Length", "0")
            handler.end_headers()

    def _commit(self, operations: list[dict]) -> None:
        for operation in operations:
            value = operation["value"]
            if operation["key"] == "lfsFile":
                self.files[value["path"]] = self.lfs_objects[value["oid"]]
            elif operation["key"] == "file":
                self.files[value["path"]] = base64.b64decode(value["content"])

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
        honoured = ranged and send_body and name not in self.faults.ignore_range
        start = int(ranged.split("=")[1].split("-")[0]) if honoured else 0
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


def _request_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request's body, sent with a length or in chunks."""
    if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    body = bytearray()
    while size := int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16):
        body += handler.rfile.read(size)
        handler.rfile.readline()
    handler.rfile.readline()
    return bytes(body)
