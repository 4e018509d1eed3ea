"""Synthetic GeoTIFFs with the exact ASTER GDEM v3 geometry, for the demo data, tests and benchmarks.

The files have the name, size, pixel size and corner of gsqa_core.dem_grid, Int16 in EPSG:4326. The
terrain is spectral (smooth relief with a 1/f^2 spectrum, 180-330 m) plus metre-scale noise: neither
constant nor pure noise, because TOAST compression depends on it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.transform import Affine

from gsqa_core.dem_grid import ASTER_SIZE, PIXEL, aster_origin


def aster_name(lat: int, lon: int) -> str:
    """ASTGTMV003_N41W088_dem.tif for the cell whose SW corner is (lon, lat)."""
    ns, ew = ("N" if lat >= 0 else "S"), ("E" if lon >= 0 else "W")
    return f"ASTGTMV003_{ns}{abs(lat):02d}{ew}{abs(lon):03d}_dem.tif"


def aster_transform(lat: int, lon: int) -> Affine:
    x, y = aster_origin(lat, lon)
    return Affine(PIXEL, 0.0, x, 0.0, -PIXEL, y)


def spectral_terrain(
    size: int, seed: int, noise_m: float = 1.5, low_m: float = 180, relief_m: float = 150
) -> np.ndarray:
    """Int16 heights: a smooth random surface scaled to `low_m`..`low_m + relief_m` (default 180-330 m, gentle
    terrain) plus Gaussian noise of `noise_m`."""
    rng = np.random.default_rng(seed)
    freq_y = np.fft.fftfreq(size)[:, None]
    freq_x = np.fft.rfftfreq(size)[None, :]
    power = 1.0 / np.maximum(freq_x**2 + freq_y**2, (1 / size) ** 2)
    spectrum = (rng.standard_normal(power.shape) + 1j * rng.standard_normal(power.shape)) * power
    surface = np.fft.irfft2(spectrum, s=(size, size))
    surface = low_m + relief_m * (surface - surface.min()) / (np.ptp(surface) or 1)
    surface += rng.normal(0.0, noise_m, surface.shape)
    return np.rint(surface).astype(np.int16)


def write_aster_tile(
    folder: Path,
    lat: int,
    lon: int,
    data: np.ndarray | None = None,
    *,
    nodata: int | None = None,
    seed: int = 0,
    size: int = ASTER_SIZE,
    crs: str = "EPSG:4326",
    dtype: str = "int16",
) -> Path:
    """Write one ASTER-like GeoTIFF (uncompressed strips, like raster2pgsql's fastest input)."""
    if data is None:
        data = spectral_terrain(size, seed)
    path = Path(folder) / aster_name(lat, lon)
    profile = {
        "driver": "GTiff", "width": data.shape[1], "height": data.shape[0], "count": 1, "dtype": dtype,
        "crs": crs, "transform": aster_transform(lat, lon), "nodata": nodata,
    }
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data.astype(dtype), 1)
    return path


def cheap_terrain(size: int, seed: int) -> np.ndarray:
    """Deterministic, non-constant Int16 heights that are fast to make (tests): ridges plus a seeded ramp."""
    rows, cols = np.indices((size, size), dtype=np.int32)
    return ((rows * 7 + cols * 3 + seed * 101) % 997 + (rows // 97) * 5 - 50).astype(np.int16)
