"""How an epoch is cut into minibatches: whole trajectories (--minibatch-by env, the official code) or single
timesteps (--minibatch-by step, CleanRL). Indices point into the batch flattened from (num_steps, num_envs)."""
import pytest
import torch

from conftest import load, tiny_argv


def epoch(name, *flags, seed=0):
    module = load(name)
    args = module.parse_args(tiny_argv(name, "--num-steps", "32", *flags))  # 32 steps, whatever the tiny config
    torch.manual_seed(seed)
    return args, [mb.tolist() for mb in module.minibatches(args, torch.device("cpu"))]


def as_steps_and_envs(mb, num_envs):
    return [(i // num_envs, i % num_envs) for i in mb]


@pytest.mark.parametrize("name", ["ppo", "ppg_ewma"])
@pytest.mark.parametrize("by", ["env", "step"])
def test_every_step_once_per_epoch_in_equal_minibatches(name, by):
    args, mbs = epoch(name, "--num-envs", "8", "--num-minibatches", "4", "--minibatch-by", by)
    assert len(mbs) == 4 and {len(mb) for mb in mbs} == {8 * args.num_steps // 4}
    assert sorted(i for mb in mbs for i in mb) == list(range(8 * args.num_steps))


def test_by_env_minibatches_are_whole_trajectories():
    args, mbs = epoch("ppo", "--num-envs", "8", "--num-minibatches", "4", "--minibatch-by", "env")
    envs_seen = []
    for mb in mbs:
        pairs = as_steps_and_envs(mb, 8)
        envs = sorted({n for _, n in pairs})
        assert len(envs) == 2 and sorted(pairs) == sorted((t, n) for t in range(args.num_steps) for n in envs)
        envs_seen += envs
    assert sorted(envs_seen) == list(range(8))
    flags = ["--num-envs", "8", "--num-minibatches", "4", "--minibatch-by", "env"]
    orders = {tuple(sorted({n for _, n in as_steps_and_envs(epoch("ppo", *flags, seed=s)[1][0], 8)})) for s in range(6)}
    assert len(orders) > 1  # environments are shuffled between epochs


def test_by_env_with_more_minibatches_than_envs_cuts_trajectories_in_consecutive_chunks():
    args, mbs = epoch("ppo", "--num-envs", "2", "--num-minibatches", "8", "--minibatch-by", "env")
    assert len(mbs) == 8
    for k, mb in enumerate(mbs):
        pairs = as_steps_and_envs(mb, 2)
        env = pairs[0][1]
        assert {n for _, n in pairs} == {env} and [t for t, _ in pairs] == list(range(pairs[0][0], pairs[0][0] + 8))
        assert pairs[0][0] == 8 * (k % 4)  # one environment's 4 chunks back to back, in time order
    assert sorted(i for mb in mbs for i in mb) == list(range(64))


def test_by_step_minibatches_mix_environments_and_times():
    args, mbs = epoch("ppo", "--num-envs", "8", "--num-minibatches", "4", "--minibatch-by", "step")
    pairs = as_steps_and_envs(mbs[0], 8)
    assert len({n for _, n in pairs}) == 8 and len({t for t, _ in pairs}) > 16


def test_update_uses_the_chosen_minibatches(monkeypatch):
    """update() takes its minibatches from minibatches(): the same indices, in the same order."""
    module = load("ppo")
    args = module.parse_args(tiny_argv("ppo", "--update-epochs", "1", "--micro-batch-size", "0"))
    seen = []
    real_agent = module.Agent(15)
    torch.manual_seed(1)
    expected = [mb.tolist() for mb in module.minibatches(args, torch.device("cpu"))]

    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = real_agent

        def forward(self, obs):
            seen.append(obs[:, 0, 0, 0].long().tolist())
            return self.inner(obs)
    T, N = args.num_steps, args.num_envs
    obs = torch.zeros(T * N, 64, 64, 3, dtype=torch.uint8)
    obs[:, 0, 0, 0] = torch.arange(T * N) % 256  # each frame's first pixel names its index (mod 256)
    batch = {"obs": obs, "actions": torch.zeros(T * N, dtype=torch.long), "logp_behav": torch.full((T * N,), -2.7),
             "advantages": torch.randn(T * N), "returns": torch.randn(T * N), "values": torch.randn(T * N),
             "adv_mean": torch.tensor(0.0), "adv_std": torch.tensor(1.0)}
    batch["logp_old"] = batch["logp_behav"]
    torch.manual_seed(1)
    module.update(Recorder(), torch.optim.Adam(real_agent.parameters()), batch, args)
    assert seen == [[i % 256 for i in mb] for mb in expected]


@pytest.mark.parametrize("flags", [["--num-envs", "6", "--num-minibatches", "4"],  # neither divides the other
                                   ["--num-envs", "2", "--num-minibatches", "6"],  # 3 chunks do not divide 32 steps
                                   ["--num-envs", "4", "--num-minibatches", "6"]])
def test_by_env_refuses_minibatches_that_cut_trajectories_unevenly(flags, bad_argument):
    bad_argument("ppo", flags + ["--minibatch-by", "env"], "--num-minibatches")
