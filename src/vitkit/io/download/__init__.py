"""Downloads into vitkit's cache: resumable, verified, atomic, once per machine.

``fetch(url)`` returns a local path: the cached file if it is still the one downloaded, else a
download over HTTPS, checked and renamed into place (fetch.py). ``hub_file(repo_id,
filename)`` does the same through ``huggingface_hub``, checking the sha256 it does not (hub.py);
``verify(path)`` re-checks a cached file; ``Source`` is a publisher under one base URL, with its
mirror (source.py). Where files go and what is recorded beside them: cache.py. Environment:
``VITKIT_OFFLINE=1`` (or ``HF_HUB_OFFLINE=1``): the cache only; ``VITKIT_<SOURCE>_URL``: a mirror;
``VITKIT_REDIRECT_HOSTS``: other hosts a redirect may go to (never https to http).
"""

from .cache import cached_path, offline, verify
from .fetch import fetch
from .hub import hub_file
from .source import Source

__all__ = ["Source", "cached_path", "fetch", "hub_file", "offline", "verify"]
