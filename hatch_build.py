"""Builds the native modules of `ingest osm` with g++ when the project is installed (`pip install -e .`,
`pip install .`, the loader image): ingest/osm/pbf/_osmread, the native PBF reader (libosmium), and
ingest/osm/_lines, the native GeoJSON lines encoder (simdjson); both share ingest/osm/copy_rows.hpp. They need
g++, the Python headers and their libraries' headers (Debian: the `native` group of system-packages.txt);
pybind11 is a build requirement. Each builds on its own: without its headers the install goes on without that
module, after one line saying why, and `ingest osm` does that work in Python (the same rows, slower);
`reproduce` never needs either."""

import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


@dataclass(frozen=True)
class Native:
    what: str
    source: str  # under ingest/osm, which is also where its shared headers are
    libraries: tuple[str, ...]
    packages: str  # Debian, apt-get install (system-packages.txt, native)
    otherwise: str  # what `ingest osm` does without it


MODULES = (
    Native("the native PBF reader", "pbf/_osmread.cpp", ("-lz", "-pthread"),
           "g++ python3-dev libosmium2-dev libprotozero-dev zlib1g-dev",
           "`ingest osm FILE.osm.pbf` will read with pyosmium (the same rows, slower)"),
    Native("the native GeoJSON lines encoder", "_lines.cpp", ("-lsimdjson",), "g++ python3-dev libsimdjson-dev",
           "`ingest osm DIR` will encode GeoJSON lines in Python (the same rows, slower)"),
)


class NativeReaderHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        folder = root / "ingest" / "osm"
        for native in MODULES:
            source = folder / native.source
            target = source.with_name(source.stem + sysconfig.get_config_var("EXT_SUFFIX"))
            newest = max(path.stat().st_mtime for path in [source, *folder.glob("*.hpp")])
            # An editable install rebuilds only a changed module; a wheel (the loader image) always builds its own.
            if version != "editable" or not target.exists() or target.stat().st_mtime < newest:
                target.unlink(missing_ok=True)
                why = _compile(source, target, folder, native.libraries)
                if why:
                    print(f"gsqa-refdb: {native.what} was not built ({why}); {native.otherwise}. For it: "
                          f"apt-get install {native.packages}, then install again", file=sys.stderr)
                    continue
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["artifacts"].append(str(target.relative_to(root)))


def _compile(source: Path, target: Path, include: Path, libraries: tuple[str, ...]) -> str | None:
    """None once `target` is built, else why not, in a few words."""
    import pybind11

    if shutil.which("g++") is None:
        return "no g++"
    built = subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-std=c++17", f"-I{pybind11.get_include()}",
                            f"-I{sysconfig.get_paths()['include']}", f"-I{include}", str(source), "-o", str(target),
                            *libraries], capture_output=True, text=True)
    if built.returncode == 0:
        return None
    missing = re.search(r"fatal error: ([\w/.+-]+): No such file", built.stderr)
    if missing:
        return f"the header {missing.group(1)} is missing"
    first = next((line for line in built.stderr.splitlines() if "error" in line), built.stderr.strip()[:200])
    return f"g++ failed: {first.strip()}"
