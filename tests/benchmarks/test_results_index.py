"""benchmarks/RESULTS.md opens with "What is here", one line per section, so that a reader finds an answer without
reading 2,400 lines. The index is only worth its lines while it names the sections as they are: a renamed heading,
or a section added without a line, would send the reader to nothing or leave a result unlisted."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "RESULTS.md"


def _outside_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def test_the_index_names_every_top_section_and_only_headings_that_exist():
    text = _outside_code(RESULTS.read_text(encoding="utf-8"))
    assert text.startswith("## What is here\n"), "RESULTS.md must open with its index"
    index, _, body = text.partition("**Carved splits changed")
    named = re.findall(r'^\* "([^"]+)"', index, flags=re.M)
    headings = re.findall(r"^#{2,4} (.+?)\s*$", body, flags=re.M)
    top = re.findall(r"^## (.+?)\s*$", body, flags=re.M)
    assert named and len(named) == len(set(named))
    missing = [name for name in named if name not in headings]
    assert not missing, f"the index names sections that RESULTS.md does not have: {missing}"
    unlisted = [heading for heading in top if heading not in named]
    assert not unlisted, f"sections missing from the index: {unlisted}"
