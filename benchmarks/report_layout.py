"""The report in a real browser: headless Chromium renders report.html at a desktop and a phone width, and says
whether the page scrolls sideways, which elements stick out, and how tall the privacy cards are.

    python benchmarks/report_layout.py results/quickstart/report.html [--widths 1280 390] [--screenshots DIR]

Needs Chromium (Debian: ``apt-get install -y chromium``). Each width is rendered inside an iframe of exactly that
width in a wrapper page, because headless Chromium keeps its window at least 500 px wide (a ``--window-size`` of
390 would lay the page out at 500 px and hide a phone's overflow). A script in the wrapper measures, after the
report has loaded:

* ``scroll_width`` against ``inner_width``: the page overflows sideways when the first exceeds the second;
* ``offenders``: elements whose right edge passes the viewport and that no horizontally scrolling box holds;
* ``card_heights``: the height of every privacy card (even rows read as a grid, not as a ragged list);
* ``images``: every figure's displayed width and the width of the PNG it shows (which source of a ``<picture>``
  the browser chose at that width);
* ``run_rows``, ``hidden_run_rows`` and ``heads_shown``: the rows of the tables of runs, how many of them the page
  does not show, and how many of those tables show their head row (a phone shows each cell's head beside it).

With ``--screenshots`` it also writes ``report-<width>.png`` of the whole page at each width (a page taller than
Chromium draws in one picture comes in parts, ``report-<width>-1.png``, ``-2``, ...). Exit status 1 when a width
overflows. tests/reporting/test_report_layout.py runs the same check on a report made of hand-made records
and skips when Chromium is absent.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["find_chromium", "measure", "screenshot", "check_report"]

_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
          "--allow-file-access-from-files")    # the wrapper reads the report's DOM in its iframe (file://)

# Runs in the wrapper once the iframe has loaded; writes its findings into an attribute that --dump-dom prints.
_MEASURE = """
const frame = document.getElementById('report');
frame.addEventListener('load', () => {
  const win = frame.contentWindow, doc = frame.contentDocument, root = doc.documentElement;
  const width = win.innerWidth;
  const scrolls = (el) => { for (let e = el.parentElement; e; e = e.parentElement) {
      const o = win.getComputedStyle(e).overflowX; if ((o === 'auto' || o === 'scroll') && e !== root && e !== doc.body)
        return true; } return false; };
  const offenders = [];
  for (const el of doc.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 0.5 && !scrolls(el))
      offenders.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : '')
                     + ' right=' + Math.round(r.right));
  }
  const cards = [...doc.querySelectorAll('.card')].map(c => Math.round(c.getBoundingClientRect().height));
  const rows = [...doc.querySelectorAll('table.stack tbody tr')];
  const heads = [...doc.querySelectorAll('table.stack thead')];
  const images = [...doc.querySelectorAll('img')].map(i => ({alt: i.alt,
                                                              shown: Math.round(i.getBoundingClientRect().width),
                                                              natural: i.naturalWidth}));
  document.body.setAttribute('data-layout', JSON.stringify({scroll_width: root.scrollWidth, inner_width: width,
    scroll_height: root.scrollHeight, offenders: offenders.slice(0, 20), card_heights: cards, images: images,
    run_rows: rows.length, hidden_run_rows: rows.filter(r => r.getBoundingClientRect().height === 0).length,
    heads_shown: heads.filter(h => h.getBoundingClientRect().height > 0).length}));
});
"""


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


# The tallest picture one screenshot takes; a longer page is taken in parts of this height.
MAX_SHOT_HEIGHT = 16000


def _wrapper(report: Path, width: int, height: int, folder: Path, offset: int = 0) -> Path:
    """A page holding the report in an iframe ``width`` x ``height`` CSS px, shifted up by ``offset`` px (so that a
    window shows the part of the report from ``offset`` down)."""
    page = folder / f"wrapper-{width}.html"
    page.write_text(
        '<!doctype html><html><head><meta charset="utf-8"></head><body style="margin:0;overflow:hidden">'
        f'<iframe id="report" src="{html.escape(report.resolve().as_uri())}" '
        f'style="width:{width}px;height:{height}px;border:0;display:block;margin-top:-{offset}px"></iframe>'
        f"<script>{_MEASURE}</script></body></html>", encoding="utf-8")
    return page


def _chromium(binary: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="dpmed-chromium-") as profile:   # a fresh profile every time
        return subprocess.run([binary, *_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, check=False)


def measure(report: Path, width: int, *, binary: str | None = None, timeout: float = 120) -> dict:
    """The layout of ``report`` at ``width`` CSS pixels (see the module docstring)."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="dpmed-layout-") as tmp:
        page = _wrapper(Path(report), width, 900, Path(tmp))
        done = _chromium(binary, ["--window-size=1400,1000", "--virtual-time-budget=5000", "--dump-dom",
                                  page.as_uri()], timeout)
    found = re.search(r'data-layout="([^"]*)"', done.stdout)
    if not found:
        raise RuntimeError(f"chromium measured nothing at width {width} (exit {done.returncode}): "
                           f"{done.stderr.strip()[-500:]}")
    result = json.loads(html.unescape(found.group(1)))
    result["overflows"] = result["scroll_width"] > result["inner_width"]
    return result


def screenshot(report: Path, width: int, path: Path, *, height: int, offset: int = 0, binary: str | None = None,
               timeout: float = 180) -> Path:
    """A PNG of the report laid out at ``width``: ``height`` CSS pixels of it from ``offset`` down."""
    binary = binary or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="dpmed-layout-") as tmp:
        page = _wrapper(Path(report), width, offset + height, Path(tmp), offset)
        _chromium(binary, [f"--window-size={width},{height}", "--virtual-time-budget=5000",
                           f"--screenshot={Path(path).resolve()}", page.as_uri()], timeout)
    if not Path(path).is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {path}")
    return Path(path)


def check_report(report: Path, widths=(1280, 390), screenshots: Path | None = None) -> dict[int, dict]:
    """:func:`measure` at every width, and screenshots where asked."""
    out = {}
    for width in widths:
        out[width] = measure(report, width)
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            total = int(out[width]["scroll_height"]) + 10
            offsets = list(range(0, total, MAX_SHOT_HEIGHT))
            names = ([f"report-{width}.png"] if len(offsets) == 1
                     else [f"report-{width}-{k}.png" for k in range(1, len(offsets) + 1)])
            out[width]["screenshots"] = [
                str(screenshot(report, width, screenshots / name, offset=offset,
                               height=min(MAX_SHOT_HEIGHT, total - offset)))
                for name, offset in zip(names, offsets)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--widths", type=int, nargs="+", default=[1280, 390])
    parser.add_argument("--screenshots", type=Path, default=None, help="folder for report-<width>.png")
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print("no chromium on PATH (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    results = check_report(args.report, args.widths, args.screenshots)
    for width, r in results.items():
        verdict = "OVERFLOWS" if r["overflows"] else "fits"
        print(f"{width:>5} px: {verdict} (page {r['scroll_width']} px wide in a {r['inner_width']} px viewport, "
              f"{r['scroll_height']} px tall)")
        for offender in r["offenders"]:
            print(f"        sticks out: {offender}")
        if r["card_heights"]:
            print(f"        privacy card heights: {r['card_heights']}")
        for image in r["images"]:
            print(f"        figure '{image['alt']}': shown {image['shown']} px wide from a {image['natural']} px PNG")
        for shot in r.get("screenshots", []):
            print(f"        screenshot: {shot}")
    return 1 if any(r["overflows"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
