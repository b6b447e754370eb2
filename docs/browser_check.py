"""The built site as a reader sees it, in a real browser: Debian's Chromium driven headless through
chromedriver (Selenium). For the home page, Getting started, one guide and the pages ``vitkit
inspect`` writes of a grey model and of a colour one (``make_figures.py``):

- every image loads (``naturalWidth > 0``);
- the browser's console shows no error;
- every link into the site resolves (the served file exists);
- no text names a folder of this machine (the temporary folder ``make_figures.py`` trains in, the
  home folder, the working directory): a page is shared;
- a screenshot is saved.

And on every page of the site, no code block is wider than its box (its lines' ends hidden behind a
scroll bar: docs/stylesheets/extra.css wraps them).

    .venv/bin/python docs/browser_check.py site --shots site-check

The site is served from a thread of this process on 127.0.0.1 only. Where Chromium, its driver or
Selenium is missing, the check says so in one line and is skipped (exit 0); any failure is a line
each, and exit 1.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PAGES = (
    "index.html",
    "getting-started/index.html",
    "guides/inspection/index.html",
    "generated/inspect/index.html",  # a grey model's (Fashion-MNIST)
    "generated/inspect-colour/index.html",  # a colour model's: the maps drawn on colour images
)
# the flags that keep a headless Chromium off a closed network: it would otherwise try Google's
# services at start, and every refused connection is a console error
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1280,2000",
)  # fmt: skip
# the first line of each code block whose content is wider than its box (Material scrolls it)
CLIPPED = """return Array.from(document.querySelectorAll('pre > code'))
    .filter(c => c.scrollWidth > c.clientWidth).map(c => c.textContent.split('\\n')[0])"""


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # argparse's name
        pass


def _why_not() -> str | None:
    """Why the check cannot run here (None: it can)."""
    for program in ("chromium", "chromedriver"):
        if shutil.which(program) is None:
            return f"{program} not found (Debian: apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed (pip install 'vitkit[docs]')"
    return None


def _resolves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status == 200
    except urllib.error.URLError:
        return False


def check_page(driver: Any, base: str, page: str, shots: Path) -> list[str]:
    """The failures of one page, each a line; its screenshot saved in ``shots``."""
    driver.get(base + page)
    driver.execute_script("return document.readyState")
    failures = []
    images = driver.execute_script(
        "return Array.from(document.images).map(i => [i.currentSrc || i.src, i.naturalWidth])"
    )
    failures += [f"{page}: image {src} did not load" for src, width in images if not width]
    for entry in driver.get_log("browser"):
        if entry["level"] == "SEVERE":
            failures.append(f"{page}: console error: {entry['message']}")
    links = driver.execute_script(
        "return Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"
    )
    inside = sorted({urllib.parse.urldefrag(link)[0] for link in links if link.startswith(base)})
    failures += [f"{page}: link {link} does not resolve" for link in inside if not _resolves(link)]
    text = driver.execute_script("return document.body.innerText")
    local = {tempfile.gettempdir(), str(Path.home()), str(Path.cwd())}
    failures += [f"{page}: names this machine's folder {path}" for path in local if path in text]
    name = page.replace("/", "_").removesuffix(".html")
    driver.save_screenshot(str(shots / f"{name}.png"))
    print(f"{page}: {len(images)} images, {len(inside)} links into the site, screenshot {name}.png")
    return failures


def clipped_code(driver: Any, base: str, page: str) -> list[str]:
    """A line for each code block of a page that is wider than its box."""
    driver.get(base + page)
    return [f"{page}: code block clipped: {line[:60]}" for line in driver.execute_script(CLIPPED)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build's site_dir)")
    parser.add_argument("--shots", type=Path, default=Path("site-check"), help="screenshots")
    args = parser.parse_args(argv)
    why = _why_not()
    if why is not None:
        print(f"browser check skipped: {why}")
        return 0
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    args.shots.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(_Quiet, directory=str(args.site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    failures: list[str] = []
    every = sorted(p.relative_to(args.site).as_posix() for p in args.site.rglob("index.html"))
    with tempfile.TemporaryDirectory() as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        try:
            for page in PAGES:
                failures += check_page(driver, base, page, args.shots)
            for page in every:
                failures += clipped_code(driver, base, page)
        finally:
            driver.quit()
            server.shutdown()
    for failure in failures:
        print(failure, file=sys.stderr)
    print(
        f"browser check: {len(PAGES)} pages, the code blocks of {len(every)}, {len(failures)} "
        f"failures; screenshots in {args.shots}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
