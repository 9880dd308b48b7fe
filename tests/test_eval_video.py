"""Watching and testing the agent: GIFs, held-out evaluation, --evaluate of a saved run."""
import os

import numpy as np
import pytest
from PIL import Image

from conftest import learning_columns, load, read_progress, run_tiny, tiny_argv


def test_capture_video_writes_a_small_animated_gif(tmp_path):
    run_dir, _ = run_tiny("ppo", tmp_path, "--capture-video", "--video-interval", "1", iterations=2)
    names = sorted(os.listdir(os.path.join(run_dir, "videos")))
    assert names == ["iter_000001.gif", "iter_000002.gif"]
    path = os.path.join(run_dir, "videos", names[-1])
    gif = Image.open(path)
    assert gif.format == "GIF" and gif.n_frames > 1 and gif.size == (128, 128)
    assert os.path.getsize(path) < 20e6


def test_video_and_evaluation_never_change_training(tmp_path):
    """evaluate() is the appendix's, the same in all four scripts; PPG-EWMA has the most state it could disturb."""
    name = "ppg_ewma"
    _, plain = run_tiny(name, tmp_path / "plain", "--num-levels", "20", iterations=2)
    _, watched = run_tiny(name, tmp_path / "watched", "--num-levels", "20", "--capture-video", "--video-interval", "1",
                          "--eval-episodes", "3", "--eval-interval", "1", iterations=2)
    assert learning_columns(plain) == learning_columns(watched)
    assert all(r["eval_return"] == "" for r in plain)
    assert all(np.isfinite(float(r["eval_return"])) and float(r["eval_length"]) > 0 for r in watched)


def level_seeds(env):
    """The level each of the script's Procgen envs is playing: a list of infos from procgen-mirror's gym3 env, arrays
    from procgen-gym's (whose reset only looks)."""
    if hasattr(env.games, "get_info"):
        return [info["level_seed"] for info in env.games.get_info()]
    return env.games.reset()[1]["level_seed"]


@pytest.mark.parametrize("start_level,num_levels", [(0, 20), (100, 5)])
def test_held_out_levels_never_overlap_the_training_levels(start_level, num_levels):
    ppo = load("ppo")
    args = ppo.parse_args(tiny_argv("ppo", "--start-level", str(start_level), "--num-levels", str(num_levels)))
    eval_start, eval_num = ppo.held_out_levels(args)
    assert eval_start >= start_level + num_levels or eval_start + eval_num <= start_level
    env = ppo.ProcgenVecEnv("starpilot", 8, "easy", eval_num, eval_start, seed=3)  # the level seeds Procgen plays
    rng = np.random.default_rng(0)  # random play, the same every run
    seeds = set()
    for _ in range(300):
        env.step(rng.integers(0, 15, size=8))
        seeds.update(level_seeds(env))
    assert len(seeds) > 8 and not seeds & set(range(start_level, start_level + num_levels))


def test_without_num_levels_evaluation_uses_the_full_distribution():
    """Without --num-levels every level is a training level: evaluation then plays Procgen's unlimited levels,
    whose seeds are drawn from the whole 31-bit range."""
    ppo = load("ppo")
    eval_start, eval_num = ppo.held_out_levels(ppo.parse_args(tiny_argv("ppo")))
    env = ppo.ProcgenVecEnv("starpilot", 8, "easy", eval_num, eval_start, seed=3)
    rng = np.random.default_rng(0)  # random play, the same every run
    seeds = set()
    for _ in range(300):
        env.step(rng.integers(0, 15, size=8))
        seeds.update(level_seeds(env))
    assert len(seeds) > 8 and max(seeds) > 10 ** 6


def test_evaluate_a_saved_run_prints_its_return(tmp_path, capsys):
    ppo_ewma = load("ppo_ewma")
    run_dir, _ = run_tiny("ppo_ewma", tmp_path, "--save-model", "--num-levels", "10", iterations=1)
    capsys.readouterr()
    returns = ppo_ewma.main(["--evaluate", run_dir, "--eval-episodes", "3", "--capture-video"])
    out = capsys.readouterr().out
    assert len(returns) == 3 and "mean return" in out and "over 3 held-out episodes" in out
    assert os.path.isfile(os.path.join(run_dir, "videos", "evaluate_iter_000001.gif"))
    assert read_progress(run_dir)[-1]["iteration"] == "1"  # evaluation trains nothing and logs nothing


def test_evaluate_a_run_without_checkpoint_exits_2_with_one_line(tmp_path, bad_argument):
    run_dir, _ = run_tiny("ppo", tmp_path / "r", "--no-save-model", iterations=1)
    assert "no checkpoint.pt" in bad_argument("ppo", ["--evaluate", run_dir], "--evaluate")
