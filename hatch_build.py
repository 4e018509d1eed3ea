"""Builds ingest/_osmread, the native PBF reader (ingest/_osmread.cpp), with g++ when the project is installed
(`pip install -e .`, `pip install .`, the loader image). Needs g++, the Python headers and libosmium's headers
(Debian: g++ python3-dev libosmium2-dev libprotozero-dev zlib1g-dev); pybind11 is a build requirement."""

import subprocess
import sysconfig
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class NativeReaderHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        import pybind11

        root = Path(self.root)
        source = root / "ingest" / "_osmread.cpp"
        target = source.with_name("_osmread" + sysconfig.get_config_var("EXT_SUFFIX"))
        # An editable install rebuilds only a changed source; a wheel (the loader image) always builds its own.
        if version != "editable" or not target.exists() or target.stat().st_mtime < source.stat().st_mtime:
            subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-std=c++17", f"-I{pybind11.get_include()}",
                            f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(target), "-lz", "-pthread"],
                           check=True)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["artifacts"].append(str(target.relative_to(root)))
