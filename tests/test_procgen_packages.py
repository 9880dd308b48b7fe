"""procgen-gym (Python 3.13) plays the same game as procgen-mirror (Python 3.11 and 3.12): through the scripts'
ProcgenVecEnv, StarPilot rollouts with fixed actions give the frames, rewards, episode ends and episode statistics
that procgen-mirror gave when tests/data/starpilot_procgen_mirror.npz was recorded. The two packages never share an
interpreter (each has wheels for its own Pythons only), so the recording stands in for the other one; on 3.11 the
same test checks that procgen-mirror still gives it.

A frame is kept as its SHA-256 digest, as strict as the 12 KB of pixels: StarPilot's frames barely compress
(4 envs x 48 steps take 1.7 MB in a compressed npz). Record again (with procgen-mirror only):

    python tests/test_procgen_packages.py
"""
import hashlib
import os
import sys

import numpy as np
import pytest

from conftest import load

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "starpilot_procgen_mirror.npz")
STEPS, NUM_ENVS = 150, 4
# Between them the settings move every argument of the env away from procgen-gym's defaults (distribution_mode "hard",
# num_levels 0, start_level 0, a random seed), so an argument that does not reach Procgen changes the levels.
SETTINGS = {"easy": dict(distribution_mode="easy", num_levels=0, start_level=0, seed=1),
            "hard_levels": dict(distribution_mode="hard", num_levels=3, start_level=50, seed=2)}


def rollout(ppo, actions, distribution_mode, num_levels, start_level, seed):
    """Frame digests (STEPS + 1, NUM_ENVS, 32), rewards, firsts, and each finished episode's (step, env, return,
    length), as the scripts see them (ProcgenVecEnv)."""
    envs = ppo.ProcgenVecEnv("starpilot", NUM_ENVS, distribution_mode, num_levels, start_level, seed)
    obs = envs.obs
    digests, rewards, firsts, episodes = [obs], [], [], []
    for t, action in enumerate(actions):
        obs, reward, first, (returns, lengths) = envs.step(action)
        assert obs.shape == (NUM_ENVS, 64, 64, 3) and obs.dtype == np.uint8 and first.dtype == bool
        digests.append(obs), rewards.append(reward), firsts.append(first)
        for env in np.flatnonzero(first):
            episodes.append((t, env, returns[env], lengths[env]))
    digests = np.array([[np.frombuffer(hashlib.sha256(frame.tobytes()).digest(), np.uint8) for frame in frames]
                        for frames in digests])
    return {"digests": digests, "rewards": np.array(rewards), "firsts": np.array(firsts),
            "episodes": np.array(episodes, dtype=np.float64).reshape(-1, 4)}


def test_requirements_give_procgen_gym_on_3_13_and_procgen_mirror_below():
    assert load("ppo").procgen.__name__ == ("procgen_gym" if sys.version_info >= (3, 13) else "procgen")


@pytest.mark.parametrize("setting", SETTINGS)
def test_starpilot_frames_rewards_and_episode_ends_match_procgen_mirrors(setting):
    recorded = np.load(DATA)
    played = rollout(load("ppo"), recorded["actions"], **SETTINGS[setting])
    for key, value in played.items():
        expected = recorded[f"{setting}_{key}"]
        assert value.shape == expected.shape, key
        if key == "digests":
            same = (value == expected).all(axis=-1)
            assert same.all(), f"{(~same).sum()} of {same.size} frames differ, the first at (step, env) " \
                               f"{tuple(np.argwhere(~same)[0])}"
        else:
            np.testing.assert_array_equal(value, expected, err_msg=key)


def test_the_recording_holds_episode_ends_and_rewards():
    """The comparison above is only as strong as the rollout: it must cross episode ends (the same-step reset)
    and collect rewards, and the episodes' returns must be the rewards summed since each episode began."""
    recorded = np.load(DATA)
    for setting in SETTINGS:
        rewards, firsts = recorded[f"{setting}_rewards"], recorded[f"{setting}_firsts"]
        episodes = recorded[f"{setting}_episodes"]
        assert firsts.sum() >= 3 and rewards.sum() > 0 and len(episodes) == firsts.sum()
        for t, env, ret, length in episodes:
            t, env = int(t), int(env)
            begun = np.flatnonzero(firsts[:t, env])
            start = begun[-1] + 1 if len(begun) else 0
            assert ret == pytest.approx(rewards[start:t + 1, env].sum()) and length == t + 1 - start


if __name__ == "__main__":
    ppo = load("ppo")
    if ppo.procgen.__name__ != "procgen":
        sys.exit("record with procgen-mirror (Python 3.11 or 3.12): the recording stands for it")
    actions = np.random.default_rng(0).integers(0, 15, size=(STEPS, NUM_ENVS))
    arrays = {"actions": actions}
    for name, setting in SETTINGS.items():
        arrays.update({f"{name}_{key}": value for key, value in rollout(ppo, actions, **setting).items()})
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    np.savez_compressed(DATA, **arrays)
    print(f"{DATA}: {os.path.getsize(DATA) / 1e3:.0f} KB")
