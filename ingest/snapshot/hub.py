"""Snapshots on the Hugging Face hub: a source hf:OWNER/NAME[@REVISION] downloaded into a local folder with
`ingest fetch`'s machinery (fetch.fetch_repository: the hub's checksums, staging, resume), and `ingest snapshot
push`, huggingface_hub's resumable upload of a finished snapshot folder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from gsqa_core.errors import GsqaError
from ingest import fetch
from ingest.snapshot.manifest import CARD, DATA, MANIFEST, read_manifest

# --- sources ---------------------------------------------------------------------------------------------------

HF_PREFIX = "hf:"


def parse_hub_source(source: str) -> tuple[str, str | None]:
    """hf:OWNER/NAME[@REVISION] -> (OWNER/NAME, REVISION or None)."""
    match = re.fullmatch(r"hf:([\w.-]+/[\w.-]+)(?:@([\w./-]+))?", source)
    if match is None:
        raise GsqaError(f"{source}: expected a folder or hf:OWNER/NAME[@REVISION]")
    return match[1], match[2]


def local_folder(source: str, download_to: Path | None, workers: int,
                 announce: Callable[[str], None]) -> Path:
    """The folder holding the snapshot: the source itself, or where a hub source is fetched to (verified
    against the hub's checksums and resumed like `ingest fetch`)."""
    if not source.startswith(HF_PREFIX):
        folder = Path(source)
        if not folder.is_dir():
            raise GsqaError(f"{source}: not a folder (a snapshot is a folder or hf:OWNER/NAME[@REVISION])")
        return folder
    repo, revision = parse_hub_source(source)
    target = download_to or Path("gsqa-snapshots") / repo.replace("/", "--")
    report = fetch.fetch_repository(target, repo, revision, workers=workers)
    announce(f"{source}: {len(report.downloaded)} files downloaded, {len(report.present)} already present "
             f"in {target}")
    if report.failed or report.missing:
        path, reason = next(iter(sorted(report.failed.items())), (None, None))
        detail = f"{path}: {reason}" if path else f"{report.missing[0]} is missing on the hub"
        raise GsqaError(f"{source}: {len(report.failed) + len(report.missing)} files not downloaded (first: {detail}); "
                        "run again to resume")
    return target


# --- push ------------------------------------------------------------------------------------------------------


def push(folder: Path, repo: str, revision: str | None) -> str:
    """The finished snapshot in `folder` as the Hugging Face dataset `repo` (created if missing), its card as
    the repository's README; returns the commit. huggingface_hub's upload_folder is resumable: with hf_xet
    (a dependency of huggingface_hub) it commits in batches as parts are uploaded, and without it the LFS
    batch API skips the parts the hub already holds; so after an interruption the same command goes on."""
    from huggingface_hub import HfApi

    manifest = read_manifest(folder)
    api = HfApi()
    try:
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        commit = api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder, revision=revision,
                                   allow_patterns=[MANIFEST, CARD, f"{DATA}/*"],
                                   commit_message=f"gsqa snapshot of {manifest['created']}")
    except Exception as error:  # noqa: BLE001 - any failure to reach or write the hub is one line
        raise GsqaError(f"cannot push {folder} to the dataset {repo} on the Hugging Face hub ({api.endpoint}): "
                        f"{' '.join(str(error).split()) or type(error).__name__}; run the same command again to "
                        "resume (parts already uploaded are not sent again)") from None
    return commit.oid
