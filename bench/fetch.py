"""`ingest fetch` benchmark: bytes read and wall time of a download with its checksums, against a plain download
followed by `sha256sum`, from the same local hub in one run.

    .venv/bin/python bench/fetch.py [--total-mb 1000] [--tile-mb 25] [--runs 3] [--work /tmp/gsqa-bench-fetch]
                                    [--json]

The sources: a tile list, DEM-tile-sized files of random bytes (--tile-mb each) and four OSM layer files, about
--total-mb in all, served by testkit/fake_hub.py on 127.0.0.1 (as the tests do; plain HTTP, no Xet). `--runs`
times, alternating which goes first, each into an empty folder:
  ingest fetch DATA                                                        (ours: hashed as each file is written)
  hf download Zoe/GS-QA2-source --repo-type dataset --local-dir DATA && sha256sum DATA/dem/tiles/* DATA/osm/...
                                  (the anchor: huggingface_hub's own download, 8 workers as ours, then each file
                                   read back to be hashed: what `ingest fetch` did before it hashed the stream)
For each: wall time, client CPU and peak memory (bench/measure.py), and the bytes read, from the kernel's I/O
accounting of the command's process tree: rchar counts every byte read() from a file (the data folder, and each
program's own start-up files: the Python modules it imports), not the bytes received from a socket, which are
the bytes the hub sent (the downloads). read_bytes is what the disk itself served: files just written are still
in the page cache, so it stays near 0 on a machine with free memory; rchar is the honest count of what is read
again. So the sources pass once through the socket, and then once more (read back to be hashed) or not at all.
The medians of the runs, with their spread (min-max), and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from bench.measure import medians, run_measured
from ingest.fetch import SOURCE_REPO
from testkit.fake_hub import FakeHub

INGEST = Path(sys.executable).parent / "ingest"
HF = Path(sys.executable).parent / "hf"
LAYERS = ("pois", "roads", "parks_and_lakes", "postal_codes")
LAYER_MB = 10


def source_files(total_mb: float, tile_mb: float) -> dict[str, bytes]:
    """Repository path -> content: tile list, tiles of random bytes, one file per OSM layer."""
    tiles = [f"ASTGTMV003_N{40 + number // 100:02d}W{100 + number % 100:03d}_dem.tif"
             for number in range(max(1, round((total_mb - LAYER_MB * len(LAYERS)) / tile_mb)))]
    files = {"dem/tile_list.txt": "".join(f"{name}\n" for name in tiles).encode()}
    files |= {f"dem/tiles/{name}": os.urandom(int(tile_mb * 2**20)) for name in tiles}
    files |= {f"osm/osm_extract/{layer}/part-00000.geojson": os.urandom(LAYER_MB * 2**20) for layer in LAYERS}
    return files


def bytes_sent(hub: FakeHub, since: int) -> int:
    """Body bytes of the file GETs the hub answered since its request number `since`."""
    total = 0
    for method, path, ranged in hub.requests[since:]:
        if method == "GET":
            total += len(hub.files[path]) - (int(ranged.split("=")[1].split("-")[0]) if ranged else 0)
    return total


def measured(name: str, command: str, hub: FakeHub, env: dict[str, str], work: Path) -> dict:
    """Run `command` (bench/measure.py's run_measured); its wall, CPU, peak memory and bytes read: bash's own
    /proc/PID/io after the command, which holds the command's process tree once bash has reaped it."""
    requests, io_file = len(hub.requests), work / "io.txt"
    run = run_measured(f"{{ {command}; }} 2>/dev/null; status=$?; cat /proc/$$/io > {io_file}; exit $status",
                       name=name, env=env)
    counters = {key: int(value) for key, value in (line.split(": ") for line in io_file.read_text().splitlines())}
    return {"wall_s": run.total.wall_s, "client_cpu_s": run.total.client_cpu_s,
            "peak_rss_mb": run.total.peak_client_rss_mb, "peak_pss_mb": run.total.peak_client_pss_mb,
            "rchar_mb": round(counters["rchar"] / 2**20, 1),
            "downloaded_mb": round(bytes_sent(hub, requests) / 2**20, 1),
            "read_bytes_mb": round(counters["read_bytes"] / 2**20, 1)}


def commands(data: Path, files: dict[str, bytes]) -> dict[str, str]:
    hashed = sorted(str(data / path) for path in files if path.endswith((".tif", ".geojson")))
    return {"ingest fetch": f"{INGEST} fetch {data} --json",
            "hf download + sha256sum": f"{HF} download {SOURCE_REPO} --repo-type dataset --local-dir {data} "
                                       f"--quiet && sha256sum {shlex.join(hashed)}"}


def one_round(hub: FakeHub, files: dict[str, bytes], work: Path, ours_first: bool) -> dict[str, dict]:
    results = {}
    tools = ["ingest fetch", "hf download + sha256sum"]
    for tool in tools if ours_first else tools[::-1]:
        data = work / "data"
        subprocess.run(["rm", "-rf", str(data), str(work / "hf")], check=True)
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint(), "HF_HOME": str(work / "hf"), "HF_HUB_DISABLE_XET": "1"}
        results[tool] = measured(tool, commands(data, files)[tool], hub, env, work)
        missing = [path for path, body in files.items() if (data / path).stat().st_size != len(body)]
        if missing:
            raise SystemExit(f"{tool} left {len(missing)} files missing or short, e.g. {missing[0]}")
    subprocess.run(["rm", "-rf", str(work / "data")], check=True)
    return results


def summary(rounds: list[dict[str, dict]], source_mb: float) -> dict:
    """The medians (bench/measure.py), and per round the bytes each tool read per byte of the source."""
    out = medians(rounds, "hf download + sha256sum", "ingest fetch")
    for tool in rounds[0]:
        out[tool]["files_read_per_source_byte"] = [round(r[tool]["rchar_mb"] / source_mb, 3) for r in rounds]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mb", type=float, default=1000)
    parser.add_argument("--tile-mb", type=float, default=25)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-fetch"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    files = source_files(args.total_mb, args.tile_mb)
    source_mb = sum(len(body) for body in files.values()) / 2**20
    args.work.mkdir(parents=True, exist_ok=True)
    with FakeHub(SOURCE_REPO, files) as hub:
        rounds = [one_round(hub, files, args.work, ours_first=not n % 2) for n in range(args.runs)]
    result = {"source_mb": round(source_mb, 1), "files": len(files), "loadavg_1min": os.getloadavg()[0],
              "rounds": rounds, "median": summary(rounds, source_mb)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['source_mb']} MB in {result['files']} files, {args.runs} rounds (medians; wall min-max); "
          f"load average at the end {result['loadavg_1min']:.2f}")
    header = ("tool", "wall s", "min-max", "CPU s", "max RSS MB", "PSS MB", "socket MB", "read MB", "read/src",
              "disk MB")
    print(f"{header[0]:<24}" + "".join(f"{title:>11}" for title in header[1:]))
    for tool in ("hf download + sha256sum", "ingest fetch"):
        m = result["median"][tool]
        values = (m["wall_s"], f"{m['wall_min_s']}-{m['wall_max_s']}", m["client_cpu_s"], m["peak_rss_mb"],
                  m["peak_pss_mb"], m["downloaded_mb"], m["rchar_mb"], round(m["rchar_mb"] / source_mb, 2),
                  m["read_bytes_mb"])
        print(f"{tool:<24}" + "".join(f"{value:>11}" for value in values))
    print("read: rchar, bytes read() from files; read/src: per byte of the sources; disk: read_bytes")
    print(f"speed-up (ratio of median walls): {result['median']['ratio_of_median_walls']}x; per round: "
          f"{result['median']['ratios_per_round']}")


if __name__ == "__main__":
    main()
