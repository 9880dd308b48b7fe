"""Long runs: checkpoint, resume, SIGTERM and non-finite values (all four scripts)."""
import json
import os
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import PPG_SCRIPTS, ROOT, TINY, load, read_progress, tiny_argv

# Columns computed from the learner alone; time_s and sps are wall-clock.
LEARNING_COLUMNS = ["iteration", "global_step", "episodic_return", "episodic_length", "policy_loss", "value_loss",
                    "entropy", "approx_kl", "clipfrac", "adv_mean", "adv_std"]


class StatelessEnv(gym.vector.VectorEnv):
    """A stand-in for Procgen with no state to lose: the same frame every step, one-step episodes paying 1 for
    action 3. A resumed run then sees exactly the data the uninterrupted run sees, so everything must match."""
    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_id, num_envs, distribution_mode, num_levels, start_level, seed):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(15)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.frame = np.full((num_envs, 64, 64, 3), 90, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        return self.frame, {}

    def step(self, actions):
        done = np.ones(self.num_envs, dtype=bool)
        return self.frame, (np.asarray(actions) == 3).astype(np.float32), done, ~done, {}


def checkpoint(run_dir):
    return torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)


def assert_same_state(a, b, path="checkpoint"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_resume_equals_an_uninterrupted_run(script, tmp_path, monkeypatch):
    """2 iterations + resume to 4 == 4 iterations: every learning column and every saved tensor (networks,
    EWMA, optimisers, normalisers, staleness FIFO, PPG aux buffer mid-phase, RNG states)."""
    monkeypatch.setattr(script, "ProcgenVecEnv", StatelessEnv)
    name = script.__name__
    extra = ["--staleness", "1", "--save-model", "--save-interval", "1"] + (["--n-pi", "3"] if name in PPG_SCRIPTS else [])
    full = script.main(tiny_argv(name, "--runs-dir", str(tmp_path / "full"), "--total-timesteps", "512", *extra))
    part = script.main(tiny_argv(name, "--runs-dir", str(tmp_path / "part"), "--total-timesteps", "256", *extra))
    assert checkpoint(part)["iteration"] == 2
    assert script.main(["--resume", part, "--total-timesteps", "512"]) == part
    rows_full, rows_part = read_progress(full), read_progress(part)
    assert [r["iteration"] for r in rows_part] == ["1", "2", "3", "4"]
    for r_full, r_part in zip(rows_full, rows_part):
        assert {c: r_full[c] for c in LEARNING_COLUMNS} == {c: r_part[c] for c in LEARNING_COLUMNS}
    a, b = checkpoint(full), checkpoint(part)
    a.pop("time_s"), b.pop("time_s")
    assert_same_state(a, b)
    config = json.load(open(os.path.join(part, "config.json")))
    assert config["total_timesteps"] == 512 and config["num_iterations"] == 4


def test_resume_on_procgen_keeps_the_past_and_starts_fresh_episodes(tmp_path):
    """With real Procgen the environment cannot be restored: rows up to the checkpoint are kept as they were,
    later rows come from fresh episodes, so every data-dependent column may differ from an uninterrupted run."""
    ppo = load("ppo")
    run_dir = ppo.main(tiny_argv("ppo", "--runs-dir", str(tmp_path), "--total-timesteps", "256", "--save-model"))
    before = read_progress(run_dir)
    config_before = json.load(open(os.path.join(run_dir, "config.json")))
    ppo.main(["--resume", run_dir, "--total-timesteps", "384"])
    after = read_progress(run_dir)
    assert after[:2] == before and [r["iteration"] for r in after] == ["1", "2", "3"]
    assert np.isfinite(float(after[2]["policy_loss"]))
    config_after = json.load(open(os.path.join(run_dir, "config.json")))
    changed = {k for k in config_before if config_before[k] != config_after[k]}
    assert changed == {"total_timesteps", "num_iterations", "resume"}


def test_resume_rejects_a_conflicting_flag_and_a_missing_checkpoint(tmp_path, capsys):
    ppo = load("ppo")
    run_dir = ppo.main(tiny_argv("ppo", "--runs-dir", str(tmp_path), "--total-timesteps", "128", "--save-model"))
    for argv, arg in ([["--resume", run_dir, "--gamma", "0.9"], "--gamma"],
                      [["--resume", str(tmp_path / "nowhere")], "--resume"]):
        with pytest.raises(SystemExit) as exit_info:
            ppo.parse_args(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and arg in err


def test_sigterm_saves_a_loadable_checkpoint_and_prints_the_resume_command(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "ppo_ewma.py"), *TINY, "--total-timesteps", "100000", "--save-model",
           "--save-interval", "1000"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    for line in proc.stdout:  # wait for the first finished iteration, then ask it to stop
        lines.append(line)
        if line.startswith("iter 1/"):
            proc.send_signal(signal.SIGTERM)
            break
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    run_dir = os.path.join(tmp_path, "runs", os.listdir(os.path.join(tmp_path, "runs"))[0])
    state = checkpoint(run_dir)
    assert state["iteration"] >= 1 and "ewma" in state
    assert f"Resume with: python ppo_ewma.py --resume {os.path.join('runs', os.path.basename(run_dir))}" in out


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(script, tmp_path, monkeypatch, capsys):
    real_update, calls = script.update, []

    def update_that_breaks_on_the_third_call(*args, **kwargs):
        row = real_update(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            row["policy_loss"] = float("nan")
        return row
    monkeypatch.setattr(script, "update", update_that_breaks_on_the_third_call)
    argv = tiny_argv(script.__name__, "--runs-dir", str(tmp_path), "--total-timesteps", "640", "--save-model",
                     "--save-interval", "1")
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    message = str(exit_info.value.code)
    assert "iteration 3: non-finite policy_loss" in message and "last good checkpoint (iteration 2)" in message
    run_dir = os.path.join(tmp_path, os.listdir(tmp_path)[0])
    assert checkpoint(run_dir)["iteration"] == 2
    assert not os.path.exists(os.path.join(run_dir, "checkpoint.pt.tmp"))


def test_non_finite_parameter_is_named(tmp_path, monkeypatch):
    ppo = load("ppo")
    real_update = ppo.update

    def update_that_poisons_a_weight(agent, *args, **kwargs):
        row = real_update(agent, *args, **kwargs)
        with torch.no_grad():
            agent.v_head.weight[0, 0] = float("inf")
        return row
    monkeypatch.setattr(ppo, "update", update_that_poisons_a_weight)
    with pytest.raises(SystemExit) as exit_info:
        ppo.main(tiny_argv("ppo", "--runs-dir", str(tmp_path), "--total-timesteps", "256"))
    assert "iteration 1: non-finite parameter v_head.weight" in str(exit_info.value.code)
    assert "no checkpoint was written" in str(exit_info.value.code)
