"""Which sandbox sources an image was built from: `make sandbox-image` labels the image with the digest of
this checkout's Dockerfile.sandbox and docker/sandbox/ (the runner, init and the libraries), and serve
refuses `--tools python` on an image whose label differs, since the host and the image's runner must speak
the same protocol (an older runner makes every call `lost`).

Only the standard library: the Makefile runs this file with the system's python3 to print the label
(`python3 reproduce/serve/sandbox_sources.py` prints KEY=DIGEST).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

KEY = "gsqa-refdb.sandbox-sources"
ROOT = Path(__file__).resolve().parents[2]


def digest(root: Path = ROOT) -> str | None:
    """The sha256 of the sandbox sources (each file's name, length and bytes, in name order); None where they
    are not beside the code (an installed package, which cannot build the image either)."""
    dockerfile, folder = root / "Dockerfile.sandbox", root / "docker" / "sandbox"
    if not dockerfile.is_file() or not folder.is_dir():
        return None
    hashed = hashlib.sha256()
    for path in [dockerfile, *sorted(p for p in folder.iterdir() if p.is_file())]:
        content = path.read_bytes()
        hashed.update(f"{path.relative_to(root)}\0{len(content)}\0".encode())
        hashed.update(content)
    return hashed.hexdigest()


if __name__ == "__main__":
    print(f"{KEY}={digest()}")
