"""Reward normalisation as in the official code: running std of a gamma-0.99 discounted return, clip 10."""
import numpy as np
import torch


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
