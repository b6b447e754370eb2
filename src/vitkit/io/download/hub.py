"""``hub_file(repo_id, filename)``: a file of the Hugging Face Hub through ``huggingface_hub``
(the ``hub`` extra), with the sha256 check it does not make.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import DownloadError, MissingExtraError
from .cache import digests, offline

_SHA256 = re.compile(r"[0-9a-f]{64}")


def hub_file(repo_id: str, filename: str, *, revision: str | None = None) -> Path:
    """A file of a Hugging Face Hub model repository, through ``huggingface_hub.hf_hub_download``
    and its cache (``HF_HOME``, ``HF_TOKEN``, ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` apply as
    there; ``VITKIT_OFFLINE=1`` too).

    The file's sha256 is checked against its LFS ETag (the name of its blob in the cache) at
    every call: a fresh download that does not match is deleted, a cached file that no longer
    matches is an error saying which file to delete. Errors (offline, no such repository,
    revision or file, a gated repository) are one-line ``DownloadError``s."""
    try:
        import huggingface_hub
        from huggingface_hub import constants
        from huggingface_hub import errors as hf
    except ImportError:
        raise MissingExtraError(
            "downloading from the Hugging Face Hub", "hub", "huggingface_hub"
        ) from None
    where = f"{repo_id}/{filename}" + (f"@{revision}" if revision else "")
    no_network = offline()
    try:
        before = huggingface_hub.try_to_load_from_cache(repo_id, filename, revision=revision)
        path = Path(
            huggingface_hub.hf_hub_download(
                repo_id, filename, revision=revision, local_files_only=no_network
            )
        )
    except hf.GatedRepoError:
        raise DownloadError(
            f"{repo_id} is a gated repository: accept its terms at {constants.ENDPOINT}/{repo_id} "
            "with your account and set HF_TOKEN (or run `hf auth login`)"
        ) from None
    except hf.RepositoryNotFoundError:
        raise DownloadError(
            f"no repository {repo_id} on the Hugging Face Hub ({constants.ENDPOINT}), or it is "
            "private: check the name, or set HF_TOKEN"
        ) from None
    except hf.RevisionNotFoundError:
        raise DownloadError(
            f"{repo_id} on the Hugging Face Hub has no revision {revision or 'main'}"
        ) from None
    except hf.LocalEntryNotFoundError as e:
        if no_network or constants.HF_HUB_OFFLINE:
            why = "offline mode is on (VITKIT_OFFLINE or HF_HUB_OFFLINE)"
        else:  # huggingface_hub raises it from what its request met
            cause = f" ({_brief(e.__cause__)})" if e.__cause__ is not None else ""
            why = f"the Hub at {constants.ENDPOINT} cannot be reached{cause}"
        raise DownloadError(
            f"{where} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}; "
            f"`hf download {repo_id} {filename}` on a machine that reaches the Hub fills such a "
            "cache: copy it into this one, or point HF_HOME at it"
        ) from None
    except hf.EntryNotFoundError:
        raise DownloadError(
            f"{repo_id} on the Hugging Face Hub has no file {filename}"
            + (f" at revision {revision}" if revision else "")
        ) from None
    except hf.HFValidationError as e:
        raise DownloadError(f"not a Hugging Face Hub file: {where} ({_brief(e)})") from None
    except OSError as e:  # HfHubHTTPError (an HTTP error) included
        raise DownloadError(
            f"downloading {where} from the Hugging Face Hub failed: {_brief(e)}"
        ) from None
    # Fresh: not the file that was in the cache before the call (none, or another revision's).
    fresh = not (isinstance(before, str) and os.path.realpath(before) == os.path.realpath(path))
    _check_hub_file(path, where, fresh=fresh)
    return path


def _brief(e: BaseException) -> str:
    """An error's message in one line: its first two non-empty lines (huggingface_hub's start
    with the status, then what was not found)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return " ".join(lines[:2]) if lines else type(e).__name__


def _check_hub_file(path: Path, where: str, *, fresh: bool) -> None:
    """Check a Hub file against its LFS ETag (its sha256), which names its blob in the cache
    (``snapshots/<commit>/<file>`` links to ``blobs/<etag>``). Files kept in git have a git-sha1
    ETag: nothing to check. Without symlinks (``HF_HUB_DISABLE_SYMLINKS``) the file is the blob,
    its ETag is not on disk, and only the size ``huggingface_hub`` checks applies."""
    if not path.is_symlink():
        return
    blob = path.resolve()
    etag = blob.name
    if not _SHA256.fullmatch(etag):
        return
    found, _ = digests(blob)
    if found == etag:
        return
    if fresh:
        blob.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        raise DownloadError(
            f"the download of {where} is corrupted: sha256 {found}, the Hub's ETag is {etag}; "
            "it was deleted, run again to download it afresh"
        )
    raise DownloadError(
        f"{path} changed since it was downloaded: its sha256 is {found}, the Hub's ETag is "
        f"{etag}; delete {blob} to download it again"
    )
