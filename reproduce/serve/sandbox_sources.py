"""Which sandbox sources an image was built from: `make sandbox-image` tags the image (besides `latest`) with
the digest of this checkout's Dockerfile.sandbox and docker/sandbox/ (the runner, init and the libraries), and
serve runs the image of its own checkout's tag, since the host and the image's runner must speak the same
protocol (an older runner makes every call `lost`). A tag per digest, not a label on one shared tag: checkouts of
other versions on one engine (a group's machine, CI beside a developer) build their own, and none retags the
image under another's running server.

Only the standard library: the Makefile runs this file with the system's python3 to print the tag.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG_DIGITS = 16


def tag(root: Path = ROOT) -> str | None:
    """`sources-` and the first TAG_DIGITS hex digits of the sha256 of the sandbox sources (each file's name,
    length and bytes, in name order); None where they are not beside the code (an installed package, which
    cannot build the image either)."""
    dockerfile, folder = root / "Dockerfile.sandbox", root / "docker" / "sandbox"
    if not dockerfile.is_file() or not folder.is_dir():
        return None
    hashed = hashlib.sha256()
    for path in [dockerfile, *sorted(p for p in folder.iterdir() if p.is_file())]:
        content = path.read_bytes()
        hashed.update(f"{path.relative_to(root)}\0{len(content)}\0".encode())
        hashed.update(content)
    return f"sources-{hashed.hexdigest()[:TAG_DIGITS]}"


if __name__ == "__main__":
    print(tag())
