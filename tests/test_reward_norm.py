"""Reward normalisation: the running std of a discounted return (gamma 0.99 in the official code, the agent's in
CleanRL: --norm-reward-gamma), clip 10; and CleanRL's other choices that main() hands the learner (Adam's epsilon,
the initialisation)."""
import math
import os

import numpy as np
import pytest
import torch

from conftest import load, run_tiny


def test_reward_normalizer_matches_running_return_statistics(script):
    torch.manual_seed(0)
    T, N = 16, 3
    norm = script.RewardNormalizer(N)
    all_returns, ret = [], np.zeros(N)
    for _ in range(3):
        rewards = torch.randn(T, N) * 5
        firsts = torch.rand(T, N) < 0.2
        out = norm(rewards, firsts)
        for t in range(T):  # an episode's discounted return restarts at its first frame
            ret = rewards[t].numpy() + 0.99 * ret * (~firsts[t].numpy())
            all_returns.append(ret.copy())
        x = np.array(all_returns, dtype=np.float64).ravel()
        # running moments start from (mean 0, var 1, count 1e-4) and absorb every return so far
        count = 1e-4 + x.size
        mean = x.sum() / count
        var = (1.0 * 1e-4 + ((x - x.mean()) ** 2).sum() + (x.mean() ** 2) * 1e-4 * x.size / count) / count
        np.testing.assert_allclose(float(norm.var), var, rtol=1e-6)
        np.testing.assert_allclose(float(norm.mean), mean, rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), np.clip(rewards.numpy() / np.sqrt(var + 1e-8), -10, 10), rtol=1e-5)


def test_reward_normalizer_clips_to_ten(script):
    norm = script.RewardNormalizer(1)
    firsts = torch.ones(10000, 1, dtype=torch.bool)  # one-step episodes: returns are the rewards
    norm(torch.randn(10000, 1) * 0.01, firsts)  # running std ~0.01, barely moved by two outliers
    out = norm(torch.tensor([[1.0], [-1.0]]), firsts[:2])  # ~100 std away once normalised
    assert out.flatten().tolist() == [10.0, -10.0]


def test_reward_normalizer_uses_its_discount(script):
    """--norm-reward-gamma: the return whose std scales the rewards is discounted at that rate (0.999, CleanRL's)."""
    norm = script.RewardNormalizer(1, gamma=0.999)
    rewards, firsts = torch.ones(4, 1), torch.zeros(4, 1, dtype=torch.bool)
    norm(rewards, firsts)
    assert float(norm.ret) == pytest.approx(1 + 0.999 + 0.999 ** 2 + 0.999 ** 3)


def test_pytorch_init_is_pytorchs_default_with_orthogonal_heads(script):
    """--init pytorch (CleanRL PPO's): each conv and linear layer as PyTorch draws it (uniform within 1/sqrt(fan_in),
    biases too), then the heads orthogonal with zero biases, gain 0.01 for the 15 logits and 1 for a value."""
    torch.manual_seed(0)
    agent = script.Agent(15)
    script.pytorch_init(agent)
    layers = [m for m in agent.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    heads = [m for m in layers if m.weight.shape[0] in (1, 15)]
    assert len(heads) == (3 if hasattr(script, "AuxBuffer") else 2)  # PPG: the policy network's aux value head too
    for layer in layers:
        w = layer.weight.flatten(1)
        if any(layer is head for head in heads):
            torch.testing.assert_close(w @ w.T, (0.01 if len(w) == 15 else 1.0) ** 2 * torch.eye(len(w)))
            assert not layer.bias.any()
        else:  # the official code's normed layers have per-unit norms of 0.64-1.4 and zero biases
            bound = 1 / math.sqrt(w.shape[1])
            assert 0.9 * bound < w.abs().max() <= bound and 0 < layer.bias.abs().max() <= bound


@pytest.mark.parametrize("name", ["ppo", "ppg_ewma"])
def test_the_flags_and_section_4s_adjustments_reach_the_learner(name, tmp_path, monkeypatch):
    """main() builds the normaliser with --norm-reward-gamma; Adam with --adam-eps (both optimisers in PPG), and under
    --batch-divisor 2 --adam-beta-adjust with the adjusted step size and betas (PPG's aux Adam: neither, App. B); the
    advantage moments with the adjusted decay; and --init pytorch re-initialises the agent before anything copies it
    (PPG-EWMA's proximal network)."""
    script, made, inits = load(name), [], []
    monkeypatch.setattr(script, "pytorch_init", lambda agent: inits.append(agent) or torch.nn.init.zeros_(
        next(agent.parameters())))

    class Recorded(script.RewardNormalizer):
        def __init__(self, num_envs, gamma=0.99, *rest):
            made.append(gamma)
            super().__init__(num_envs, gamma, *rest)
    monkeypatch.setattr(script, "RewardNormalizer", Recorded)
    run_dir, _ = run_tiny(script.__name__, tmp_path, "--norm-reward-gamma", "0.9", "--adam-eps", "0.001",
                          "--init", "pytorch", "--learning-rate", "1e-12", "--batch-divisor", "2", "--adam-beta-adjust",
                          iterations=2)  # 2 envs: 4 iterations of 8 env steps (PPG: one phase, N_pi 2 x C)
    state = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert made == [0.9]
    optimizers = [k for k in state if k.endswith("optimizer")]
    assert optimizers and all(g["eps"] == 0.001 for k in optimizers for g in state[k]["param_groups"])
    [adjusted] = state["optimizer"]["param_groups"]  # Adam's step size / sqrt(C), its betas ^ (1/C) (App. D)
    assert math.isclose(adjusted["lr"], 1e-12 / math.sqrt(2))  # not approx: its 1e-12 absolute tolerance
    assert adjusted["betas"] == pytest.approx((0.9 ** 0.5, 0.999 ** 0.5))
    if name in ("ppg", "ppg_ewma"):
        [aux] = state["aux_optimizer"]["param_groups"]
        assert math.isclose(aux["lr"], 1e-12) and aux["betas"] == pytest.approx((0.9, 0.999))
    decay = 1 / 3  # the default 0 at C = 2 (Section 4): 2 / (1 - decay) - 1 = 2 iterations, 1 x C
    # 4 iterations of 8 advantages, each iteration's weighted down by the decay at every later one
    assert float(state["adv_moments"]["weight"]) == pytest.approx(8 * sum(decay ** i for i in range(4)))
    assert len(inits) == 1 and isinstance(inits[0], script.Agent)
    first = [v for k, v in state["agent"].items() if k.endswith("weight")][0]  # zeroed by the stand-in, then barely
    copies = [v for k, v in state.get("ewma", {}).items() if k.endswith("weight")][:1]  # moved (learning rate 1e-12)
    assert all(float(w.abs().max()) < 1e-9 for w in [first] + copies) and (copies or "ewma" not in name)
