"""The paper's knobs: batch-size-invariance adjustments (Section 4), EWMA advantage normalisation (Section 4),
the KL-penalty objective (eq. 8 and its decoupled form, Section 2), artificial staleness and the choice of old /
proximal policy (Section 5.1), and tiny real runs of the KL penalty, staleness and the old/proximal choice."""
import copy
import json
import math
import os

import numpy as np
import pytest
import torch

from conftest import EWMA_SCRIPTS, PPG_SCRIPTS, load, run_tiny, tiny_argv, update_extra

NUM_ACTIONS = 15
CPU = torch.device("cpu")


# --- helpers local to this file ----------------------------------------------------------------------------
def com_prox(beta):  # centre of mass of the proximal EWMA, in gradient steps (Section 4)
    return 1 / (1 - beta) - 1


def ess_adv(beta):  # effective sample size (span) of the advantage EWMA, in iterations (footnote 1)
    return 2 / (1 - beta) - 1


def divisor_argv(name, c):
    """--batch-divisor C, plus --update-epochs 1 where the script has policy epochs called that (PPO)."""
    return ["--batch-divisor", str(c)] + ([] if name in PPG_SCRIPTS else ["--update-epochs", "1"])


def call_policy_loss(module, logp, logp_behav, logp_prox, advantages, clip_coef, kl_penalty):
    """The script's policy_loss: PPO's against one old policy (prox = old), the EWMA scripts' decoupled one."""
    if module.__name__ in EWMA_SCRIPTS:
        return module.policy_loss(logp, logp_behav, logp_prox, advantages, clip_coef, kl_penalty, 100.0)
    return module.policy_loss(logp, logp_prox, advantages, clip_coef, kl_penalty, 100.0)


def categorical_log_prob(logits, actions):  # independent of the scripts' log_prob
    return torch.distributions.Categorical(logits=logits).log_prob(actions)


def random_rollout(module, args, seed=0):
    """new_rollout(...) filled with random data: uint8 frames, actions, behaviour log-probs, rewards, firsts."""
    g = torch.Generator().manual_seed(seed)
    T, N = args.num_steps, args.num_envs
    rollout = module.new_rollout(T, N, CPU)
    rollout["obs"].copy_(torch.randint(0, 256, rollout["obs"].shape, dtype=torch.uint8, generator=g))
    rollout["actions"].copy_(torch.randint(0, NUM_ACTIONS, (T, N), generator=g))
    rollout["logp_behav"].copy_(-torch.rand((T, N), generator=g) * 3 - 0.5)
    rollout["rewards"].copy_(torch.randn((T, N), generator=g))
    rollout["firsts"].copy_(torch.rand((T, N), generator=g) < 0.1)
    rollout["values"].copy_(torch.randn((T, N), generator=g))
    rollout["next_obs"] = torch.randint(0, 256, (N, 64, 64, 3), dtype=torch.uint8, generator=g)
    rollout["next_first"] = torch.rand(N, generator=g) < 0.1
    return rollout


# --- Batch-size invariance (Section 4) ---------------------------------------------------------------------
ADJUSTED = {"lr": "learning_rate", "adv": "adv_ewma_decay", "prox": "beta_prox", "n_pi": "n_pi"}  # what each changes


def test_the_listed_adjustments_are_exactly_those_batch_divisor_applies(script):
    """ADJUSTMENTS (the --no-adjust choices) names every value --batch-divisor changes, and nothing else."""
    default, args = script.parse_args([]), script.parse_args(divisor_argv(script.__name__, 4))
    changed = {knob for knob, attr in ADJUSTED.items()
               if hasattr(default, attr) and getattr(args, attr) != getattr(default, attr)}
    assert changed == set(script.ADJUSTMENTS)


def test_batch_divisor_applies_every_adjustment(script):
    name, c = script.__name__, 4
    default = script.parse_args([])
    args = script.parse_args(divisor_argv(name, c))
    assert default.num_envs == 64 and args.num_envs == default.num_envs // c == 16
    assert default.learning_rate == 5e-4
    assert args.learning_rate == pytest.approx(default.learning_rate / math.sqrt(c), rel=1e-12)
    assert args.learning_rate == pytest.approx(2.5e-4, rel=1e-12)
    assert default.adv_ewma_decay == 0.0
    assert ess_adv(args.adv_ewma_decay) == pytest.approx(c * ess_adv(default.adv_ewma_decay), rel=1e-9)
    assert args.adv_ewma_decay == pytest.approx((c - 1) / (c + 1), rel=1e-12)  # = 0.6 from the default 0
    assert args.adam_betas == default.adam_betas == (0.9, 0.999)  # raised only with --adam-beta-adjust
    if name in EWMA_SCRIPTS:
        assert default.beta_prox == 0.889
        assert com_prox(args.beta_prox) == pytest.approx(c * com_prox(default.beta_prox), rel=1e-9)
        expected = 1 - 1 / (c * (1 / (1 - 0.889) - 1) + 1)  # solve 1/(1-b)-1 = c (1/(1-0.889)-1) for b
        assert args.beta_prox == pytest.approx(expected, rel=1e-12)
        assert args.beta_prox == pytest.approx(0.9697, abs=1e-4)
    if name in PPG_SCRIPTS:
        assert default.n_pi == 32 and args.n_pi == c * default.n_pi == 128
        assert args.e_pi == 1


def test_no_adjust_drops_exactly_one_adjustment(script):
    name, c = script.__name__, 4
    default = script.parse_args([])
    adjusted = {"lr": default.learning_rate / math.sqrt(c),
                "adv": 1 - 2 / (c * ess_adv(default.adv_ewma_decay) + 1),
                "prox": 1 - 1 / (c * com_prox(getattr(default, "beta_prox", 0.0)) + 1),
                "n_pi": c * getattr(default, "n_pi", 0)}
    attr = ADJUSTED
    for dropped in script.ADJUSTMENTS:
        args = script.parse_args(divisor_argv(name, c) + ["--no-adjust", dropped])
        assert args.num_envs == default.num_envs // c  # the batch is divided whatever is dropped
        for knob in script.ADJUSTMENTS:
            value = getattr(args, attr[knob])
            if knob == dropped:
                assert value == getattr(default, attr[knob]), (dropped, knob)
            else:
                assert value == pytest.approx(adjusted[knob], rel=1e-12), (dropped, knob)
    # repeatable: dropping all of them leaves every knob at its default
    args = script.parse_args(divisor_argv(name, c) + [x for k in script.ADJUSTMENTS for x in ("--no-adjust", k)])
    for knob in script.ADJUSTMENTS:
        assert getattr(args, attr[knob]) == getattr(default, attr[knob])


def test_adam_beta_adjust_raises_betas_to_the_power_one_over_c(script):
    args = script.parse_args(divisor_argv(script.__name__, 4) + ["--adam-beta-adjust"])
    assert args.adam_betas == pytest.approx((0.9 ** 0.25, 0.999 ** 0.25), rel=1e-15)


@pytest.mark.parametrize("name", ["ppo", "ppo_ewma"])
def test_batch_divisor_needs_one_policy_epoch(name, bad_argument):
    module = load(name)
    assert module.parse_args([]).update_epochs == 3
    assert "must be 1 with --batch-divisor above 1" in bad_argument(name, ["--batch-divisor", "4"], "--update-epochs")
    assert module.parse_args(["--batch-divisor", "4", "--update-epochs", "1"]).num_envs == 16


def test_batch_divisor_must_divide_num_envs(bad_argument):  # the appendix's check: one script stands for all
    err = bad_argument("ppg_ewma", divisor_argv("ppg_ewma", 3), "--num-envs")
    assert "must be a multiple of --batch-divisor, got 64" in err


@pytest.mark.parametrize("name", ["ppo", "ppo_ewma", "ppg"])
def test_no_adjust_rejects_adjustments_that_do_not_apply(name, bad_argument):
    missing = set(ADJUSTED) - set(load(name).ADJUSTMENTS)
    assert missing
    for knob in missing:
        bad_argument(name, divisor_argv(name, 4) + ["--no-adjust", knob], "--no-adjust")


# --- Advantage normalisation with EWMA moments (Section 4) --------------------------------------------------
def test_advantage_moments_with_decay_zero_are_this_batch_population_mean_and_std(script):
    moments = script.AdvantageMoments(0.0)
    g = torch.Generator().manual_seed(0)
    for n in (7, 30):
        x = torch.randn(n, generator=g) * 3 + 1.5
        mean, std = moments(x)
        xs = x.double().numpy()
        assert float(mean) == pytest.approx(xs.mean(), rel=1e-6)
        assert float(std) == pytest.approx(xs.std(ddof=0), rel=1e-6)  # population std, previous batches forgotten


def test_advantage_moments_follow_the_size_weighted_ewma_recursion(script):
    b = 0.7
    moments = script.AdvantageMoments(b)
    g = torch.Generator().manual_seed(1)
    weight = total = total_sq = 0.0
    for n, loc, scale in ((5, 0.0, 1.0), (11, 2.0, 0.5), (7, -1.0, 3.0)):
        x = torch.randn((n, 2), generator=g) * scale + loc  # any shape: every element counts once
        mean, std = moments(x)
        xs = x.double().numpy()
        weight = b * weight + xs.size
        total = b * total + xs.sum()
        total_sq = b * total_sq + (xs ** 2).sum()
        m = total / weight
        assert float(mean) == pytest.approx(m, rel=1e-6, abs=1e-7)
        assert float(std) == pytest.approx(math.sqrt(total_sq / weight - m * m), rel=1e-6)
    assert float(std) != pytest.approx(xs.std(), rel=1e-3)  # the history matters with decay > 0


@pytest.mark.parametrize("decay", [0.0, 0.8])
def test_make_batch_normalises_the_advantages_with_the_moments(script, decay):
    """The batch's advantages are (A - mean) / (std + 1e-8), A from GAE (its definition, test_gae.py) and the moments
    those of this batch (decay 0: then mean 0 and std 1 exactly) or the size-weighted EWMA of the batches so far."""
    from test_gae import reference_gae
    T, N = 8, 3
    args = script.parse_args(["--num-envs", str(N), "--num-steps", str(T), "--num-minibatches", "1", "--no-cuda",
                              "--adv-ewma-decay", str(decay)])
    agent, moments, g = script.Agent(15), script.AdvantageMoments(decay), torch.Generator().manual_seed(2)
    weight = total = total_sq = 0.0
    for k, (loc, scale) in enumerate([(3.0, 2.0), (-1.0, 0.5)]):  # two batches unlike each other
        rollout = script.new_rollout(T, N, "cpu")
        rollout["rewards"] = torch.randn((T, N), generator=g) * scale + loc
        rollout["values"] = torch.randn((T, N), generator=g)
        rollout["firsts"] = torch.rand((T, N), generator=g) < 0.2
        rollout["next_obs"], rollout["next_first"] = rollout["obs"][-1], torch.ones(N, dtype=torch.bool)  # no bootstrap
        batch = script.make_batch(rollout, agent, moments, args)
        adv = reference_gae(rollout["rewards"].double().numpy(), rollout["values"].double().numpy(),
                            rollout["firsts"].numpy(), np.zeros(N), np.ones(N, dtype=bool), args.gamma, args.gae_lambda)
        weight, total = decay * weight + adv.size, decay * total + adv.sum()
        total_sq = decay * total_sq + (adv ** 2).sum()
        mean = total / weight
        std = math.sqrt(total_sq / weight - mean ** 2)
        expected = torch.from_numpy((adv - mean) / (std + 1e-8)).flatten().float()
        torch.testing.assert_close(batch["advantages"], expected, rtol=1e-4, atol=1e-5)
        if decay == 0:
            assert abs(float(batch["advantages"].mean())) < 1e-5
            assert float(batch["advantages"].std(unbiased=False)) == pytest.approx(1, abs=1e-4)
        elif k == 1:  # the first batch's statistics still count: not this batch's alone
            assert abs(float(batch["advantages"].mean())) > 0.1


# --- KL-penalty objective (eq. 8 and its decoupled form) ----------------------------------------------------------
def kl_case(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(n, generator=g, dtype=torch.float64) * 2 - 0.2
    logp_behav = logp + (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * 1.6  # |log ratio| <= 0.8 < log 100
    logp_prox = logp + (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) * 1.2
    advantages = torch.randn(n, generator=g, dtype=torch.float64)
    return logp, logp_behav, logp_prox, advantages


def hand_kl_loss(name, logp, logp_behav, logp_prox, advantages, beta):
    if name in EWMA_SCRIPTS:  # (pi_theta/pi_behav) A - beta KL[prox, theta], sampled KL estimate
        return (-advantages * torch.exp(logp - logp_behav)).mean() + beta * (0.5 * (logp - logp_prox) ** 2).mean()
    return (-advantages * torch.exp(logp - logp_prox)).mean() + beta * (0.5 * (logp - logp_prox) ** 2).mean()


@pytest.mark.parametrize("name", ["ppo", "ppo_ewma"])
def test_kl_penalty_loss_without_clipping_matches_hand_formula_and_finite_differences(name):
    module, beta = load(name), 0.7
    logp, logp_behav, logp_prox, advantages = kl_case()
    assert not torch.allclose(logp_prox, logp_behav)
    # ratios well outside [1-eps, 1+eps] for eps = 0.2: with clip_coef 0 none of them is clipped
    assert ((logp - logp_prox).abs() > math.log(1.2)).any()

    x = logp.clone().requires_grad_(True)
    loss, _ = call_policy_loss(module, x, logp_behav, logp_prox, advantages, 0.0, beta)
    assert loss.dtype == torch.float64
    expected = hand_kl_loss(name, logp, logp_behav, logp_prox, advantages, beta)
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-12, abs=1e-14)

    (grad,) = torch.autograd.grad(loss, x)
    h, fd = 1e-6, torch.zeros_like(logp)
    for i in range(len(logp)):
        up, down = logp.clone(), logp.clone()
        up[i] += h
        down[i] -= h
        f_up, _ = call_policy_loss(module, up, logp_behav, logp_prox, advantages, 0.0, beta)
        f_down, _ = call_policy_loss(module, down, logp_behav, logp_prox, advantages, 0.0, beta)
        fd[i] = (f_up - f_down) / (2 * h)
    assert torch.allclose(grad, fd, rtol=1e-6, atol=1e-9)
    # and the closed form: d/dlogp_i = (-A_i pi_theta/pi_behav + beta (logp_i - logp_prox_i)) / n
    old = logp_behav if name in EWMA_SCRIPTS else logp_prox
    closed = (-advantages * torch.exp(logp - old) + beta * (logp - logp_prox)) / len(logp)
    assert torch.allclose(grad, closed, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("name", ["ppo", "ppo_ewma"])
def test_kl_penalty_adds_to_the_clipped_objective(name):
    """Clipping and the KL penalty may both be on (eq. 8 beside eq. 7): the clipped surrogate plus beta * KL."""
    module, beta, eps = load(name), 0.3, 0.2
    logp, logp_behav, logp_prox, advantages = kl_case(seed=3)
    loss, _ = call_policy_loss(module, logp, logp_behav, logp_prox, advantages, eps, beta)
    r = torch.exp(logp - logp_prox)
    weight = torch.exp(logp_prox - logp_behav) if name in EWMA_SCRIPTS else torch.ones_like(r)
    surrogate = weight * torch.minimum(r * advantages, r.clamp(1 - eps, 1 + eps) * advantages)
    expected = -surrogate.mean() + beta * (0.5 * (logp - logp_prox) ** 2).mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-12, abs=1e-14)


def test_clip_coef_of_one_is_refused(bad_argument):
    """--clip-coef is epsilon in [0, 1): the loss clips log r to [log(1 - eps), log(1 + eps)], and log 0 does not exist.
    eps = 1 is refused by parse_args (one line, exit 2, nothing written), never a crash mid-run."""
    err = bad_argument("ppo", ["--clip-coef", "1"], "--clip-coef")
    assert "must be in [0, 1), got 1" in err


# --- Artificial staleness (Section 5.1) ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ppo", "ppo_ewma"])
def test_staleness_trains_on_the_rollout_collected_k_iterations_ago_with_its_behaviour_log_probs(
        name, tmp_path, monkeypatch):
    module, k, iterations = load(name), 2, 6  # iteration 6 trains on iteration 4's data, collected after an update
    collected, trained = [], []  # collected[i]: (state_dict, rollout) of iteration i+1
    real_collect, real_make_batch = module.collect_rollout, module.make_batch

    def collect_rollout(envs, agent, *rest, **kw):
        state = copy.deepcopy(agent.state_dict())
        out = real_collect(envs, agent, *rest, **kw)
        collected.append((state, out[0]))  # (rollout, its log)
        return out

    def make_batch(rollout, agent, adv_moments, args):
        batch = real_make_batch(rollout, agent, adv_moments, args)
        trained.append((len(collected), rollout, batch, copy.deepcopy(agent.state_dict())))
        return batch

    monkeypatch.setattr(module, "collect_rollout", collect_rollout)
    monkeypatch.setattr(module, "make_batch", make_batch)
    _, rows = run_tiny(name, tmp_path, "--staleness", str(k), iterations=iterations)

    assert [r["policy_loss"] == "" for r in rows] == [True] * k + [False] * (iterations - k)
    assert [it for it, *_ in trained] == list(range(k + 1, iterations + 1))
    for iteration, rollout, batch, state_now in trained:
        state_then, stale = collected[iteration - k - 1]
        assert rollout is stale, f"iteration {iteration} did not train on iteration {iteration - k}'s rollout"
        agent = module.Agent(NUM_ACTIONS)
        agent.load_state_dict(state_then)
        with torch.no_grad():
            logits = torch.cat([agent(o)[0] for o in batch["obs"].split(64)])
        expected = categorical_log_prob(logits, batch["actions"])
        assert torch.allclose(batch["logp_behav"], expected, atol=1e-5, rtol=0)
        if name == "ppo":  # the default --old-policy behav
            assert torch.equal(batch["logp_old"], batch["logp_behav"])
        if iteration == iterations:  # collected after an update: the test tells the two policies apart
            agent.load_state_dict(state_now)
            with torch.no_grad():
                now = categorical_log_prob(torch.cat([agent(o)[0] for o in batch["obs"].split(64)]), batch["actions"])
            assert (now - expected).abs().max() > 1e-4


# --- The old / proximal policy: behav or recent (Section 5.1) -------------------------------------------------
@pytest.mark.parametrize("name", ["ppo", "ppg"])
def test_old_policy_recent_is_the_current_policy_and_behav_is_the_stored_one(name):
    module = load(name)
    torch.manual_seed(0)
    agent = module.Agent(NUM_ACTIONS)
    for choice in ("recent", "behav"):
        args = module.parse_args(tiny_argv(name, "--old-policy", choice))
        rollout = random_rollout(module, args)
        batch = module.make_batch(rollout, agent, module.AdvantageMoments(args.adv_ewma_decay), args)
        if choice == "recent":
            with torch.no_grad():
                expected = categorical_log_prob(agent(batch["obs"])[0], batch["actions"])
            assert torch.allclose(batch["logp_old"], expected, atol=1e-5, rtol=0)
            assert not torch.allclose(batch["logp_old"], batch["logp_behav"], atol=1e-2)
        else:
            assert torch.equal(batch["logp_old"], rollout["logp_behav"].flatten())


@pytest.mark.parametrize("name", EWMA_SCRIPTS)
def test_prox_recent_is_the_current_policy(name):
    module = load(name)
    torch.manual_seed(0)
    agent = module.Agent(NUM_ACTIONS)
    args = module.parse_args(tiny_argv(name, "--prox", "recent"))
    rollout = random_rollout(module, args)
    batch = module.make_batch(rollout, agent, module.AdvantageMoments(args.adv_ewma_decay), args)
    with torch.no_grad():
        expected = categorical_log_prob(agent(batch["obs"])[0], batch["actions"])
    assert torch.allclose(batch["logp_recent"], expected, atol=1e-5, rtol=0)
    assert torch.equal(batch["logp_behav"], rollout["logp_behav"].flatten())  # importance sampling still uses behav


def test_the_loss_gets_the_chosen_old_or_prox_policy_and_the_loss_flags(script, monkeypatch):
    """micro_batch_loss hands policy_loss the log-probs that --old-policy recent or --prox recent chose (the two tests
    above: make_batch computes them), the batch's advantages, and --clip-coef, --kl-penalty and --imp-samp-max."""
    module, name = script, script.__name__
    torch.manual_seed(0)
    agent = module.Agent(NUM_ACTIONS)
    choice = ["--prox", "recent"] if name in EWMA_SCRIPTS else ["--old-policy", "recent"]
    args = module.parse_args(tiny_argv(name, *choice, "--clip-coef", "0.15", "--kl-penalty", "0.3",
                                       "--imp-samp-max", "4"))
    batch = module.make_batch(random_rollout(module, args), agent, module.AdvantageMoments(0.0), args)
    calls, idx = [], torch.arange(3, 9)
    monkeypatch.setattr(module, "policy_loss", lambda *given: calls.append(given) or (given[0].mean(), {}))
    module.micro_batch_loss(agent, batch, idx, args, *update_extra(module, agent),
                            *((True, True) if name in PPG_SCRIPTS else ()))  # PPG: train_pi, train_v
    [(logp, *old, advantages, clip_coef, kl_penalty, imp_samp_max)] = calls
    chosen = ["logp_behav", "logp_recent"] if name in EWMA_SCRIPTS else ["logp_old"]  # behav and prox, or old
    assert len(old) == len(chosen) and all(torch.equal(o, batch[k][idx]) for o, k in zip(old, chosen))
    assert not torch.equal(batch["logp_behav"], batch["logp_recent" if name in EWMA_SCRIPTS else "logp_old"])
    assert torch.equal(advantages, batch["advantages"][idx])
    assert (clip_coef, kl_penalty, imp_samp_max) == (0.15, 0.3, 4.0)


# --- Tiny real runs of the flags ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ppo", "ppg_ewma"])
def test_tiny_runs_with_kl_penalty_no_clipping_staleness_and_recent_policy(name, tmp_path):
    """--kl-penalty 0.5 --clip-coef 0 --staleness 1, with --old-policy recent (ppo) or --prox recent (ppg_ewma), and
    --adv-ewma-decay 0.9 in ppo.py: the run records them, clips nothing, and moves away from the recent policy."""
    iterations = 4  # PPG: two whole phases of 2 iterations
    extra = ["--kl-penalty", "0.5", "--clip-coef", "0", "--staleness", "1"]
    extra += ["--prox", "recent"] if name in EWMA_SCRIPTS else ["--old-policy", "recent"]
    extra += ["--adv-ewma-decay", "0.9"] if name == "ppo" else []
    run_dir, rows = run_tiny(name, tmp_path, *extra, iterations=iterations)

    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    assert config["kl_penalty"] == 0.5 and config["clip_coef"] == 0 and config["staleness"] == 1
    assert config["prox" if name in EWMA_SCRIPTS else "old_policy"] == "recent"
    assert config["adv_ewma_decay"] == pytest.approx(0.9 if name == "ppo" else 0.0, rel=1e-12)
    assert [int(r["iteration"]) for r in rows] == list(range(1, iterations + 1))
    assert rows[0]["policy_loss"] == ""  # staleness 1: the first iteration only collects
    for r in rows[1:]:
        for column in ("policy_loss", "value_loss", "entropy", "approx_kl", "adv_mean", "adv_std"):
            assert r[column] != "" and math.isfinite(float(r[column])), (r["iteration"], column)
        assert float(r["clipfrac"]) == 0  # --clip-coef 0: nothing is clipped
        assert float(r["approx_kl"]) > 0 and float(r["adv_std"]) > 0  # the policy moved away from the recent one
