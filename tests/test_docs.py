"""The tutorial's quoted diffs and the pages of each pair's diff (Markdown and side-by-side HTML) match the current
scripts, and every hunk is explained."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, load

build = load("build", os.path.join(ROOT, "docs"))


def test_quoted_hunks_and_pages_are_current():
    """`python docs/build.py --check` regenerates everything in memory and compares with the committed files."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "build.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("a,b", build.PAIRS)
def test_every_hunk_is_quoted_once_and_explained(a, b):
    guide = open(build.GUIDE).read()
    notes = build.explanations(guide, a, b)
    assert sorted(notes) == list(range(1, len(build.hunks(a, b)) + 1))
    for k, text in notes.items():
        assert len(text) > 20 and "(explanation)" not in text, (a, b, k)


@pytest.mark.parametrize("a,b", build.PAIRS)
def test_side_by_side_page_shows_both_files_and_every_note(a, b):
    page = open(build.page_path(a, b, "html")).read()
    notes = build.explanations(open(build.GUIDE).read(), a, b)
    assert page.count('<tr class="note">') == len(notes)
    assert "<script" not in page  # static: no JavaScript
    for k in notes:
        assert f"<strong>Hunk {k}.</strong>" in page
    for target in re.findall(r'href="([^"#]+)', page):  # the guide, the Markdown page, the next page
        assert os.path.exists(os.path.join(ROOT, "docs", target)), target


@pytest.mark.parametrize("a,b", build.PAIRS)
def test_side_by_side_page_shows_the_appendix_once_and_is_at_most_150_kb(a, b):
    page = open(build.page_path(a, b, "html")).read()
    assert page.count("# APPENDIX: the machinery.") == 1
    assert os.path.getsize(build.page_path(a, b, "html")) <= 150_000


@pytest.mark.parametrize("a,b", build.PAIRS)
def test_markdown_page_puts_each_note_right_after_its_hunk(a, b):
    """docs/<a>_vs_<b>.md, for a code host: each hunk as a diff block, then the guide's note for it, word for word."""
    page = open(build.page_path(a, b, "md")).read()
    notes = build.explanations(open(build.GUIDE).read(), a, b)
    current = build.hunks(a, b)
    assert page.count("```diff\n") == len(current) == len(notes)
    for k, (_, text) in enumerate(current, 1):
        assert f"\n## Hunk {k}\n\n```diff\n{text}\n```\n\n{notes[k]}\n" in page


def test_a_stale_quote_is_detected(tmp_path, monkeypatch):
    """Change one quoted line in a copy of the guide: regeneration restores it."""
    guide = open(build.GUIDE).read()
    broken = guide.replace("+import copy", "+import copy  # edited by hand", 1)
    assert broken != guide
    regenerated, problems = build.regenerate_guide(broken)
    assert regenerated == guide and problems == []


def test_notes_markdown_in_html():
    """The notes' Markdown as CommonMark renders it: inside `code` a * is a *, and **`code`** is bold code."""
    assert build.markdown_to_html("**`update`** takes `w_new = 1 + beta * w`, *not* `theta * w`.") == (
        "<p><strong><code>update</code></strong> takes <code>w_new = 1 + beta * w</code>, <em>not</em> "
        "<code>theta * w</code>.</p>")


# --- Links -------------------------------------------------------------------------------------------------
def markdown_pages():
    """Every Markdown file of the repository (not in hidden folders or the untracked runs/)."""
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and (folder, d) != (ROOT, "runs"))
        yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".md"))


def without_code(text):
    """The Markdown outside fenced blocks and `code spans` (where [a](b) is code, not a link)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))


def anchors(text):
    """GitHub's anchor of each heading: lower case, punctuation but - and _ dropped, spaces as -, repeats numbered."""
    seen, found = {}, set()
    for heading in re.findall(r"^#+ +(.+?) *#*$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_every_relative_link_in_the_markdown_pages_resolves():
    """Each [text](target) that is not a URL names a file or folder of the repository, and its #anchor a heading."""
    broken = []
    for page in markdown_pages():
        text = open(page).read()
        for target in re.findall(r"\]\(([^)\s]+)\)", without_code(text)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(file) or anchor and file.endswith(".md") and anchor not in anchors(open(file).read()):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target}")
    assert broken == []
