"""Regenerate the tutorial's quoted diffs and the pages of each pair's diff from the current scripts.

    python docs/build.py            # rewrite the quoted hunks in docs/README.md and the pages docs/<a>_vs_<b>.md, .html
    python docs/build.py --check    # exit 1 if anything is stale (the test suite runs this)
    python docs/build.py --skeleton ppo.py ppo_ewma.py   # print empty hunk sections for a pair

docs/README.md quotes every hunk of the three sibling diffs between markers

    <!-- hunk ppo.py ppo_ewma.py 3 -->
    ```diff
    (generated)
    ```
    <!-- /hunk -->
    Explanation of hunk 3, in Markdown, up to the next marker or heading.

The diff blocks are regenerated; the explanations are written by hand and reused, word for word, after each
hunk in docs/<a>_vs_<b>.md (for a code host) and beside it in docs/<a>_vs_<b>.html (for a browser). A hunk
added to or removed from a diff makes --check fail until the guide explains it.
"""
import argparse
import difflib
import html
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
GUIDE = os.path.join(DOCS, "README.md")
PAIRS = [("ppo.py", "ppo_ewma.py"), ("ppo.py", "ppg.py"), ("ppg.py", "ppg_ewma.py")]
CONTEXT = 2  # unchanged lines shown around each change; changes closer than 2 * CONTEXT form one hunk
MARKER = re.compile(r"<!-- hunk (\S+) (\S+) (\d+) -->\n```diff\n.*?```\n<!-- /hunk -->\n", re.S)


def read_lines(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read().splitlines()


def hunks(a, b):
    """The diff of a -> b as hunks: (opcodes, unified text) with CONTEXT lines around each change."""
    la, lb = read_lines(a), read_lines(b)
    out = []
    for group in difflib.SequenceMatcher(None, la, lb, autojunk=False).get_grouped_opcodes(CONTEXT):
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        text = [f"@@ {a} {i1 + 1}-{i2}, {b} {j1 + 1}-{j2} @@"]
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                text += [" " + line for line in la[a1:a2]]
            else:
                text += ["-" + line for line in la[a1:a2]] + ["+" + line for line in lb[b1:b2]]
        out.append((group, "\n".join(text)))
    return out


def block(a, b, k, text):
    return f"<!-- hunk {a} {b} {k} -->\n```diff\n{text}\n```\n<!-- /hunk -->\n"


def explanations(guide, a, b):
    """Hunk number -> the Markdown after its block, up to the next hunk marker or heading."""
    out = {}
    for m in MARKER.finditer(guide):
        if (m.group(1), m.group(2)) == (a, b):
            rest = guide[m.end():]
            stop = re.search(r"^(<!-- hunk |#)", rest, re.M)
            out[int(m.group(3))] = rest[:stop.start() if stop else len(rest)].strip()
    return out


def regenerate_guide(guide):
    """The guide with every quoted hunk replaced by the current diff; a list of problems (missing or extra hunks)."""
    problems = []
    for a, b in PAIRS:
        current = hunks(a, b)
        quoted = {int(m.group(3)) for m in MARKER.finditer(guide) if (m.group(1), m.group(2)) == (a, b)}
        wanted = set(range(1, len(current) + 1))
        if quoted != wanted:
            problems.append(f"{a} -> {b}: the diff has {len(current)} hunks, the guide quotes {sorted(quoted)}")
        for k, (_, text) in enumerate(current, 1):
            guide = re.sub(rf"<!-- hunk {re.escape(a)} {re.escape(b)} {k} -->\n```diff\n.*?```\n<!-- /hunk -->\n",
                           lambda _: block(a, b, k, text), guide, flags=re.S)
    return guide, problems


def inline_html(text):
    """`code`, **bold**, *italics* and [links](url) in one line of a note; inside `code` a * is just a *."""
    codes = re.findall(r"`([^`]+)`", html.escape(text, quote=False))
    text = re.sub(r"`([^`]+)`", "\0", html.escape(text, quote=False))  # each code span set aside as a NUL
    text = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"\*([^*]+)\*", r"<em>\1</em>", text)
    text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', text)
    return re.sub("\0", lambda _: f"<code>{codes.pop(0)}</code>", text)


def markdown_to_html(text):
    """The little Markdown the notes use: paragraphs, lists, `code`, **bold**, *italics*, [links](url)."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip()):
        items = [line[2:] for line in para.splitlines() if line.startswith("- ")]
        if items and len(items) == len(para.splitlines()):
            out.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in items) + "</ul>")
        else:
            out.append(f"<p>{inline_html(' '.join(para.splitlines()))}</p>")
    return "\n".join(out)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} .lead {{ max-width: 60em; }}
table {{ border-collapse: collapse; width: 100%; table-layout: fixed; }}
td, th {{ vertical-align: top; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;
  white-space: pre-wrap; overflow-wrap: anywhere; padding: 0 6px; }}
th {{ color: #999; text-align: right; font-weight: normal; user-select: none; }}
td.del {{ background: #fde8e8; }} td.add {{ background: #e3f6e3; }}
tr.note td {{ font-family: system-ui, sans-serif; font-size: 14px; white-space: normal; background: #f3f6fb;
             border-top: 2px solid #9bb3d9; padding: 8px 12px; }}
tr.note code {{ background: #e4e9f2; padding: 0 3px; }}
details td {{ color: #666; }}
summary {{ cursor: pointer; color: #557; font-family: system-ui, sans-serif; font-size: 13px; }}
thead th {{ text-align: left; font: bold 14px system-ui, sans-serif; color: #222; padding: 6px; background: #eee;
  position: sticky; top: 0; }}
</style></head><body>
<h1>{title}</h1>
<p class="lead">{lead} Each blue note explains the hunk below it and points to the paper; the same notes are in
<a href="README.md">the reading guide</a> and, with the hunks, in <a href="{md}">{md}</a>. Unchanged stretches,
the appendix among them (from the <code># APPENDIX</code> banner to the end, the same in all four scripts), are
folded and shown once: click to open them. Generated by <code>python docs/build.py</code> from the current scripts.
</p>
<table><colgroup><col style="width:3.2em"><col><col style="width:3.2em"><col></colgroup>
<thead><tr><th></th><th>{a}</th><th></th><th>{b}</th></tr></thead>
{rows}
</table>
<p class="lead">Next: <a href="{next_target}">{next_what}</a>.</p>
</body></html>
"""
LEADS = {("ppo.py", "ppo_ewma.py"): "The paper's change to PPO. PPO's old policy has two jobs: importance sampling "
                                    "needs the behaviour policy (behav, which collected the data), keeping updates "
                                    "small needs a recent one, the proximal policy (prox). PPO-EWMA decouples the two "
                                    "and makes prox an exponentially weighted moving average (EWMA) of the policy "
                                    "network's weights (Section 2, Section 4, Appendix A).",
         ("ppo.py", "ppg.py"): "What Phasic Policy Gradient (Cobbe et al. 2020) adds to PPO: separate policy and value "
                               "networks; policy phases of N_pi PPO iterations; after each, an auxiliary phase: E_aux "
                               "epochs over the phase's frames that train the value network and, through an auxiliary "
                               "value head, the policy network's trunk, while a KL to the policy as the policy phase "
                               "ended (weight beta_clone) holds the policy's outputs in place.",
         ("ppg.py", "ppg_ewma.py"): "The same change as PPO -> PPO-EWMA, applied to PPG, plus the EWMA reset at the "
                                    "start of every policy phase (Appendix A, second-to-last paragraph)."}
# where a reader goes at the end of each pair's page
NEXT = {("ppo.py", "ppo_ewma.py"): ("ppo_vs_ppg.md", "what Phasic Policy Gradient adds to PPO"),
        ("ppo.py", "ppg.py"): ("ppg_vs_ppg_ewma.md", "the paper's change on PPG"),
        ("ppg.py", "ppg_ewma.py"): ("README.md#6-around-the-algorithm-long-runs-many-workers-watching-the-agent",
                                  "the machinery the four scripts share, in the reading guide's §6")}


def side_by_side(a, b, notes):
    la, lb = read_lines(a), read_lines(b)
    ops = difflib.SequenceMatcher(None, la, lb, autojunk=False).get_opcodes()
    starts = {group[0][1]: k for k, (group, _) in enumerate(hunks(a, b), 1)}  # hunk k starts at line i of a
    cell = lambda n, text, cls="": f"<th>{n}</th><td{cls}>{html.escape(text, quote=False)}</td>"  # noqa: E731
    rows = []

    def note(i):
        if i in starts:
            k = starts.pop(i)
            rows.append(f'<tr class="note"><td colspan="4"><strong>Hunk {k}.</strong> '
                        f'{markdown_to_html(notes.get(k, "(no explanation yet)"))}</td></tr>')
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            lines = [(i1 + t, j1 + t) for t in range(i2 - i1)]
            if len(lines) > 2 * CONTEXT + 6:  # fold the middle of long unchanged stretches
                head, mid, tail = lines[:CONTEXT], lines[CONTEXT:-CONTEXT], lines[-CONTEXT:]
            else:
                head, mid, tail = lines, [], []
            for i, j in head:
                note(i)
                rows.append(f"<tr>{cell(i + 1, la[i])}{cell(j + 1, lb[j])}</tr>")
            if mid:  # the same in both files, so shown once: a's and b's line numbers, then the line
                inner = "".join(f"<tr><th>{i + 1}</th>{cell(j + 1, la[i])}</tr>" for i, j in mid)
                rows.append(f'<tr><td colspan="4"><details><summary>{len(mid)} unchanged lines, shown once '
                            f'({a} {mid[0][0] + 1}-{mid[-1][0] + 1}, {b} {mid[0][1] + 1}-{mid[-1][1] + 1})'
                            f'</summary><table><colgroup><col style="width:3.2em"><col style="width:3.2em"><col>'
                            f'</colgroup>{inner}</table></details></td></tr>')
            for i, j in tail:
                note(i)
                rows.append(f"<tr>{cell(i + 1, la[i])}{cell(j + 1, lb[j])}</tr>")
        else:
            note(i1)
            for t in range(max(i2 - i1, j2 - j1)):
                left = cell(i1 + t + 1, la[i1 + t], ' class="del"') if i1 + t < i2 else cell("", "")
                right = cell(j1 + t + 1, lb[j1 + t], ' class="add"') if j1 + t < j2 else cell("", "")
                rows.append(f"<tr>{left}{right}</tr>")
    title = f"{a} vs {b}"
    md = os.path.basename(page_path(a, b, "md"))
    target, what = NEXT[(a, b)]
    target = target.replace(".md", ".html") if "_vs_" in target else target  # the next pair's side by side
    return PAGE.format(title=title, lead=LEADS[(a, b)], md=md, a=a, b=b, rows="\n".join(rows),
                       next_target=target, next_what=html.escape(what))


MARKDOWN_LEAD = """{lead} New to the paper? [§1 of the reading guide](README.md#1-the-problem-the-paper-solves)
states its problem first. Below, every hunk of the diff in file order, each followed by its explanation; every line not
shown is the same in both files, the appendix among them (from the `APPENDIX` banner to the end, the same in all four
scripts).

In a hunk, `-` lines are removed from `{a}`, `+` lines added in `{b}`, the others are the same in both, and the `@@`
line gives the line numbers in each file. The hunks are Python's `difflib`'s (`diff {a} {b}` may align a line or two
differently and mark fewer; both turn `{a}` into `{b}`). "Section N", "Table N", "Fig. N" and "Appendix X" are the
paper's; "§N" is a section of [the reading guide](README.md), where the same explanations are. In a browser,
[`{html}`]({html}) shows the two files side by side. Generated by `python docs/build.py`."""


def markdown_page(a, b, notes):
    """The pair's diff for a code host (GitHub-flavoured Markdown): each hunk as a diff block, then its note."""
    lead = MARKDOWN_LEAD.format(lead=LEADS[(a, b)], a=a, b=b, html=os.path.basename(page_path(a, b, "html")))
    paragraphs = [textwrap.fill(text, 120, break_on_hyphens=False) for text in lead.split("\n\n")]
    out = [f"# `{a}` -> `{b}`\n\n" + "\n\n".join(paragraphs) + "\n"]
    for k, (_, text) in enumerate(hunks(a, b), 1):
        out.append(f"## Hunk {k}\n\n```diff\n{text}\n```\n\n{notes.get(k, '(no explanation yet)')}\n")
    target, what = NEXT[(a, b)]
    out.append(f"---\n\nNext: [{what}]({target}).\n")
    return "\n".join(out)


def page_path(a, b, ext):
    return os.path.join(DOCS, f"{a[:-3]}_vs_{b[:-3]}.{ext}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything is stale")
    p.add_argument("--skeleton", nargs=2, metavar=("A", "B"), help="print empty hunk sections for the pair A -> B")
    args = p.parse_args()
    if args.skeleton:
        a, b = args.skeleton
        for k, (_, text) in enumerate(hunks(a, b), 1):
            print(block(a, b, k, text) + "(explanation)\n")
        return
    with open(GUIDE) as f:
        guide = f.read()
    new_guide, problems = regenerate_guide(guide)
    outputs = {GUIDE: new_guide}
    for a, b in PAIRS:
        outputs[page_path(a, b, "md")] = markdown_page(a, b, explanations(new_guide, a, b))
        outputs[page_path(a, b, "html")] = side_by_side(a, b, explanations(new_guide, a, b))
    stale = [path for path, text in outputs.items() if not os.path.exists(path) or open(path).read() != text]
    if args.check:
        stale = [f"stale: {os.path.relpath(path, ROOT)} (run python docs/build.py)" for path in stale]
        for message in problems + stale:
            print(message, file=sys.stderr)
        sys.exit(1 if problems or stale else 0)
    for path in stale:
        with open(path, "w") as f:
            f.write(outputs[path])
        print(f"wrote {os.path.relpath(path, ROOT)}")
    for message in problems:
        print(f"warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    main()
