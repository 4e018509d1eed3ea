"""Builds ingest/osm/pbf/_osmread, the native PBF reader (ingest/osm/pbf/_osmread.cpp), with g++ when the project
is installed (`pip install -e .`, `pip install .`, the loader image). It needs g++, the Python headers and
libosmium's headers (Debian: g++ python3-dev libosmium2-dev libprotozero-dev zlib1g-dev, the `native` group of
system-packages.txt); pybind11 is a build requirement. Without them the install goes on without the module,
after one line saying why: `ingest osm FILE.osm.pbf` then reads with pyosmium (the same rows, slower), and
`reproduce` never needs either."""

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGES = "g++ python3-dev libosmium2-dev libprotozero-dev zlib1g-dev"


class NativeReaderHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        source = root / "ingest" / "osm" / "pbf" / "_osmread.cpp"
        target = source.with_name("_osmread" + sysconfig.get_config_var("EXT_SUFFIX"))
        # An editable install rebuilds only a changed source; a wheel (the loader image) always builds its own.
        if version != "editable" or not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
            target.unlink(missing_ok=True)
            why = _compile(source, target)
            if why:
                print(f"gsqa-refdb: the native PBF reader was not built ({why}); `ingest osm FILE.osm.pbf` will read "
                      f"with pyosmium (the same rows, slower). For it: apt-get install {PACKAGES}, then install "
                      "again", file=sys.stderr)
                return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].append(str(target.relative_to(root)))


def _compile(source: Path, target: Path) -> str | None:
    """None once `target` is built, else why not, in a few words."""
    import pybind11

    if shutil.which("g++") is None:
        return "no g++"
    built = subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-std=c++17", f"-I{pybind11.get_include()}",
                            f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(target), "-lz", "-pthread"],
                           capture_output=True, text=True)
    if built.returncode == 0:
        return None
    missing = re.search(r"fatal error: ([\w/.+-]+): No such file", built.stderr)
    if missing:
        return f"the header {missing.group(1)} is missing"
    first = next((line for line in built.stderr.splitlines() if "error" in line), built.stderr.strip()[:200])
    return f"g++ failed: {first.strip()}"
