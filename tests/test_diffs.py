"""The diffs between sibling scripts are the tutorial: they must show only their story."""
import difflib
import inspect
import os

import pytest

from conftest import ROOT, SCRIPTS, load

# Everything that is not part of any script's story is the same, to the character, in all four files.
SHARED = ["ArgumentParser", "number", "ProcgenVecEnv", "make_env", "normed", "ResidualBlock", "ConvSequence",
          "ImpalaCNN", "log_prob", "chunked_log_prob", "new_rollout", "collect_rollout", "RewardNormalizer",
          "compute_gae", "AdvantageMoments", "create_run_dir", "write_config", "format_eta", "PROCGEN_GAMES"]
# Words that tie a changed line of an EWMA diff to the decoupling / EWMA story (Section 2, 4, App. A).
STORY = ("prox", "ewma", "behav", "imp_samp", "decoupled", "copy", "EWMA", "PPO-EWMA", "PPG-EWMA", "Section 2",
         "Appendix A", "Section 4")


def changed_lines(a, b):
    lines = [open(os.path.join(ROOT, f)).read().splitlines() for f in (a, b)]
    diff = difflib.unified_diff(*lines, lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def hunks(a, b):
    lines = [open(os.path.join(ROOT, f)).read().splitlines() for f in (a, b)]
    matcher = difflib.SequenceMatcher(None, *lines, autojunk=False)
    return [lines[0][i1:i2] + lines[1][j1:j2] for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


@pytest.mark.parametrize("pair,low,high", [(("ppo.py", "ppo_ewma.py"), 10, 100), (("ppg.py", "ppg_ewma.py"), 10, 110)])
def test_ewma_diff_size_is_within_bounds(pair, low, high):
    assert low <= len(changed_lines(*pair)) <= high


@pytest.mark.parametrize("pair", [("ppo.py", "ppo_ewma.py"), ("ppg.py", "ppg_ewma.py")])
def test_every_ewma_hunk_is_about_the_proximal_policy(pair):
    for hunk in hunks(*pair):
        assert any(word in line for line in hunk for word in STORY), "\n".join(hunk)


def test_ppg_ewma_adds_what_ppo_ewma_adds():
    """The decoupling/EWMA lines are the same in both pairs. What may differ: the file's title, the list
    of adjustments, PPG's update docstring, the EWMA's network (agent.policy) and PPG's phase reset."""
    ppo_added = {l[1:] for l in changed_lines("ppo.py", "ppo_ewma.py") if l.startswith("+")}
    ppg_added = {l[1:] for l in changed_lines("ppg.py", "ppg_ewma.py") if l.startswith("+")}
    assert len(ppo_added - ppg_added) <= 10, sorted(ppo_added - ppg_added)
    assert len(ppg_added - ppo_added) <= 12, sorted(ppg_added - ppo_added)
    assert sum("ewma.reset(agent.policy)" in l for l in ppg_added) == 1


@pytest.mark.parametrize("name", SHARED)
def test_shared_parts_are_identical_in_all_four_scripts(name):
    sources = {s: inspect.getsource(getattr(load(s), name)) if callable(getattr(load(s), name))
               else repr(getattr(load(s), name)) for s in SCRIPTS}
    assert len(set(sources.values())) == 1, name


def test_scripts_import_nothing_from_each_other():
    for s in SCRIPTS:
        source = open(os.path.join(ROOT, f"{s}.py")).read()
        for other in SCRIPTS:
            assert f"import {other}\n" not in source and f"from {other} " not in source
