"""GAE (Schulman et al. 2015) against a plain per-environment loop, episode boundaries included; and the rollout
that feeds it: each stored frame beside its own reward and episode start."""
import numpy as np
import pytest
import torch

from conftest import StatelessEnv, load


def reference_gae(rewards, values, firsts, next_value, next_first, gamma, lam):
    """One environment at a time, straight from the definition: delta_t = r_t + gamma V_{t+1} - V_t
    (no bootstrap if the episode ended after step t), A_t = sum_k (gamma lam)^k delta_{t+k} within the episode."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total, discount = 0.0, 1.0
            for k in range(t, T):
                ended = firsts[k + 1, n] if k + 1 < T else next_first[n]
                v_next = 0.0 if ended else (values[k + 1, n] if k + 1 < T else next_value[n])
                total += discount * (rewards[k, n] + gamma * v_next - values[k, n])
                if ended:
                    break
                discount *= gamma * lam
            adv[t, n] = total
    return adv


@pytest.mark.parametrize("name", ["ppo", "ppg"])
def test_gae_matches_definition_with_episode_boundaries(name):
    compute_gae = load(name).compute_gae
    g = torch.Generator().manual_seed(0)
    T, N = 12, 5
    rewards = torch.randn(T, N, generator=g, dtype=torch.float64)
    values = torch.randn(T, N, generator=g, dtype=torch.float64)
    firsts = torch.rand(T, N, generator=g) < 0.2
    firsts[0] = True
    next_value = torch.randn(N, generator=g, dtype=torch.float64)
    next_first = torch.tensor([True, False, False, True, False])
    adv, returns = compute_gae(rewards, values, firsts, next_value, next_first, 0.99, 0.9)
    expected = reference_gae(rewards.numpy(), values.numpy(), firsts.numpy(), next_value.numpy(),
                             next_first.numpy(), 0.99, 0.9)
    np.testing.assert_allclose(adv.numpy(), expected, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(returns.numpy(), expected + values.numpy(), rtol=1e-10, atol=1e-10)


def test_gae_by_hand_three_steps_with_an_episode_end():
    """Episode ends after step 1 (obs 2 is a first frame): step 1 does not bootstrap from V_2."""
    compute_gae = load("ppo").compute_gae
    r = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    v = torch.tensor([[0.5], [0.25], [1.0]], dtype=torch.float64)
    firsts = torch.tensor([[True], [False], [True]])
    gamma, lam = 0.9, 0.5
    adv, _ = compute_gae(r, v, firsts, torch.tensor([2.0], dtype=torch.float64), torch.tensor([False]), gamma, lam)
    d2 = 3.0 + gamma * 2.0 - 1.0
    d1 = 2.0 - 0.25
    d0 = 1.0 + gamma * 0.25 - 0.5
    np.testing.assert_allclose(adv[:, 0].numpy(), [d0 + gamma * lam * d1, d1, d2], rtol=1e-12)


@pytest.mark.parametrize("name", ["ppo", "ppg_ewma"])
def test_bootstrap_value_is_the_current_networks(name):
    """As the official code: a (possibly stale) rollout's last value is recomputed by the network being trained,
    the other values are those stored at collection; at the run's --gamma and --gae-lambda."""
    module = load(name)
    args = module.parse_args(["--num-envs", "4", "--num-steps", "8", "--num-minibatches", "2", "--no-norm-adv",
                              "--gamma", "0.9", "--gae-lambda", "0.8"])  # neither a default nor another discount
    g = torch.Generator().manual_seed(0)
    T, N = 8, 4
    rollout = module.new_rollout(T, N, "cpu")
    rollout["rewards"].copy_(torch.randn(T, N, generator=g))
    rollout["values"].copy_(torch.randn(T, N, generator=g))
    rollout["next_obs"] = torch.randint(0, 256, (N, 64, 64, 3), dtype=torch.uint8, generator=g)
    rollout["next_first"] = torch.tensor([False, True, False, False])
    torch.manual_seed(1)
    agent = module.Agent(15)
    with torch.no_grad():
        next_value = agent(rollout["next_obs"])[1]
    batch = module.make_batch(rollout, agent, module.AdvantageMoments(0.0), args)
    expected = reference_gae(rollout["rewards"].numpy(), rollout["values"].numpy(), rollout["firsts"].numpy(),
                             next_value.numpy(), rollout["next_first"].numpy(), args.gamma, args.gae_lambda)
    np.testing.assert_allclose(batch["advantages"].view(T, N).numpy(), expected, rtol=1e-5, atol=1e-5)
    # the last step of env 0 bootstraps from the network's value of the frame after the rollout
    last = rollout["rewards"][-1, 0] + args.gamma * next_value[0] - rollout["values"][-1, 0]
    assert float(batch["advantages"].view(T, N)[-1, 0]) == pytest.approx(float(last), rel=1e-5)


class EpisodeCounter(StatelessEnv):
    """Env e's episodes last e + 1 steps; each frame shows its step k within the episode (0: a first frame), and the
    step from a frame showing k pays k + 1: an episode of L steps returns L (L + 1) / 2."""
    def __init__(self, num_envs):
        super().__init__(None, num_envs, None, None, None, None)
        self.k = np.zeros(num_envs, dtype=int)
        self.obs = self.next_frame()

    def step(self, actions):
        reward, lengths = (self.k + 1).astype(np.float32), np.arange(1, self.num_envs + 1)
        self.first = self.k + 1 == lengths
        self.k = np.where(self.first, 0, self.k + 1)
        self.obs = self.next_frame()
        return self.obs, reward, self.first, (lengths * (lengths + 1) / 2, lengths)  # read where first

    def next_frame(self):
        return np.broadcast_to(self.k[:, None, None, None], (self.num_envs, 64, 64, 3)).astype(np.uint8)


@pytest.mark.parametrize("name", ["ppo", "ppg"])
def test_the_rollout_stores_each_frame_beside_its_reward_and_episode_start(name, device):
    """What GAE reads: firsts[t] marks frame t as an episode's first and rewards[t] is paid for acting on frame t (on a
    GPU, through the rollout's CUDA graph); every episode that ends is logged once, with its return and length."""
    module = load(name)
    torch.manual_seed(0)
    rollout, log = module.collect_rollout(EpisodeCounter(3), module.Agent(15).to(device), 7, device)
    k = rollout["obs"][..., 0, 0, 0].long()  # each stored frame's step within its episode
    assert k[:, 2].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert torch.equal(rollout["firsts"], k == 0) and torch.equal(rollout["rewards"], (k + 1).float())
    assert torch.equal(rollout["next_first"], rollout["next_obs"][:, 0, 0, 0] == 0)
    # in 7 steps: env 0 ends 7 episodes of 1 step, env 1 three of 2, env 2 two of 3
    episodes = sorted(zip(log["episode_lengths"], log["episode_returns"]))
    assert episodes == [(1, 1.0)] * 7 + [(2, 3.0)] * 3 + [(3, 6.0)] * 2
