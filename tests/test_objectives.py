"""The losses: PPO's clipped objective, the decoupled objectives of Section 2, the value loss, and the whole loss
whose gradient update() steps on."""
import copy
import math

import pytest
import torch

from conftest import SCRIPTS, RecordingSGD, load, update_extra


def sample(n=64, seed=0, spread=0.3):
    g = torch.Generator().manual_seed(seed)
    logp_behav = -torch.rand(n, generator=g, dtype=torch.float64) * 3
    logp_prox = logp_behav + spread * torch.randn(n, generator=g, dtype=torch.float64)
    logp = logp_behav + spread * torch.randn(n, generator=g, dtype=torch.float64)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    return logp, logp_prox, logp_behav, adv


def loss_and_grad(fn, logp, *args):
    logp = logp.clone().requires_grad_(True)
    loss, diag = fn(logp, *args)
    loss.backward()
    return loss.detach(), logp.grad, diag


def test_ppo_loss_matches_clipped_objective_by_hand():
    ppo = load("ppo")
    logp, _, logp_old, adv = sample()
    loss, _ = ppo.policy_loss(logp, logp_old, adv, 0.2, 0.0, 100.0)
    r = torch.exp(logp - logp_old)
    expected = -torch.minimum(r * adv, torch.clamp(r, 0.8, 1.2) * adv).mean()  # eq. 7
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["ppo_ewma", "ppg_ewma"])
@pytest.mark.parametrize("clip_coef,kl_penalty", [(0.2, 0.0), (0.0, 0.7), (0.2, 0.7)])
@pytest.mark.parametrize("imp_samp_max", [100.0, 1.3])  # no weight capped; 13 of the 64 capped
def test_decoupled_equals_ppo_when_prox_is_behav(name, clip_coef, kl_penalty, imp_samp_max):
    """Section 2's sanity check: with prox = behav the decoupled loss is PPO's, in value and gradient, cap included."""
    ppo, ewma = load("ppo"), load(name)
    logp, _, logp_behav, adv = sample(spread=0.5)
    l0, g0, d0 = loss_and_grad(ppo.policy_loss, logp, logp_behav, adv, clip_coef, kl_penalty, imp_samp_max)
    l1, g1, d1 = loss_and_grad(ewma.policy_loss, logp, logp_behav, logp_behav, adv, clip_coef, kl_penalty,
                               imp_samp_max)
    assert torch.equal(l0, l1) and torch.equal(g0, g1)
    assert torch.equal(d0["clipfrac"], d1["clipfrac"]) and d1["imp_samp_capfrac"] == d0["imp_samp_capfrac"]
    assert (d0["imp_samp_capfrac"] > 0) == (imp_samp_max < 100)


def test_decoupled_clipped_objective_by_hand():
    """(pi_prox/pi_behav) * min(r A, clip(r, 1-eps, 1+eps) A), r = pi_theta/pi_prox."""
    ewma = load("ppo_ewma")
    logp, logp_prox, logp_behav, adv = sample(seed=1)
    loss, diag = ewma.policy_loss(logp, logp_behav, logp_prox, adv, 0.2, 0.0, 100.0)
    p, p_prox, p_behav = logp.exp(), logp_prox.exp(), logp_behav.exp()
    r = p / p_prox
    expected = -((p_prox / p_behav) * torch.minimum(r * adv, torch.clamp(r, 0.8, 1.2) * adv)).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    # clip fraction is measured against prox, the policy that is clipped against
    assert float(diag["clipfrac"]) == pytest.approx(float(((r < 0.8) | (r > 1.2)).double().mean()))


def test_importance_weight_is_capped_at_imp_samp_max_and_gradients_flow():
    ewma = load("ppo_ewma")
    logp = torch.tensor([-0.1, -0.2, -1.0], dtype=torch.float64)
    logp_behav = torch.tensor([-10.0, -0.3, -1.1], dtype=torch.float64)  # first ratio e^9.9 ~ 20000
    adv = torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
    loss, grad, diag = loss_and_grad(ewma.policy_loss, logp, logp_behav, logp_behav, adv, 0.0, 0.0, 100.0)
    # the capped weight pi/pi_behav is exactly 100 in value; its gradient is d(100 e^{logp - logp.detach()})/dlogp = 100
    weights = torch.tensor([100.0, math.exp(0.1), math.exp(0.1)], dtype=torch.float64)
    torch.testing.assert_close(loss, -(weights * adv).mean())
    torch.testing.assert_close(grad, -(weights * adv) / 3)
    assert float(diag["imp_samp_capfrac"]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("name", ["ppo", "ppo_ewma", "ppg", "ppg_ewma"])
def test_clipping_off_with_clip_coef_zero(name):
    """--clip-coef 0: no clipping at all; the surrogate is the importance-sampled policy gradient (eq. 6)."""
    module = load(name)
    logp, _, logp_behav, adv = sample(spread=1.0, seed=3)
    args = (logp_behav, adv, 0.0, 0.0, 0.0) if name in ("ppo", "ppg") else (logp_behav, logp_behav, adv, 0.0, 0.0, 0.0)
    loss, _ = module.policy_loss(logp, *args)
    torch.testing.assert_close(loss, -(torch.exp(logp - logp_behav) * adv).mean())


def stale_sample(n=256, seed=5):
    """Very stale data: the behaviour policy gave many actions a probability far below the current one."""
    logp, _, logp_behav, adv = sample(n, seed, spread=0.3)
    g = torch.Generator().manual_seed(seed + 1)
    logp_behav = logp_behav - 8 * torch.rand(n, generator=g, dtype=torch.float64)  # ratios up to e^8 ~ 3000
    return logp, logp_behav, adv


def capped_clipped_loss_by_hand(logp, logp_old, adv, eps, cap):
    """Appendix B's cap written out: the weight pi/pi_old is min(r, cap) in value, with gradient cap * dlogp where
    it is capped; the clipped branch is clip(r) times the constant pi_old/pi_old_capped = min(1, cap/r)."""
    r = torch.exp(logp - logp_old)
    is_capped = r.detach() > cap
    weight = torch.where(is_capped, cap * torch.exp(logp - logp.detach()), r)
    factor = torch.where(is_capped, cap / r.detach(), torch.ones_like(r))
    return torch.maximum(-adv * weight, -adv * torch.clamp(r, 1 - eps, 1 + eps) * factor).mean()


@pytest.mark.parametrize("name", ["ppo", "ppg"])
def test_baseline_caps_the_importance_weight_on_stale_data(name):
    """Fig. 1's baselines (old = behav or recent) cap pi_theta/pi_old at 100 too (Appendix B, official code)."""
    module = load(name)
    logp, logp_old, adv = stale_sample()
    loss, grad, diag = loss_and_grad(module.policy_loss, logp, logp_old, adv, 0.2, 0.0, 100.0)
    expected, expected_grad, _ = loss_and_grad(lambda lp, *a: (capped_clipped_loss_by_hand(lp, *a), {}),
                                               logp, logp_old, adv, 0.2, 100.0)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)
    share = float((logp - logp_old > math.log(100)).double().mean())
    assert 0.1 < share < 0.9 and float(diag["imp_samp_capfrac"]) == pytest.approx(share)
    # without the cap, the same batch's gradient is far larger: what made the uncapped baseline unlike the paper's
    _, grad_uncapped, _ = loss_and_grad(module.policy_loss, logp, logp_old, adv, 0.2, 0.0, 0.0)
    assert grad_uncapped.abs().max() > 5 * grad.abs().max()


@pytest.mark.parametrize("name", ["ppo", "ppo_ewma", "ppg", "ppg_ewma"])
def test_cap_changes_nothing_on_fresh_data(name):
    module = load(name)
    logp, logp_prox, logp_behav, adv = sample(spread=0.3, seed=7)
    args = (logp_behav, adv, 0.2, 0.3) if name in ("ppo", "ppg") else (logp_behav, logp_prox, adv, 0.2, 0.3)
    capped = loss_and_grad(module.policy_loss, logp, *args, 100.0)
    uncapped = loss_and_grad(module.policy_loss, logp, *args, 0.0)
    assert torch.equal(capped[0], uncapped[0]) and torch.equal(capped[1], uncapped[1])
    assert capped[2]["imp_samp_capfrac"] == uncapped[2]["imp_samp_capfrac"] == 0


def test_decoupled_cap_on_stale_data_by_hand():
    """The EWMA scripts' cap, on the same stale batch, with prox = behav: the baseline's capped loss exactly."""
    ewma = load("ppo_ewma")
    logp, logp_behav, adv = stale_sample()
    loss, grad, _ = loss_and_grad(ewma.policy_loss, logp, logp_behav, logp_behav, adv, 0.2, 0.0, 100.0)
    expected, expected_grad, _ = loss_and_grad(lambda lp, *a: (capped_clipped_loss_by_hand(lp, *a), {}),
                                               logp, logp_behav, adv, 0.2, 100.0)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


# --- The value loss and the whole loss of update() ---------------------------------------------------------------
@pytest.mark.parametrize("name", SCRIPTS)
def test_value_loss_by_hand_with_and_without_clipping(name):
    """MSE with no 0.5 (the official code); with clipping (CleanRL), the larger of the error and the error of the value
    held within 0.2 of the collected value, whose gradient is 0 where the clipped branch is the larger."""
    value = torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    returns, collected = torch.zeros(3, dtype=torch.float64), torch.tensor([0.5, 0.5, 2.5], dtype=torch.float64)
    value_loss = load(name).value_loss
    assert value_loss(value, returns, collected, 0).item() == pytest.approx(5 / 3)
    loss = value_loss(value, returns, collected, 0.2)
    loss.backward()
    # (1 - 0)^2 beats (0.7 - 0)^2; (0 - 0)^2 loses to (0.3 - 0)^2; (2 - 0)^2 loses to (2.3 - 0)^2
    assert loss.item() == pytest.approx((1 + 0.09 + 5.29) / 3)
    torch.testing.assert_close(value.grad, torch.tensor([2 / 3, 0.0, 0.0], dtype=torch.float64))


def one_step_case(module, clip_vloss=False, max_grad_norm=0.0, seed=0):
    """An agent, args for one optimiser step over one minibatch holding the whole batch (prox = behav = theta, so no
    clip binds), a batch with distinct advantages, returns and collected values, and coefficients far from 1."""
    torch.manual_seed(seed)
    agent = module.Agent(15)
    flags = ["--num-envs", "4", "--num-steps", "8", "--num-minibatches", "1", "--no-cuda", "--micro-batch-size", "0",
             "--ent-coef", "0.3", "--vf-coef", "0.7", "--max-grad-norm", str(max_grad_norm)]
    flags += ["--e-pi", "1", "--e-v", "1"] if hasattr(module, "aux_phase") else ["--update-epochs", "1"]
    args = module.parse_args(flags + ["--clip-vloss" if clip_vloss else "--no-clip-vloss"])
    args.micro_batch_size = 0
    b = 32
    batch = {"obs": torch.randint(0, 256, (b, 64, 64, 3), dtype=torch.uint8), "actions": torch.randint(0, 15, (b,)),
             "advantages": torch.randn(b), "returns": torch.randn(b), "values": torch.randn(b),
             "adv_mean": torch.tensor(0.0), "adv_std": torch.tensor(1.0)}
    with torch.no_grad():
        batch["logp_behav"] = batch["logp_old"] = module.log_prob(agent.logits(batch["obs"]), batch["actions"])
    return agent, args, batch


def hand_loss(agent, batch, ent_coef, vf_coef, clip_vloss):
    """PPO's loss written out at r = 1: -A pi/pi_behav - ent_coef H + vf_coef MSE (clipped around the collected value
    at 0.2 with clip_vloss), as a function of the agent's parameters."""
    logits, value = agent(batch["obs"])
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, batch["actions"][:, None]).squeeze(-1)
    policy = -(batch["advantages"] * torch.exp(logp - batch["logp_behav"])).mean()
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    error = (value - batch["returns"]) ** 2
    if clip_vloss:
        held = batch["values"] + (value - batch["values"]).clamp(-0.2, 0.2)
        error = torch.maximum(error, (held - batch["returns"]) ** 2)
    return policy - ent_coef * entropy + vf_coef * error.mean()


@pytest.mark.parametrize("clip_vloss", [False, True])
def test_update_steps_on_the_gradient_of_the_whole_loss(script, clip_vloss):
    """The gradient update() hands the optimiser is that of policy loss - ent_coef entropy + vf_coef value loss: the
    entropy is a bonus (its sign), and each coefficient is used; in PPG the value network's loss is in the same sum."""
    agent, args, batch = one_step_case(script, clip_vloss)
    optimizer = RecordingSGD(agent.parameters())
    script.update(agent, optimizer, batch, args, *update_extra(script, agent))
    assert len(optimizer.grads) == 1
    agent_at_step = copy.deepcopy(agent)
    for p, before in zip(agent_at_step.parameters(), optimizer.before[0]):
        p.data.copy_(before)
    expected = torch.autograd.grad(hand_loss(agent_at_step, batch, 0.3, 0.7, clip_vloss),
                                   list(agent_at_step.parameters()), allow_unused=True)
    for name, got, want in zip([n for n, _ in agent.named_parameters()], optimizer.grads[0], expected):
        if want is None:  # PPG's auxiliary value head: only the aux phase trains it
            assert got is None or not got.any(), name
        else:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, msg=name)


def test_max_grad_norm_scales_the_gradient_to_that_norm(script):
    """--max-grad-norm: the step's gradient is the whole loss's gradient scaled to that global norm."""
    agent, args, batch = one_step_case(script)
    twin = copy.deepcopy(agent)
    plain = RecordingSGD(twin.parameters())
    script.update(twin, plain, batch, args, *update_extra(script, twin))
    args.max_grad_norm = 0.01
    clipped = RecordingSGD(agent.parameters())
    script.update(agent, clipped, batch, args, *update_extra(script, agent))
    norm = torch.cat([g.flatten() for g in plain.grads[0] if g is not None]).norm()
    assert float(norm) > 0.01
    for g_plain, g_clipped in zip(plain.grads[0], clipped.grads[0]):
        if g_plain is not None:
            torch.testing.assert_close(g_clipped, g_plain * 0.01 / norm, rtol=1e-4, atol=1e-9)
