"""The EWMA proximal network (Section 4, Appendix A)."""
import copy

import pytest
import torch
import torch.nn as nn

from conftest import run_tiny


def closed_form(thetas, beta):
    """(theta_t + beta theta_{t-1} + ... + beta^t theta_0) / (1 + beta + ... + beta^t)."""
    t = len(thetas) - 1
    weights = [beta ** (t - i) for i in range(t + 1)]
    return sum(w * th for w, th in zip(weights, thetas)) / sum(weights)


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.889, 0.99])
def test_ewma_equals_closed_form_weighted_average(ewma_script, beta, device):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).double().to(device)
    ewma = ewma_script.EWMA(net, beta)
    assert all(p.device.type == device.type for p in ewma.net.parameters())
    history = [[p.detach().clone() for p in net.parameters()]]  # theta_0: the weights when the EWMA starts
    for _ in range(7):
        with torch.no_grad():
            for p in net.parameters():
                p.add_(torch.randn_like(p))
        ewma.update(net)
        history.append([p.detach().clone() for p in net.parameters()])
    for i, p_prox in enumerate(ewma.net.parameters()):
        torch.testing.assert_close(p_prox, closed_form([h[i] for h in history], beta), rtol=1e-12, atol=1e-12)
    assert ewma.w == pytest.approx(sum(beta ** k for k in range(8)))


def test_ewma_network_takes_no_gradients_and_reset_restores_theta(ewma_script):
    net = nn.Linear(3, 2)
    ewma = ewma_script.EWMA(net, 0.9)
    assert all(not p.requires_grad for p in ewma.net.parameters())
    with torch.no_grad():
        net.weight.add_(1.0)
    ewma.update(net)
    assert not torch.equal(ewma.net.weight, net.weight)
    ewma.reset(net)
    assert torch.equal(ewma.net.weight, net.weight) and ewma.w == 1.0
    assert ewma.net.weight.data_ptr() != net.weight.data_ptr()  # a copy, not the same tensor


def test_ewma_net_is_a_separate_copy_of_the_agent(ewma_script):
    """PPO-EWMA averages the Agent; PPG-EWMA the policy network only (never the value network)."""
    agent = ewma_script.Agent(15)
    net = agent if ewma_script.__name__ == "ppo_ewma" else agent.policy
    ewma = ewma_script.EWMA(net, 0.889)
    obs = torch.randint(0, 256, (3, 64, 64, 3), dtype=torch.uint8)
    torch.testing.assert_close(ewma.net.logits(obs), agent.logits(obs))
    assert sum(p.numel() for p in ewma.net.parameters()) == sum(p.numel() for p in net.parameters())


def test_prox_log_probs_come_from_the_ewma_weights_at_each_step(ewma_script, monkeypatch):
    """The prox log-probs on minibatch k are a fresh forward of the EWMA of theta_0..theta_k: never cached.
    Checked by replaying the update with an independent closed-form EWMA of the recorded weights."""
    module = ewma_script
    torch.manual_seed(0)
    agent = module.Agent(15)
    policy = agent if module.__name__ == "ppo_ewma" else agent.policy
    args = module.parse_args(["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "4", "--no-cuda",
                              "--micro-batch-size", "0", "--learning-rate", "1e-2"])
    if hasattr(args, "update_epochs"):
        args.update_epochs = 1
    ewma = module.EWMA(policy, args.beta_prox)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)
    B = 32
    batch = {"obs": torch.randint(0, 256, (B, 64, 64, 3), dtype=torch.uint8), "actions": torch.randint(0, 15, (B,)),
             "advantages": torch.randn(B), "returns": torch.randn(B), "values": torch.randn(B),
             "adv_mean": torch.tensor(0.0), "adv_std": torch.tensor(1.0)}
    with torch.no_grad():
        batch["logp_behav"] = module.log_prob(agent.logits(batch["obs"]), batch["actions"])
    seen, thetas = [], [[p.detach().clone() for p in policy.parameters()]]
    real_policy_loss = module.policy_loss

    def recording_policy_loss(logp, logp_behav, logp_prox, *rest):
        seen.append(logp_prox.clone())
        return real_policy_loss(logp, logp_behav, logp_prox, *rest)
    real_step = optimizer.step

    def recording_step(*a, **k):
        out = real_step(*a, **k)
        thetas.append([p.detach().clone() for p in policy.parameters()])
        return out
    monkeypatch.setattr(module, "policy_loss", recording_policy_loss)
    monkeypatch.setattr(optimizer, "step", recording_step)
    torch.manual_seed(1)
    module.update(agent, optimizer, batch, args, ewma)
    assert len(seen) == 4 and len(thetas) == 5
    torch.manual_seed(1)
    perm = module.minibatches(args, torch.device("cpu"))  # the same minibatches as the update drew
    reference = copy.deepcopy(policy)
    for k, idx in enumerate(perm):
        with torch.no_grad():
            for i, p in enumerate(reference.parameters()):
                p.copy_(closed_form([t[i] for t in thetas[:k + 1]], args.beta_prox))
            expected = module.log_prob(reference.logits(batch["obs"][idx]), batch["actions"][idx])
        torch.testing.assert_close(seen[k], expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(seen[3], seen[0])


def test_beta_prox_zero_makes_prox_the_current_network(ewma_script, tmp_path):
    """With beta_prox = 0 the EWMA is theta itself after every step, so on every minibatch prox = theta:
    the logged KL against prox and the clip fraction are exactly 0 (a quick check of the EWMA), the capped
    fraction too, while the policy still learns (the importance weight pi_theta/pi_behav is not 1)."""
    _, rows = run_tiny(ewma_script.__name__, tmp_path, "--beta-prox", "0", iterations=2)
    assert all(float(r["approx_kl"]) == 0.0 and float(r["clipfrac"]) == 0.0 for r in rows)
    assert all(float(r["imp_samp_capfrac"]) == 0.0 for r in rows)
    assert all(float(r["policy_loss"]) != 0.0 for r in rows)
