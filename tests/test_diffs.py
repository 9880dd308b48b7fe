"""The diffs between sibling scripts are the tutorial: they show only their story, and the appendix (the machinery
after the APPENDIX banner) is the same, to the character, in all four files."""
import ast
import collections
import difflib
import functools
import glob
import os
import re

import pytest

from conftest import ROOT, SCRIPTS

BANNER = "# APPENDIX: the machinery."
DECOUPLING = {"docstring", "imports", "ADJUSTMENTS", "parse_args", "apply_batch_size_invariance", "EWMA", "make_batch",
              "policy_loss", "micro_batch_loss", "update", "main"}
# The top-level definitions that may differ between two siblings; every other one is identical.
MAY_DIFFER = {
    ("ppo.py", "ppo_ewma.py"): DECOUPLING,  # the paper's change (Sections 2 and 4, Appendix A)
    ("ppg.py", "ppg_ewma.py"): DECOUPLING,  # the same change on PPG
    # PPG's
    ("ppo.py", "ppg.py"): {"docstring", "ADJUSTMENTS", "parse_args", "apply_batch_size_invariance", "PolicyNetwork",
                           "Agent", "micro_batch_loss", "update", "AuxBuffer", "aux_loss", "aux_phase", "main"},
}


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


@functools.cache  # the files do not change during a session; several tests read the same
def definitions(name):
    """Top-level definitions of a script: name -> (source text, first line, last line); the module docstring and
    the imports under the keys "docstring" and "imports"."""
    source = read(name)
    lines = source.split("\n")  # ast.get_source_segment would split the whole file again for every definition
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            key = node.name
        elif isinstance(node, ast.Assign):
            key = ",".join(ast.unparse(t) for t in node.targets)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            key = "imports"
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            key = "docstring"
        else:
            key = ast.unparse(node).splitlines()[0]  # `if __name__ == "__main__":`
        text, first, _ = out.get(key, ("", node.lineno, 0))
        # a top-level node starts at column 0 and ends at end_col_offset, in UTF-8 bytes, of its last line
        last = lines[node.end_lineno - 1].encode()[:node.end_col_offset].decode()
        segment = "\n".join(lines[node.lineno - 1:node.end_lineno - 1] + [last])
        out[key] = (text + segment, min(first, node.lineno), node.end_lineno)
    return out


@functools.cache
def changed_lines(a, b):
    """(line number, text) of every line removed from a or added in b: '-' lines numbered in a, '+' lines in b."""
    la, lb = read(a).splitlines(), read(b).splitlines()
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, la, lb, autojunk=False).get_opcodes():
        if tag != "equal":
            out += [("-", i + 1, la[i]) for i in range(i1, i2)] + [("+", j + 1, lb[j]) for j in range(j1, j2)]
    return out


@pytest.mark.parametrize("pair", list(MAY_DIFFER), ids="-".join)
def test_siblings_differ_in_exactly_the_definitions_of_their_story(pair):
    a, b = (definitions(name) for name in pair)
    differing = {k for k in a.keys() | b.keys() if a.get(k, ("",))[0] != b.get(k, ("",))[0]}
    assert differing == MAY_DIFFER[pair]


@pytest.mark.parametrize("pair", list(MAY_DIFFER), ids="-".join)
def test_every_changed_line_is_inside_a_story_definition_or_a_section_banner(pair):
    spans = {side: [(first, last) for key, (_, first, last) in definitions(name).items() if key in MAY_DIFFER[pair]]
             for side, name in zip("-+", pair)}
    for side, number, text in changed_lines(*pair):
        inside = any(first <= number <= last for first, last in spans[side])
        banner = text.startswith(("# ---", "# Tutorial:"))
        assert inside or banner or not text.strip(), f"{pair} {side}{number}: {text}"


def test_the_appendix_is_identical_in_all_four_scripts():
    appendices = {name: read(f"{name}.py").split(BANNER) for name in SCRIPTS}
    assert all(len(parts) == 2 for parts in appendices.values())
    banner_line = {name: parts[0].count("\n") + 1 for name, parts in appendices.items()}
    ref, reference = SCRIPTS[0], appendices[SCRIPTS[0]][1].splitlines()
    for name in SCRIPTS[1:]:
        lines = appendices[name][1].splitlines()
        i = next((i for i, (a, b) in enumerate(zip(reference, lines)) if a != b), min(len(reference), len(lines)))
        assert lines == reference, (f"the appendices first differ at {ref}.py:{banner_line[ref] + i} and "
                                    f"{name}.py:{banner_line[name] + i}:\n  {reference[i:i + 1]}\n  {lines[i:i + 1]}")


# The budget that keeps the teaching files lean is bytes and width, not lines: a line unfolded for a reader costs a
# few bytes of indentation, a packed one saves none; so a new feature finds a simpler shape, or work goes, to fit.
BYTES = {"ppo_ewma.py": 56_000, "ppg_ewma.py": 63_000}  # whole files
APPENDIX_BYTES = 24_000  # from the APPENDIX banner to the end, the same in all four
WIDTH, FLAG_LIST_WIDTH = 100, 120  # characters a line; parse_args's flag lines, one flag each, up to 120
DEFINITION_LINES, CLASS_ATTRIBUTES = 45, 8  # any function or class but parse_args (the flags) and main (the outline)
DIFF_LINES = {("ppo.py", "ppo_ewma.py"): 87, ("ppg.py", "ppg_ewma.py"): 92}  # changed lines, '-' and '+' together


def test_the_scripts_stay_within_their_byte_budgets():
    sizes = {name: len(read(name).encode()) for name in BYTES}
    assert all(sizes[name] <= most for name, most in BYTES.items()), sizes
    appendices = {name: len(read(f"{name}.py").split(BANNER)[1].encode()) for name in SCRIPTS}
    assert all(n <= APPENDIX_BYTES for n in appendices.values()), appendices
    diffs = {pair: len(changed_lines(*pair)) for pair in DIFF_LINES}
    assert all(diffs[pair] <= most for pair, most in DIFF_LINES.items()), diffs


@pytest.mark.parametrize("name", [f"{s}.py" for s in SCRIPTS])
def test_one_statement_a_line_within_the_width(name):
    """No line over WIDTH characters but parse_args's flag lines (FLAG_LIST_WIDTH); no two statements on a line
    (`a = 1; b = 2`, `if a: b`); no assignment that packs unrelated values (`a, b = x, y`; unpacking a call's tuple
    is one value); no definition longer than DEFINITION_LINES but parse_args and main, and no class with more than
    CLASS_ATTRIBUTES attributes."""
    source = read(name)
    tree = ast.parse(source)
    top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    flags = range(top["parse_args"].lineno, top["parse_args"].end_lineno + 1)
    wide = [n for n, line in enumerate(source.splitlines(), 1)
            if len(line) > (FLAG_LIST_WIDTH if n in flags else WIDTH)]
    assert wide == []
    packed = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assign)
              and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)]
    assert packed == []
    starts = collections.Counter(node.lineno for node in ast.walk(tree) if isinstance(node, ast.stmt))
    assert [line for line, count in starts.items() if count > 1] == []
    long = {key: node.end_lineno - node.lineno + 1 for key, node in top.items() if key not in ("parse_args", "main")}
    assert max(long.values()) <= DEFINITION_LINES, max(long.items(), key=lambda item: item[1])
    for node in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
        attributes = {t.attr for t in ast.walk(node) if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
                      and isinstance(t.value, ast.Name) and t.value.id == "self"}
        assert len(attributes) <= CLASS_ATTRIBUTES, (node.name, sorted(attributes))


def test_the_code_around_the_scripts_stays_within_the_flag_lists_width():
    """The experiments, the tests and docs/build.py: no line over FLAG_LIST_WIDTH characters."""
    names = [os.path.relpath(path, ROOT) for pattern in ("docs/*.py", "experiments/**/*.py", "tests/*.py")
             for path in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    wide = [f"{name}:{n}" for name in names for n, line in enumerate(read(name).splitlines(), 1)
            if len(line) > FLAG_LIST_WIDTH]
    assert len(names) > 30 and wide == [], wide


# What the EWMA diffs may remove (the baseline's single old policy, its title, its list of adjustments, the update's
# signature and call) and add outside the EWMA class (the proximal and behaviour policies, the EWMA, the title).
REMOVED = re.compile(r"old|recent|behav|^\"\"\"PP[OG]|Batch size-invariance for|python pp[og].py|ADJUSTMENTS|"
                     r"def update|= update\(|def micro_batch_loss|= micro_batch_loss\(|"
                     r"Losses \(PPO|Returns the mean diagnostics")
ADDED = re.compile(r"prox|ewma|EWMA|behav|recent|^\"\"\"PP[OG]-EWMA|Hilton|import copy|ADJUSTMENTS|Losses \(decoupled|"
                   r"train_pi|policy step|step. Returns the mean diagnostics")


@pytest.mark.parametrize("pair", [("ppo.py", "ppo_ewma.py"), ("ppg.py", "ppg_ewma.py")])
def test_every_line_of_an_ewma_diff_is_about_the_old_proximal_or_behaviour_policy(pair):
    ewma = definitions(pair[1])["EWMA"]
    added = {n for side, n, _ in changed_lines(*pair) if side == "+"}
    assert set(range(ewma[1], ewma[2] + 1)) <= added  # the EWMA class is added whole
    changed = [(side, n, text) for side, n, text in changed_lines(*pair) if text.strip()]
    outside = [(side, n, text) for side, n, text in changed if not (side == "+" and ewma[1] <= n <= ewma[2])]
    for side, n, text in outside:
        assert (REMOVED if side == "-" else ADDED).search(text), f"{pair} {side}{n}: {text}"


def test_ppg_ewma_adds_exactly_what_ppo_ewma_adds():
    """The decoupling/EWMA lines are the same in both pairs, once PPG's names read as PPO's (its policy network
    `agent.policy` is PPO's `agent`). Beyond them PPG-EWMA adds only what its phases need: the EWMA update under
    `if train_pi` (PPG's value epochs take steps without the policy), its reset at each policy phase, and the update
    docstring saying so; the lists of adjustments differ by N_pi, and PPG's micro-batch function takes the epoch's
    flags (which networks train) after the EWMA."""
    def added(a, b):
        return {" ".join(text.replace("agent.policy", "agent").replace("ppg", "ppo").replace("PPG", "PPO").split())
                for side, _, text in changed_lines(a, b) if side == "+" and text.strip()}
    ppo_added, ppg_added = added("ppo.py", "ppo_ewma.py"), added("ppg.py", "ppg_ewma.py")
    assert {line.split(" # ")[0] for line in ppo_added - ppg_added} == {
        'ADJUSTMENTS = ("lr", "prox", "adv")', "ewma.update(agent)",
        "def micro_batch_loss(agent, batch, idx, args, ewma):",
        "loss, diagnostics = micro_batch_loss(agent, batch, idx, args, ewma)"}
    assert {line.split(" # ")[0] for line in ppg_added - ppo_added} == {
        'ADJUSTMENTS = ("lr", "prox", "adv", "n_pi")', "ewma.update(agent)", "if train_pi:", "ewma.reset(agent)",
        "(Table 3), the two networks' losses summed where both train, the EWMA updated after each policy",
        'step. Returns the mean diagnostics."""',
        "def micro_batch_loss(agent, batch, idx, args, ewma, train_pi, train_v):",
        "loss, diagnostics = micro_batch_loss(agent, batch, idx, args, ewma,"}


# The appendix's functions the story calls by a name that says what they do; nothing else of the appendix is needed
# to understand the algorithm above it.
MACHINERY_CALLS = {"check_args", "resume_args", "setup", "evaluate_saved_agent", "average_gradients", "all_reduce_sum",
                   "say", "cpu_threads", "worker", "load_checkpoint", "save_checkpoint", "prepare_networks",
                   "open_run", "due", "evaluate_held_out", "save_video", "log_iteration", "stop_check", "finish",
                   "cuda_graph"}


@pytest.mark.parametrize("name", [f"{s}.py" for s in SCRIPTS])
def test_the_story_stands_alone_and_reads_in_plain_pytorch(name):
    """Above the APPENDIX banner: no name defined only below it except the machinery calls; public PyTorch only
    (no torch._foreach_*)."""
    source = read(name)
    banner = source[:source.index(BANNER)].count("\n") + 1
    tree = ast.parse(source)
    below = {node.name if hasattr(node, "name") else ast.unparse(node.targets[0]) for node in tree.body
             if node.lineno > banner and isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign))}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and node.lineno < banner}
    assert {"setup", "open_run", "log_iteration"} <= used & below <= MACHINERY_CALLS
    assert "_foreach" not in source[:source.index(BANNER)]
