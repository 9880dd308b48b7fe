"""The diffs between sibling scripts are the tutorial: they show only their story, and the appendix (the machinery
after the APPENDIX banner) is the same, to the character, in all four files."""
import ast
import difflib
import os

import pytest

from conftest import ROOT, SCRIPTS

BANNER = "# APPENDIX: the machinery."
DECOUPLING = {"docstring", "imports", "ADJUSTMENTS", "parse_args", "apply_batch_size_invariance", "EWMA", "make_batch",
              "policy_loss", "update", "main"}
# The top-level definitions that may differ between two siblings; every other one is identical.
MAY_DIFFER = {
    ("ppo.py", "ppo_ewma.py"): DECOUPLING,  # the paper's change (Sections 2 and 4, Appendix A)
    ("ppg.py", "ppg_ewma.py"): DECOUPLING,  # the same change on PPG
    ("ppo.py", "ppg.py"): {"docstring", "ADJUSTMENTS", "parse_args", "apply_batch_size_invariance", "PolicyNetwork",
                           "Agent", "update", "AuxBuffer", "aux_phase", "main"},  # what PPG adds
}


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def definitions(name):
    """Top-level definitions of a script: name -> (source text, first line, last line); the module docstring and
    the imports under the keys "docstring" and "imports"."""
    source = read(name)
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
        out[key] = (text + ast.get_source_segment(source, node), min(first, node.lineno), node.end_lineno)
    return out


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
    assert len({parts[1] for parts in appendices.values()}) == 1


@pytest.mark.parametrize("pair", [("ppo.py", "ppo_ewma.py"), ("ppg.py", "ppg_ewma.py")])
def test_ewma_diff_is_at_most_100_changed_lines(pair):
    assert 10 <= len(changed_lines(*pair)) <= 100


def test_ppg_ewma_adds_what_ppo_ewma_adds():
    """The decoupling/EWMA lines are the same in both pairs. What may differ: the file's title, the list
    of adjustments, PPG's update docstring, the EWMA's network (agent.policy) and PPG's phase reset."""
    ppo_added = {text for side, _, text in changed_lines("ppo.py", "ppo_ewma.py") if side == "+"}
    ppg_added = {text for side, _, text in changed_lines("ppg.py", "ppg_ewma.py") if side == "+"}
    assert len(ppo_added - ppg_added) <= 10, sorted(ppo_added - ppg_added)
    assert len(ppg_added - ppo_added) <= 12, sorted(ppg_added - ppo_added)
    assert sum("ewma.reset(agent.policy)" in line for line in ppg_added) == 1


def test_scripts_import_nothing_from_each_other():
    for s in SCRIPTS:
        source = read(f"{s}.py")
        for other in SCRIPTS:
            assert f"import {other}\n" not in source and f"from {other} " not in source
