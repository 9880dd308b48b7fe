# Tutorial: docs/README.md walks through this file top to bottom; `diff ppo.py ppo_ewma.py` is the paper.
"""PPO (Schulman et al. 2017) on Procgen, in one file: the baseline of
"Batch size-invariance for policy optimization" (Hilton, Cobbe, Schulman 2021).

    python ppo.py --env-id starpilot

The algorithm first, in the same sections in ppo.py, ppo_ewma.py, ppg.py and ppg_ewma.py; then an appendix of
machinery (argument checks, resume, workers, evaluation, checkpoints, logging), identical in all four files.
"""
import argparse
import collections
import contextlib
import csv
import io
import json
import math
import os
import platform
import random
import re
import shlex
import signal
import sys
import time

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# --- Arguments -----------------------------------------------------------------------------------
def parse_args(argv=None):
    p = ArgumentParser(prog=os.path.basename(__file__), description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # every flag's help shows its default
    a = p.add_argument
    # experiment
    a("--exp-name", default=os.path.basename(__file__)[:-3], help="name used in the run folder")
    a("--seed", type=number(int, f"[0, {MAX_SEED}]"), default=1, help="seeds python, numpy, torch and Procgen")
    a("--cuda", action=argparse.BooleanOptionalAction, default=True, help="use the GPU if there is one")
    a("--runs-dir", default="runs", help="parent folder of the run folder")
    # environment (Procgen, Cobbe et al. 2019)
    a("--env-id", default="starpilot", choices=PROCGEN_GAMES, metavar="GAME", help="one of the 16 Procgen games")
    a("--distribution-mode", default="easy", choices=("easy", "hard"), help="the paper used hard")
    a("--num-levels", type=number(int, f"[0, {MAX_LEVEL}]"), default=0, help="number of training levels (0 = unlimited)")
    a("--start-level", type=number(int, f"[0, {MAX_LEVEL}]"), default=0, help="first training level")
    a("--total-timesteps", type=POSITIVE, default=25_000_000, help="env steps in the whole run")
    a("--num-envs", type=POSITIVE, default=64, help="parallel environments (N)")
    a("--num-steps", type=POSITIVE, default=256, help="steps per environment per rollout (T)")
    # optimisation (Appendix B, Tables 1 and 2)
    a("--num-minibatches", type=POSITIVE, default=8, help="minibatches per epoch")
    a("--minibatch-by", default="env", choices=("env", "step"), help="whole trajectories (official code) or steps (CleanRL)")
    a("--update-epochs", type=POSITIVE, default=3, help="policy epochs per iteration (E)")
    a("--learning-rate", type=number(float, "(0, inf)"), default=5e-4, help="Adam step size (alpha)")
    a("--gamma", type=number(float, "[0, 1]"), default=0.999, help="discount (gamma)")
    a("--gae-lambda", type=number(float, "[0, 1]"), default=0.95, help="GAE bootstrapping parameter (lambda)")
    a("--clip-coef", type=number(float, "[0, 1)"), default=0.2, help="PPO clipping parameter (epsilon); 0 = no clipping")
    a("--kl-penalty", type=number(float, "[0, inf)"), default=0.0, help="KL penalty coefficient (beta in eq. 8); 0 = off")
    a("--ent-coef", type=number(float, "[0, inf)"), default=0.01, help="entropy coefficient")
    a("--vf-coef", type=number(float, "[0, inf)"), default=0.5, help="value function coefficient")
    a("--max-grad-norm", type=number(float, "[0, inf)"), default=0.0, help="gradient norm clip; 0 = off (official code)")
    a("--norm-reward", action=argparse.BooleanOptionalAction, default=True, help="reward normalisation")
    a("--norm-adv", action=argparse.BooleanOptionalAction, default=True, help="advantage normalisation")
    a("--adv-ewma-decay", type=number(float, "[0, 1)"), default=0.0, help="EWMA decay of advantage statistics (Section 4)")
    # the paper's experiments
    a("--old-policy", default="behav", choices=("behav", "recent"),
      help="the single old policy: behav = the data's collector, recent = the policy before this iteration (Section 5.1)")
    a("--imp-samp-max", type=number(float, "0 or [1, inf)"), default=100.0,
      help="cap on the importance weight pi_theta/pi_old (App. B); 0 = no cap")
    a("--staleness", type=NON_NEGATIVE, default=0, help="train on the rollout collected K iterations ago (Section 5.1)")
    a("--batch-divisor", type=POSITIVE, default=1, help="divide the batch size by C with Section 4's adjustments")
    a("--no-adjust", action="append", default=[], choices=ADJUSTMENTS, help="with --batch-divisor: drop one adjustment (repeatable)")
    a("--adam-beta-adjust", action="store_true", help="with --batch-divisor: raise Adam's betas to the power 1/C (Appendix D)")
    add_machinery_flags(a)  # long runs, watching and testing the agent, speed (appendix)
    args = p.parse_args(argv)
    if args.resume or args.evaluate:
        return resume_args(p, argv, args)  # the run's own config.json
    if args.batch_divisor > 1 and args.update_epochs != 1:
        p.error(f"argument --batch-divisor: needs --update-epochs 1 (Section 4), got {args.update_epochs}")
    check_args(p, args)  # every other argument that depends on others, before anything is written
    apply_batch_size_invariance(args)
    return args


# --- Batch-size invariance (Section 4) -------------------------------------------------------------------
ADJUSTMENTS = ("lr", "adv")  # Section 4's batch-size-invariance adjustments that apply to this script


def apply_batch_size_invariance(args):
    """Section 4: to divide the batch size by C, divide the envs by C and adjust the rest to match."""
    c = args.batch_divisor
    args.adam_betas = (0.9, 0.999)  # Adam's defaults
    if c == 1:
        return  # nothing to adjust
    args.num_envs //= c
    if "lr" not in args.no_adjust:
        args.learning_rate /= math.sqrt(c)  # Adam step size / sqrt(C) (Section 3.2, Appendix C)
    if "adv" not in args.no_adjust:  # effective sample size 2/(1-beta)-1, in iterations, times C (footnote 1)
        args.adv_ewma_decay = 1 - 2 / (c * (2 / (1 - args.adv_ewma_decay) - 1) + 1)
    if args.adam_beta_adjust:
        args.adam_betas = tuple(b ** (1 / c) for b in args.adam_betas)  # Appendix D


# --- Environment: Procgen as a gymnasium VectorEnv ------------------------------------------------
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
                 "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")
NUM_ACTIONS = 15  # every Procgen game has the same 15 actions


class ProcgenVecEnv(gym.vector.VectorEnv):
    """Procgen's gym3 vector env behind gymnasium's VectorEnv interface. Procgen resets an environment inside the
    step that ends its episode (the observation returned is the next level's first frame): gymnasium's SAME_STEP
    autoreset. Time-outs are episode ends too, so everything is `terminated` (as in the official code)."""
    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_id, num_envs, distribution_mode, num_levels, start_level, seed):
        self.venv = import_procgen().ProcgenGym3Env(
            num=num_envs, env_name=env_id, distribution_mode=distribution_mode, num_levels=num_levels,
            start_level=start_level, rand_seed=seed, num_threads=min(16, len(os.sched_getaffinity(0))))
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
        self.single_action_space = gym.spaces.Discrete(self.venv.ac_space.eltype.n)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed=None, options=None):
        _, obs, _ = self.venv.observe()
        return obs["rgb"], {}

    def step(self, actions):
        self.venv.act(np.asarray(actions, dtype=np.int32))
        reward, obs, first = self.venv.observe()
        return obs["rgb"], reward.astype(np.float32), first.copy(), np.zeros_like(first), {}


def make_env(args, seed):
    env = ProcgenVecEnv(args.env_id, args.num_envs, args.distribution_mode, args.num_levels, args.start_level, seed)
    return gym.wrappers.vector.RecordEpisodeStatistics(env)  # every finished episode's return and length


# --- Network: IMPALA CNN (Espeholt et al. 2018) ------------------------------------------------------
def normed(layer, scale):
    """The official code's initialisation (not CleanRL's): every output unit's weight vector is
    rescaled to norm `scale` and biases start at zero, so each layer's output scale is set by design."""
    with torch.no_grad():
        layer.weight.mul_(scale / layer.weight.flatten(1).norm(dim=1).view(-1, *[1] * (layer.weight.dim() - 1)))
        layer.bias.zero_()
    return layer


class ResidualBlock(nn.Module):
    def __init__(self, channels, scale):
        super().__init__()
        self.conv0 = normed(nn.Conv2d(channels, channels, 3, padding=1), scale)
        self.conv1 = normed(nn.Conv2d(channels, channels, 3, padding=1), scale)

    def forward(self, x):
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class ConvSequence(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = normed(nn.Conv2d(in_channels, out_channels, 3, padding=1), 1.0)
        self.blocks = nn.Sequential(ResidualBlock(out_channels, scale), ResidualBlock(out_channels, scale))

    def forward(self, x):
        return self.blocks(F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1))


class ImpalaCNN(nn.Module):
    """uint8 frames (B, 64, 64, 3) -> features (B, 256). 3 stages of 16, 32, 32 channels."""
    def __init__(self, channels=(16, 32, 32), out_features=256):
        super().__init__()
        # Each residual conv is scaled so that a stage's 2 blocks and the 3 stages add unit variance:
        # sqrt(1/sqrt(3 stages) / sqrt(2 blocks)) = 6 ** -0.25 ~ 0.64 (official code).
        scale = 6 ** -0.25
        self.stages = nn.Sequential(*[ConvSequence(c_in, c_out, scale) for c_in, c_out in zip((3,) + channels[:-1], channels)])
        self.dense = normed(nn.Linear(channels[-1] * 8 * 8, out_features), 1.4)
        self.bf16 = False  # --bf16: autocast inside the CNN only; heads and losses stay float32

    def forward(self, obs):
        with torch.autocast(obs.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            x = obs.permute(0, 3, 1, 2).float() / 255.0  # observations stay uint8 until here
            return F.relu(self.dense(F.relu(self.stages(x).flatten(1)))).float()


class Agent(nn.Module):
    """PPO's network: one IMPALA trunk shared by the policy head and the value head."""
    def __init__(self, num_actions):
        super().__init__()
        self.trunk = ImpalaCNN()
        self.pi_head = normed(nn.Linear(256, num_actions), 0.1)
        self.v_head = normed(nn.Linear(256, 1), 0.1)

    def forward(self, obs):  # -> (policy logits, value)
        h = self.trunk(obs)
        return self.pi_head(h), self.v_head(h).squeeze(-1)

    def logits(self, obs):  # policy only: no value head
        return self.pi_head(self.trunk(obs))


def log_prob(logits, actions):
    return F.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def chunked_log_prob(net, obs, actions, chunk=256):
    """Log-probs of stored actions over a whole buffer, in chunks: no-grad forwards, bounded memory."""
    return torch.cat([log_prob(net.logits(o), a) for o, a in zip(obs.split(chunk), actions.split(chunk))])


# --- Rollout ---------------------------------------------------------------------------------------------
def new_rollout(num_steps, num_envs, device):
    """One rollout, on the device. `firsts[t]` marks obs t as the first frame of an episode."""
    z = lambda dtype: torch.zeros((num_steps, num_envs), dtype=dtype, device=device)  # noqa: E731
    return {"obs": torch.zeros((num_steps, num_envs, 64, 64, 3), dtype=torch.uint8, device=device),
            "actions": z(torch.long), "logp_behav": z(torch.float32), "rewards": z(torch.float32),
            "firsts": z(torch.bool), "values": z(torch.float32)}


@torch.no_grad()
def collect_rollout(envs, agent, next_obs, next_first, num_steps):
    """Run the behaviour policy (the current network) for num_steps steps in every environment. The rollout also
    carries the frame after it (for the bootstrap value), and its finished episodes and timings (for the log)."""
    start, device = time.perf_counter(), next_obs.device
    rollout = dict(new_rollout(num_steps, envs.num_envs, device), episode_returns=[], episode_lengths=[], env_time_s=0.0)
    for t in range(num_steps):
        rollout["obs"][t], rollout["firsts"][t] = next_obs, next_first
        logits, value = agent(next_obs)
        action = torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(-1)
        rollout["actions"][t], rollout["values"][t] = action, value
        rollout["logp_behav"][t] = log_prob(logits, action)  # pi_behav(a_t|s_t), stored for later
        action = action.cpu().numpy()  # the one host sync per step
        env_start = time.perf_counter()
        obs, reward, terminated, truncated, info = envs.step(action)
        rollout["env_time_s"] += time.perf_counter() - env_start
        rollout["rewards"][t] = torch.from_numpy(reward).to(device)
        next_obs = torch.from_numpy(obs).to(device)
        next_first = torch.from_numpy(terminated | truncated).to(device)
        if "episode" in info:  # every episode that finished on this step, not just one
            rollout["episode_returns"] += info["episode"]["r"][info["_episode"]].tolist()
            rollout["episode_lengths"] += info["episode"]["l"][info["_episode"]].tolist()
    rollout["next_obs"], rollout["next_first"] = next_obs, next_first
    rollout["time_s"] = time.perf_counter() - start
    return rollout


# --- Reward normalisation --------------------------------------------------------------------------------
class RewardNormalizer(nn.Module):
    """Divide rewards by the running std of a discounted return, then clip to [-10, 10]. As the official code (not
    CleanRL's NormalizeReward with gamma 0.999): the return uses gamma 0.99, and the statistics are updated once per
    rollout with all its returns, pooled over every worker (each keeps its own environments' running returns)."""
    def __init__(self, num_envs, gamma=0.99, clip=10.0, eps=1e-8):
        super().__init__()
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.register_buffer("ret", torch.zeros(num_envs))  # each env's running discounted return
        for name, start in (("mean", 0.0), ("var", 1.0), ("count", 1e-4)):  # the running moments of all returns
            self.register_buffer(name, torch.tensor(start, dtype=torch.float64))

    def forward(self, rewards, firsts):
        returns = torch.empty_like(rewards)
        for t in range(rewards.shape[0]):  # an episode's return restarts at its first frame
            self.ret = returns[t] = rewards[t] + self.gamma * self.ret * (~firsts[t])
        # this rollout's moments over all workers' returns (one all-reduce), merged into the running ones (Chan et al.)
        x = returns.double().flatten()
        n, total_x, total_sq = all_reduce_sum(torch.stack([x.new_tensor(x.numel()), x.sum(), (x * x).sum()]))
        mean_x = total_x / n
        var_x, delta = (total_sq / n - mean_x * mean_x).clamp_min(0), mean_x - self.mean
        total = self.count + n
        self.var = (self.var * self.count + var_x * n + delta ** 2 * self.count * n / total) / total
        self.mean, self.count = self.mean + delta * n / total, total
        return torch.clamp(rewards / torch.sqrt(self.var + self.eps).float(), -self.clip, self.clip)


# --- GAE (Schulman et al. 2015) ------------------------------------------------------------------------
def compute_gae(rewards, values, firsts, next_value, next_first, gamma, gae_lambda):
    """Advantages and value targets. An episode ended after step t iff obs t+1 is a first frame;
    then nothing is bootstrapped across the boundary (Procgen time-outs count as ends, as officially)."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        nonterminal = (~(firsts[t + 1] if t + 1 < num_steps else next_first)).to(rewards.dtype)
        next_v = values[t + 1] if t + 1 < num_steps else next_value
        delta = rewards[t] + gamma * next_v * nonterminal - values[t]
        advantages[t] = last_gae = delta + gamma * gae_lambda * nonterminal * last_gae
    return advantages, advantages + values


# --- Advantage normalisation (Section 4) --------------------------------------------------------------
class AdvantageMoments(nn.Module):
    """EWMA estimates of the advantage mean and variance across iterations, each batch weighted by
    its size. decay 0 = this batch only; the effective sample size is 2/(1-decay)-1 iterations."""
    def __init__(self, decay):
        super().__init__()
        self.decay = decay
        for name in ("weight", "sum", "sumsq"):
            self.register_buffer(name, torch.zeros((), dtype=torch.float64))

    def forward(self, advantages):
        x = advantages.double()  # every worker's advantages count, as in the official code
        count, total, total_sq = all_reduce_sum(torch.stack([x.new_tensor(x.numel()), x.sum(), (x * x).sum()]))
        self.weight = self.decay * self.weight + count
        self.sum = self.decay * self.sum + total
        self.sumsq = self.decay * self.sumsq + total_sq
        mean = self.sum / self.weight
        return mean.float(), (self.sumsq / self.weight - mean * mean).clamp_min(0).sqrt().float()


def make_batch(rollout, agent, adv_moments, args):
    """GAE on a (possibly stale) rollout, normalised advantages, and the old policy's log-probs."""
    with torch.no_grad():  # the bootstrap value by the current network; the other values as collected (official code)
        next_value = agent(rollout["next_obs"])[1]
    advantages, returns = compute_gae(rollout["rewards"], rollout["values"], rollout["firsts"],
                                      next_value, rollout["next_first"], args.gamma, args.gae_lambda)
    adv_mean, adv_std = adv_moments(advantages)
    if args.norm_adv:
        advantages = (advantages - adv_mean) / (adv_std + 1e-8)
    batch = {"obs": rollout["obs"].flatten(0, 1), "actions": rollout["actions"].flatten(),
             "logp_behav": rollout["logp_behav"].flatten(), "advantages": advantages.flatten(),
             "returns": returns.flatten(), "adv_mean": adv_mean, "adv_std": adv_std}
    # Section 5.1: with stale data, "old" is either the behaviour policy or the policy before this iteration
    batch["logp_old"] = (chunked_log_prob(agent, batch["obs"], batch["actions"]) if args.old_policy == "recent"
                         else batch["logp_behav"])
    return batch


# --- Losses (PPO: Schulman et al. 2017, eq. 7 and 8) -------------------------------------------------------
def policy_loss(logp, logp_old, advantages, clip_coef, kl_penalty, imp_samp_max):
    """Clipped surrogate (eq. 7) and/or KL penalty (eq. 8), in log space, against one old policy."""
    # Cap the importance weight pi_theta/pi_old at imp_samp_max (Appendix B; 0 = no cap): in value only, gradients
    # still flow through logp. It bites only on stale data (Section 5.1), in every script as in the official code.
    log_cap = logp.detach() - math.log(imp_samp_max) if imp_samp_max else torch.full_like(logp, -math.inf)
    capped = logp_old < log_cap
    logp_old_capped = torch.maximum(logp_old, log_cap)
    logratio = logp - logp_old  # log r_t(theta)
    pg_losses = -advantages * torch.exp(logp - logp_old_capped)
    if clip_coef > 0:
        clipped = torch.clamp(logratio, math.log(1 - clip_coef), math.log(1 + clip_coef))
        pg_losses = torch.maximum(pg_losses, -advantages * torch.exp(clipped + logp_old - logp_old_capped))
    # KL[old, theta] by the sampled estimate 0.5 * (log r)^2, as the official code
    kl = 0.5 * logratio.pow(2)
    with torch.no_grad():
        outside = (logratio < math.log(1 - clip_coef)) | (logratio > math.log(1 + clip_coef))
        diagnostics = {"approx_kl": kl.mean(), "clipfrac": outside.float().mean() if clip_coef > 0 else kl.new_zeros(()),
                       "imp_samp_capfrac": capped.float().mean()}
    return pg_losses.mean() + kl_penalty * kl.mean(), diagnostics


# --- Update ------------------------------------------------------------------------------------------------
def update(agent, optimizer, batch, args):
    """E epochs of minibatch Adam steps on the policy and value losses. Returns the mean diagnostics."""
    batch_size = batch["actions"].numel()
    micro = args.micro_batch_size or batch_size // args.num_minibatches
    sums = collections.defaultdict(float, adv_mean=batch["adv_mean"], adv_std=batch["adv_std"])  # Section 6.2
    for epoch in range(args.update_epochs):
        for mb in minibatches(args, batch["actions"].device):
            optimizer.zero_grad(set_to_none=True)
            for idx in mb.split(micro):  # gradient accumulation: the same gradient as one pass over mb
                logits, value = agent(batch["obs"][idx])
                logp_all = F.log_softmax(logits, dim=-1)
                logp = logp_all.gather(-1, batch["actions"][idx].unsqueeze(-1)).squeeze(-1)
                entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
                pg_loss, diag = policy_loss(logp, batch["logp_old"][idx], batch["advantages"][idx],
                                            args.clip_coef, args.kl_penalty, args.imp_samp_max)
                v_loss = (value - batch["returns"][idx]).pow(2).mean()  # vf_coef * MSE, no 0.5 (official)
                loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss
                (loss * (len(idx) / len(mb))).backward()
                w = len(idx) / (batch_size * args.update_epochs)
                for k, v in {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, **diag}.items():
                    sums[k] = sums[k] + v.detach() * w
            average_gradients(agent.parameters())
            if args.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
    return {k: float(v) for k, v in sums.items()}


def minibatches(args, device):
    """One epoch's minibatches: indices into the batch flattened from (num_steps, num_envs), every step once. By env
    (official code): whole trajectories of shuffled envs, cut in time when minibatches outnumber envs; by step
    (CleanRL): shuffled single steps."""
    t, n, m = args.num_steps, args.num_envs, args.num_minibatches
    if args.minibatch_by == "step":
        return torch.randperm(t * n, device=device).chunk(m)
    steps = torch.arange(t * n, device=device).view(t, n)  # steps[i, j]: step i of environment j
    envs = torch.randperm(n, device=device)
    if m <= n:
        return [steps[:, group].flatten() for group in envs.chunk(m)]
    return [chunk for j in envs.tolist() for chunk in steps[:, j].chunk(m // n)]


# --- Main ---------------------------------------------------------------------------------------------------
def main(argv=None):
    args = parse_args(argv)
    run = Run(args)  # the appendix's machinery: workers, device, seeds, run folder, console, checkpoints, signals
    if args.evaluate:
        return evaluate_saved_agent(args, run.device)
    agent = Agent(NUM_ACTIONS).to(run.device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, betas=args.adam_betas, eps=1e-8)
    reward_normalizer = RewardNormalizer(args.num_envs).to(run.device)  # statistics pooled over workers (official)
    adv_moments = AdvantageMoments(args.adv_ewma_decay).to(run.device)
    stale_rollouts = collections.deque()  # Section 5.1's FIFO of rollouts awaiting training
    learner = dict(agent=agent, optimizer=optimizer, reward_normalizer=reward_normalizer, adv_moments=adv_moments)
    envs = run.start(learner, stale_rollouts)  # resumes a run; one line saying what runs
    next_obs = torch.from_numpy(envs.reset()[0]).to(run.device)
    next_first = torch.ones(args.num_envs, dtype=torch.bool, device=run.device)
    for iteration in run.iterations():
        rollout = collect_rollout(envs, agent, next_obs, next_first, args.num_steps)
        next_obs, next_first = rollout["next_obs"], rollout["next_first"]
        if args.norm_reward:
            rollout["rewards"] = reward_normalizer(rollout["rewards"], rollout["firsts"])
        stale_rollouts.append(rollout)  # artificial staleness (Section 5.1): train on the rollout of K iterations ago
        stats = {}
        if len(stale_rollouts) > args.staleness:
            batch = make_batch(stale_rollouts.popleft(), agent, adv_moments, args)
            stats = update(agent, optimizer, batch, args)
        if not run.log(iteration, rollout, stats):  # progress.csv, console, evaluation, videos, checkpoint
            break
    return run.finish(envs)


# ===================================================================================================================
# APPENDIX: the machinery. The algorithm is complete above; a first-time reader may stop here.
# The same, to the character, in ppo.py, ppo_ewma.py, ppg.py and ppg_ewma.py: argument checks, resume, many workers,
# speed options, evaluation and videos, checkpoints and signals, and the Run that owns the folder and the console.
# ===================================================================================================================

# --- Argument checks and resume ------------------------------------------------------------------------------
class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # "-1e-3" and "-inf" are values (then refused with the allowed range), not unknown flags
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.I)

    def error(self, message):  # one line on stderr and exit code 2: no usage dump, no traceback
        self.exit(2, f"{self.prog}: error: {message}\n")


def number(kind, allowed):
    """argparse type: a finite `kind` in `allowed`, an interval written as in maths ("[0, 1)", "(0, inf)"),
    optionally "0 or [1, inf)"; anything else is refused with a message naming it."""
    zero, left, low, high, right = re.fullmatch(r"(0 or )?([\[(])(\S+), (\S+)([\])])", allowed).groups()

    def parse(text):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'} in {allowed}, got {text!r}")
        inside = (x > float(low) if left == "(" else x >= float(low)) and (x < float(high) if right == ")" else x <= float(high))
        if not math.isfinite(x) or not (inside or (zero and x == 0)):
            raise argparse.ArgumentTypeError(f"must be in {allowed}, got {text}")
        return x
    return parse


POSITIVE, NON_NEGATIVE = number(int, "[1, inf)"), number(int, "[0, inf)")


def add_machinery_flags(a):
    a("--save-model", action="store_true", help="write checkpoint.pt every --save-interval iterations and at the end")
    a("--save-interval", type=POSITIVE, default=10, help="iterations between checkpoints")
    a("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its checkpoint, in the same folder")
    a("--capture-video", action="store_true", help="save a GIF of one episode every --video-interval iterations and at the end")
    a("--video-interval", type=POSITIVE, default=50, help="iterations between videos")
    a("--eval-episodes", type=NON_NEGATIVE, default=0, help="episodes on held-out levels per evaluation (0 = off)")
    a("--eval-interval", type=POSITIVE, default=10, help="iterations between evaluations")
    a("--evaluate", metavar="RUN_DIR", help="evaluate RUN_DIR's saved agent without training (default 10 episodes)")
    a("--micro-batch-size", type=NON_NEGATIVE, default=None,
      help="split each minibatch into gradient-accumulated micro-batches (same gradient); default on a CPU 16 per "
           "torch thread, at least 32; 0 (off) on a GPU")
    a("--bf16", action="store_true", help="bfloat16 autocast in the CNNs (faster, changes numerics: off by default)")
    a("--compile", action="store_true", help="torch.compile the CNNs (costs start-up time; same maths)")
MAX_LEVEL = 2 ** 31 - 1  # Procgen's seeds and level numbers are 32-bit signed integers
MAX_SEED = MAX_LEVEL - 100_000_000  # room for the per-worker and evaluation seed offsets


def check_args(p, args):
    """Arguments that depend on each other, and those that would silently do nothing: one line and exit code 2,
    before anything is written."""
    c, n, t, m = args.batch_divisor, args.num_envs, args.num_steps, args.num_minibatches
    if n % c:
        p.error(f"argument --batch-divisor: must divide --num-envs ({n}), got {c}")
    n //= c
    if args.minibatch_by == "step" and (n * t) % m:
        p.error(f"argument --num-minibatches: must divide the batch of --num-envs x --num-steps = {n * t}, got {m}")
    if args.minibatch_by == "env" and (n % m if m <= n else m % n or t % (m // n)):
        p.error(f"argument --num-minibatches: with --minibatch-by env, must divide --num-envs ({n}) or be k x {n} "
                f"with k dividing --num-steps ({t}), got {m}")
    if args.start_level + args.num_levels > MAX_LEVEL:
        p.error(f"argument --start-level: --start-level + --num-levels must be at most {MAX_LEVEL}, got "
                f"{args.start_level + args.num_levels}")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]*", args.exp_name):
        p.error(f"argument --exp-name: a plain name (letters, digits and _ . + = -, no folders), got {args.exp_name!r}")
    folder = os.path.abspath(args.runs_dir)
    while not os.path.exists(folder):  # the nearest folder that exists must let us create the rest
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        p.error(f"argument --runs-dir: {folder!r} is {'not a folder' if not os.path.isdir(folder) else 'not writable'}")
    iterations = math.ceil(args.total_timesteps / (n * t * int(os.environ.get("WORLD_SIZE", 1))))
    if args.staleness >= iterations:
        p.error(f"argument --staleness: must be below the run's {iterations} iterations (nothing would be trained), "
                f"got {args.staleness}")
    for flag, needs, on in (("no_adjust", "--batch-divisor > 1", c > 1), ("adam_beta_adjust", "--batch-divisor > 1", c > 1),
                            ("save_interval", "--save-model", args.save_model),
                            ("video_interval", "--capture-video", args.capture_video),
                            ("eval_interval", "--eval-episodes > 0", args.eval_episodes)):
        if getattr(args, flag) != p.get_default(flag) and not on:
            p.error(f"argument --{flag.replace('_', '-')}: only used with {needs}")


def num_iterations(args, world_size):
    """Iterations in the run; the last one is never dropped, so a run may take a little more than total_timesteps."""
    return math.ceil(args.total_timesteps / (args.num_envs * args.num_steps * world_size))


def resume_args(p, argv, args):
    """--resume (or --evaluate) RUN_DIR: that run's config.json. Only a larger --total-timesteps (to extend the run),
    the device, checkpoint, video and evaluation flags may be given again; any other flag that differs from
    the run's is an error, and so is a run made by another script or with another number of workers."""
    if args.resume and args.evaluate:
        p.error("argument --evaluate: not allowed with --resume")
    flag, run_dir = ("--resume", args.resume) if args.resume else ("--evaluate", args.evaluate)
    script, path = os.path.basename(__file__), os.path.join(run_dir, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        p.error(f"argument {flag}: cannot read {path}: {e.strerror if isinstance(e, OSError) else e}")
    defaults = vars(p.parse_args([]))
    made_by = config.get("script") if isinstance(config, dict) else "something else"
    missing = sorted(set(defaults) - set(config)) if isinstance(config, dict) else []
    if made_by != script or missing:
        p.error(f"argument {flag}: the run in {run_dir!r} was made by " + (
            f"{made_by}, not {script}" if made_by not in (None, script) else f"another script or version: its "
            f"config.json has no {', '.join(missing[:3]) or 'script'}"))
    if not os.path.isfile(os.path.join(run_dir, CHECKPOINT)):
        p.error(f"argument {flag}: no {CHECKPOINT} in {run_dir!r} (was the run started with --save-model?)")
    unset = argparse.Namespace(**dict.fromkeys(defaults))  # parse again into all-None: what the command line gave
    given = {k: v for k, v in vars(p.parse_args(argv, unset)).items() if v is not None}
    free = ("total_timesteps", "cuda", "save_interval", "capture_video", "video_interval", "eval_episodes", "eval_interval")
    for key, value in given.items():
        if key not in free + ("resume", "evaluate", "save_model") and config.get(key) != value:
            p.error(f"argument --{key.replace('_', '-')}: the run in {run_dir!r} has {config.get(key)!r}, got {value!r}")
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if args.resume and config.get("world_size", 1) != world_size:
        p.error(f"argument --resume: the run in {run_dir!r} has {config['world_size']} workers, this launch has "
                f"{world_size}: resume it with {resume_command(run_dir, config['world_size'])}")
    if given.get("total_timesteps", config["total_timesteps"]) < config["total_timesteps"]:
        p.error(f"argument --total-timesteps: the run in {run_dir!r} has {config['total_timesteps']}; a resumed run "
                f"can only be extended, got {given['total_timesteps']}")
    config = {k: v for k, v in config.items() if k not in DERIVED_KEYS}
    config.update({k: given[k] for k in free if k in given})
    config.update(resume=args.resume, evaluate=args.evaluate, save_model=True, adam_betas=tuple(config["adam_betas"]))
    args = argparse.Namespace(**config)
    if args.resume:
        try:  # the iteration reached, without reading the tensors (mmap)
            done = torch.load(os.path.join(run_dir, CHECKPOINT), map_location="cpu", weights_only=True, mmap=True)["iteration"]
        except Exception as e:
            p.error(f"argument --resume: cannot read {os.path.join(run_dir, CHECKPOINT)}: {type(e).__name__}")
        if done >= num_iterations(args, world_size):
            p.error(f"argument --resume: the run in {run_dir!r} is finished ({done} of {num_iterations(args, world_size)} "
                    f"iterations); to extend it, give a --total-timesteps above {args.total_timesteps}")
    if args.evaluate and "eval_episodes" not in given:
        args.eval_episodes = 10
    return args


def resume_command(run_dir, world_size):
    """The command that resumes run_dir from any folder, with the workers it was started with."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    launcher = ("python" if world_size == 1 else f"torchrun --nproc-per-node {local}" if local == world_size
                else f"torchrun --nnodes {world_size // local} --nproc-per-node {local} (and your rendezvous flags)")
    return f"{launcher} {shlex.quote(os.path.abspath(__file__))} --resume {shlex.quote(os.path.abspath(run_dir))}"


# --- Many workers (torchrun) ---------------------------------------------------------------------------------
# `torchrun --nproc-per-node W script.py ...` starts W workers, each with its own --num-envs environments, as the
# paper ran (4 workers x 64 envs). Without torchrun there is one worker, no process group, and these helpers do
# nothing. Every worker holds the same networks and takes the same optimiser steps on the averaged gradient.
def setup_workers(args):
    """Join torchrun's process group; returns (rank, world_size, device). One GPU per local worker when there
    are enough (NCCL); otherwise workers share GPUs, or the CPU, and talk through gloo."""
    world_size, local_rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = args.cuda and torch.cuda.is_available()
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    if world_size > 1:
        if use_cuda:
            torch.cuda.set_device(device)
        own_gpu = use_cuda and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        dist.init_process_group("nccl" if own_gpu else "gloo")
    return int(os.environ.get("RANK", 0)), world_size, device


def broadcast_from_rank0(module):
    """Rank 0's parameters and buffers everywhere, so all workers start from the same weights."""
    if dist.is_initialized():
        for tensor in module.state_dict().values():
            if isinstance(tensor, torch.Tensor):  # not the EWMA's extra state
                dist.broadcast(tensor, 0)


def average_gradients(params):
    """Once per optimiser step, after micro-batch accumulation: every worker's gradient becomes the mean."""
    grads = [p.grad for p in params if p.grad is not None]
    if dist.is_initialized() and grads:
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        torch._foreach_copy_(grads, [f.view_as(g) for f, g in zip(flat.div_(dist.get_world_size()).split(
            [g.numel() for g in grads]), grads)])


def all_reduce_sum(tensor):
    """The sum over workers (advantage and reward statistics, episode counts, stop flags); the tensor on one worker."""
    if dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor


def share_from_rank0(obj):
    """A picklable object (the run folder's name) from rank 0 to every worker."""
    if dist.is_initialized():
        box = [obj]
        dist.broadcast_object_list(box, 0)
        obj = box[0]
    return obj


# --- Speed options (never change the maths, apart from --bf16's rounding) -------------------------------------
def configure_cnns(nets, bf16, compile):
    """For every IMPALA CNN in `nets`: bf16 autocast, and torch.compile in place (parameter names, hence
    checkpoints, unchanged)."""
    for cnn in [m for net in nets for m in net.modules() if isinstance(m, ImpalaCNN)]:
        cnn.bf16 = bf16
        if compile:
            cnn.compile()


def default_micro_batch_size(device):
    """--micro-batch-size's default: 0 (off) on a GPU. On a CPU the network is ~99% of the time and is fastest when a
    micro-batch's activations stay in cache: on 1 and 2 threads 16 to 64 were equally fast within noise and 128 was
    1.3-1.5x slower, for ppo.py and ppo_ewma.py alike (docs/results.md); more threads get 16 samples each (not
    measured here)."""
    return max(32, 16 * torch.get_num_threads()) if device.type == "cpu" else 0


# --- Evaluation and videos -----------------------------------------------------------------------------------
def held_out_levels(args):
    """(start_level, num_levels) for evaluation: the levels right after the training range when --num-levels
    is set, which never overlap [start_level, start_level + num_levels); the full distribution otherwise."""
    return (args.start_level + args.num_levels, 1_000_000) if args.num_levels else (args.start_level, 0)


@torch.no_grad()
def play(args, agent, num_envs, seed):
    """The current policy on held-out levels, in its own environments with its own random generator (training's
    are untouched): yields (frames, episode ends, info) after the reset and after every step."""
    start_level, num_levels = held_out_levels(args)
    device = next(agent.parameters()).device
    envs = gym.wrappers.vector.RecordEpisodeStatistics(ProcgenVecEnv(
        args.env_id, num_envs, args.distribution_mode, num_levels, start_level, seed))
    generator = torch.Generator(device).manual_seed(seed)
    obs, _ = envs.reset()
    try:
        yield obs, np.zeros(num_envs, dtype=bool), {}
        while True:
            logits = agent.logits(torch.from_numpy(obs).to(device))
            action = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
            obs, _, terminated, truncated, info = envs.step(action.cpu().numpy())
            yield obs, terminated | truncated, info
    finally:
        envs.close()


def evaluate(args, agent, episodes, seed):
    """Returns and lengths of `episodes` episodes on held-out levels, one environment per episode: taking the
    first episodes to finish would favour short ones."""
    returns, lengths = np.full(episodes, np.nan), np.zeros(episodes, dtype=int)
    for _, ended, info in play(args, agent, episodes, seed):
        first_end = ended & np.isnan(returns)
        if first_end.any():
            returns[first_end], lengths[first_end] = info["episode"]["r"][first_end], info["episode"]["l"][first_end]
        if not np.isnan(returns).any():
            return returns.tolist(), lengths.tolist()


def record_video(args, agent, path, seed, max_frames=1000, scale=2):
    """An animated GIF of one episode on a held-out level (its 64x64 frames upscaled): a few MB at most."""
    from PIL import Image  # comes with matplotlib
    frames = []
    for obs, ended, _ in play(args, agent, 1, seed):
        if ended[0] or len(frames) == max_frames:  # after an end, obs is already the next level's first frame
            break
        frames.append(obs[0])
    images = [Image.fromarray(f).resize((64 * scale, 64 * scale), Image.NEAREST) for f in frames]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=40, loop=0)
    return len(frames)


def evaluate_saved_agent(args, device):
    """--evaluate RUN_DIR: load the saved agent, evaluate it on held-out levels, optionally write a GIF."""
    agent = Agent(NUM_ACTIONS).to(device)
    state = read_checkpoint(args.evaluate, device)
    agent.load_state_dict(state["agent"])
    returns, lengths = evaluate(args, agent, args.eval_episodes, seed=args.seed + 10_000)
    stderr = np.std(returns, ddof=1) / math.sqrt(len(returns)) if len(returns) > 1 else float("nan")
    print(f"{args.env_id}, iteration {state['iteration']}: mean return {np.mean(returns):.2f} +- {stderr:.2f} "
          f"(standard error) over {len(returns)} held-out episodes, mean length {np.mean(lengths):.0f}")
    if args.capture_video:
        path = os.path.join(args.evaluate, "videos", f"evaluate_iter_{state['iteration']:06d}.gif")
        print(f"video: {path} ({record_video(args, agent, path, seed=args.seed + 20_000)} frames)")
    return returns


# --- Checkpoints, signals, non-finite values -------------------------------------------------------------------
CHECKPOINT = "checkpoint.pt"
DERIVED_KEYS = ("batch_size", "minibatch_size", "num_iterations", "device", "versions", "world_size", "global_batch_size",
                "script")


def checkpoint_name(rank):
    """Rank 0 saves checkpoint.pt; any other worker saves its own state (reward normaliser, staleness FIFO,
    aux buffer, RNG) beside it, so that a resumed multi-worker run continues exactly."""
    return CHECKPOINT if rank == 0 else f"checkpoint.rank{rank}.pt"


def save_checkpoint(run_dir, rank, stateful, **extra):
    """Every stateful object's state_dict, the RNG states and `extra`, written atomically: a crash while
    saving leaves the previous checkpoint intact."""
    state = {name: obj.state_dict() for name, obj in stateful.items()}
    state["rng"] = {"python": random.getstate(), "numpy": np.random.get_state()[1].tolist(),
                    "numpy_pos": int(np.random.get_state()[2]), "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    path = os.path.join(run_dir, checkpoint_name(rank))
    torch.save({**state, **extra}, path + ".tmp")
    os.replace(path + ".tmp", path)


def read_checkpoint(run_dir, device, rank=0):
    """Safe loading (weights_only: tensors and plain containers only); a GPU run loads on a CPU too.
    An unreadable file is a usage error: one line, exit code 2."""
    path = os.path.join(run_dir, checkpoint_name(rank))
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # truncated, corrupt, or not a checkpoint at all
        reason = str(e).splitlines()[0] if str(e) else "corrupt file"
        print(f"{os.path.basename(__file__)}: error: cannot read {path}: {type(e).__name__}: {reason}", file=sys.stderr)
        sys.exit(2)


def load_checkpoint(run_dir, rank, stateful, device):
    state = read_checkpoint(run_dir, device, rank)
    for name, obj in stateful.items():
        obj.load_state_dict(state[name])
    rng = state["rng"]
    random.setstate((rng["python"][0], tuple(rng["python"][1]), rng["python"][2]))
    np.random.set_state(("MT19937", np.array(rng["numpy"], dtype=np.uint32), rng["numpy_pos"]))
    torch.set_rng_state(rng["torch"].cpu())
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
    return state


class StopSignal:
    """SIGINT (Ctrl-C) or SIGTERM: finish the current iteration, checkpoint, exit. A second one abandons it."""
    def __init__(self):
        self.received = None
        self.previous = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def handle(self, signum, frame):
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        print(f"\n{self.received}: finishing this iteration, then stopping (send it again to stop at once)", flush=True)

    def restore(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def check_finite(iteration, row, agent):
    """Stop on a non-finite loss or parameter, naming it, before a broken state can be checkpointed."""
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad and not torch.stack([torch.isfinite(p).all() for p in agent.parameters()]).all():
        bad = [f"parameter {n}" for n, p in agent.named_parameters() if not torch.isfinite(p).all()][:1]
    return f"iteration {iteration}: non-finite {bad[0]}" if bad else None


def warn_if_diverging(iteration, row, limit=1e10):
    """Losses that explode without going non-finite (e.g. a value loss of 1e28 at learning rate 0.1): say so, once."""
    big = [k for k, v in row.items() if k.endswith("loss") and isinstance(v, float) and abs(v) > limit]
    if big:
        print(f"warning: iteration {iteration}: {big[0]} = {row[big[0]]:.3g}: the run is diverging (try a smaller "
              "--learning-rate)", file=sys.stderr, flush=True)
    return bool(big)


# --- The run: its folder, progress.csv, console, intervals and stopping ---------------------------------------
def import_procgen():
    """Procgen, without the notice about gym's end of maintenance that importing it prints (we use gymnasium)."""
    with contextlib.redirect_stderr(io.StringIO()) as captured:
        import procgen
    sys.stderr.write(re.sub(r"Gym has been unmaintained.*?for additional information\.\n", "", captured.getvalue(), flags=re.S))
    return procgen


COLUMNS = ["iteration", "global_step", "time_s", "sps", "episodic_return", "episodic_length", "policy_loss",
           "value_loss", "entropy", "approx_kl", "clipfrac", "adv_mean", "adv_std", "imp_samp_capfrac",
           "env_time_s", "rollout_time_s", "update_time_s", "eval_return", "eval_length",
           "aux_kl", "aux_value_loss", "aux_true_value_loss", "aux_time_s"]  # of progress.csv; aux_*: PPG only


class Run:
    """Everything around the training loop of main(): the workers and the device, seeds and threads, the run folder
    (config.json, progress.csv, videos, checkpoints), the console, evaluation and checkpoint intervals, signals,
    non-finite values, and the exit message. Only rank 0 prints and writes, apart from each worker's checkpoint."""
    def __init__(self, args):
        self.args = args
        self.rank, self.world_size, self.device = setup_workers(args)
        self.is_main = self.rank == 0
        self.print = print if self.is_main else (lambda *a, **k: None)
        # every core this process may use, shared with the other workers on this machine
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
        if args.micro_batch_size is None:
            args.micro_batch_size = default_micro_batch_size(self.device)
        random.seed(args.seed + self.rank)
        np.random.seed(args.seed + self.rank)
        torch.manual_seed(args.seed + self.rank)
        self.global_batch_size = args.num_envs * args.num_steps * self.world_size  # env steps per iteration
        self.num_iterations = num_iterations(args, self.world_size)
        self.start_iteration, self.problem, self.warned, self.last_saved = 0, None, False, None

    def start(self, learner, stale_rollouts):
        """Rank 0's weights everywhere, the speed options, a resumed run's checkpoint, the environments (each worker
        its own levels; a resumed run new ones), then the run folder, config.json, progress.csv and the first line."""
        args, elapsed = self.args, 0.0
        self.learner, self.stale_rollouts = learner, stale_rollouts
        modules = [m for m in learner.values() if isinstance(m, nn.Module)]
        for module in modules:
            broadcast_from_rank0(module)
        configure_cnns(modules, args.bf16, args.compile)
        if args.resume:  # Procgen cannot restore its state: the resumed run starts fresh episodes, nothing else differs
            checkpoint = load_checkpoint(args.resume, self.rank, learner, self.device)
            self.start_iteration = self.last_saved = checkpoint["iteration"]
            elapsed = checkpoint["time_s"]
            stale_rollouts.extend(checkpoint["stale_rollouts"])
        envs = make_env(args, seed=args.seed + 100_000 * self.rank + self.start_iteration)
        self.dir = args.resume or share_from_rank0(self.create_dir() if self.is_main else None)
        if self.is_main:
            self.write_config()
            self.csv_file, self.progress = self.open_progress()
        knobs = ", ".join(f"{k} {getattr(args, k):.4g}" if isinstance(getattr(args, k), float) else f"{k} {getattr(args, k)}"
                          for k in ("learning_rate", "adv_ewma_decay", "beta_prox", "prox", "n_pi") if hasattr(args, k))
        self.print(f"{args.exp_name} on {args.env_id} ({args.distribution_mode}), {self.device}: {args.num_envs} envs x "
                   f"{args.num_steps} steps" + (f" x {self.world_size} workers" if self.world_size > 1 else "") +
                   f", {self.num_iterations} iterations = {self.num_iterations * self.global_batch_size:,} steps; "
                   f"{knobs}; run folder {self.dir}", flush=True)
        self.stop, self.start_time = StopSignal(), time.time() - elapsed
        return envs

    def iterations(self):
        for iteration in range(self.start_iteration + 1, self.num_iterations + 1):
            self.iteration, self.iteration_start = iteration, time.time()
            yield iteration

    def due(self, every):  # every `every` iterations, and at the end
        return self.iteration % every == 0 or self.iteration == self.num_iterations

    def log(self, iteration, rollout, stats):
        """After an iteration: every worker's finished episodes, one row of progress.csv and one console line,
        evaluation and video when due, the checkpoint when due, and the stop conditions. False: stop now."""
        args, now, agent = self.args, time.time(), self.learner["agent"]
        # the rollout's statistics are logged once, then dropped (the rollout itself may wait in the staleness FIFO)
        returns, lengths = rollout.pop("episode_returns"), rollout.pop("episode_lengths")
        env_time, rollout_time = rollout.pop("env_time_s"), rollout.pop("time_s")
        episodes, return_sum, length_sum = all_reduce_sum(torch.tensor(
            [len(returns), sum(returns), sum(lengths)], dtype=torch.float64, device=self.device)).tolist()
        row = dict(stats, iteration=iteration, global_step=iteration * self.global_batch_size,
                   time_s=round(now - self.start_time, 3), sps=round(self.global_batch_size / (now - self.iteration_start), 1),
                   env_time_s=round(env_time, 3), rollout_time_s=round(rollout_time, 3),
                   episodic_return=return_sum / episodes if episodes else "",
                   episodic_length=length_sum / episodes if episodes else "")
        if "policy_loss" in stats:  # GAE and update; a PPG auxiliary phase is timed on its own
            row["update_time_s"] = round(now - self.iteration_start - rollout_time - stats.get("aux_time_s", 0), 3)
        if self.is_main and args.eval_episodes and self.due(args.eval_interval):
            eval_returns, eval_lengths = evaluate(args, agent, args.eval_episodes, seed=args.seed + iteration)
            row.update(eval_return=np.mean(eval_returns), eval_length=np.mean(eval_lengths))
        if self.is_main and args.capture_video and self.due(args.video_interval):
            record_video(args, agent, os.path.join(self.dir, "videos", f"iter_{iteration:06d}.gif"), seed=args.seed)
        if self.is_main:
            self.progress.writerow(row)
            self.csv_file.flush()
        eta = (now - self.start_time) / iteration * (self.num_iterations - iteration)
        ret = f"{row['episodic_return']:8.2f} ({episodes:.0f} eps)" if episodes else "       - (0 eps)"
        self.print(f"iter {iteration}/{self.num_iterations} | step {row['global_step']:,} | return {ret} | "
                   f"sps {row['sps']:.0f} | eta {format_eta(eta)}", flush=True)
        self.problem = check_finite(iteration, row, agent)
        self.warned = self.warned or (self.is_main and warn_if_diverging(iteration, row))
        # all workers stop together (a worker alone in an all-reduce would wait for ever)
        any_problem, any_stop = all_reduce_sum(torch.tensor([self.problem is not None, self.stop.received is not None],
                                                            dtype=torch.float64, device=self.device)).tolist()
        if any_problem:
            self.problem = self.problem or f"iteration {iteration}: non-finite values on another worker"
            return False
        if args.save_model and (self.due(args.save_interval) or any_stop):
            save_checkpoint(self.dir, self.rank, self.learner, iteration=iteration, time_s=now - self.start_time,
                            stale_rollouts=list(self.stale_rollouts))
            self.last_saved = iteration
        if any_stop:
            self.stop.received = self.stop.received or "SIGTERM"
            return False
        return True

    def finish(self, envs):
        """Close everything; a non-finite stop or a signal exits with its message, a finished run returns its folder."""
        self.stop.restore()
        if self.is_main:
            self.csv_file.close()
        envs.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        if self.problem:
            kept = (f"the last good checkpoint (iteration {self.last_saved}) is kept in {self.dir}"
                    if self.last_saved is not None else "no checkpoint was written")
            sys.exit(f"{os.path.basename(__file__)}: {self.problem}; stopped, {kept}")
        if self.stop.received:
            self.print(f"Stopped after iteration {self.iteration} ({self.stop.received}). " +
                       (f"Resume with: {resume_command(self.dir, self.world_size)}" if self.args.save_model
                        else "No checkpoint: start runs with --save-model to be able to resume them."), flush=True)
            sys.exit(128 + getattr(signal, self.stop.received))
        return self.dir

    def create_dir(self):
        args = self.args
        run_dir = os.path.join(args.runs_dir, f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}")
        os.makedirs(run_dir, exist_ok=False)
        return run_dir

    def write_config(self):
        """Every hyperparameter after Section 4's adjustments, what the run is made of, and the package versions."""
        args, batch_size = self.args, self.args.num_envs * self.args.num_steps
        versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                    "gymnasium": gym.__version__, "procgen": getattr(import_procgen(), "__version__", "unknown")}
        derived = {"batch_size": batch_size, "minibatch_size": batch_size // args.num_minibatches,
                   "num_iterations": self.num_iterations, "device": str(self.device), "world_size": self.world_size,
                   "global_batch_size": self.global_batch_size, "script": os.path.basename(__file__)}
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump({**vars(args), **derived, "versions": versions}, f, indent=2)

    def open_progress(self):
        """progress.csv, open for appending. On resume the rows up to the checkpoint are kept and later ones dropped,
        through a temporary file and an atomic rename: a crash at any moment leaves every kept row in place."""
        path, rows = os.path.join(self.dir, "progress.csv"), []
        columns = [c for c in COLUMNS if not c.startswith("aux_") or hasattr(self.args, "n_pi")]  # PPG's aux phase
        if self.start_iteration and os.path.exists(path):
            with open(path, newline="") as f:
                rows = [row for row in csv.DictReader(f) if int(row["iteration"]) <= self.start_iteration]
        with open(path + ".tmp", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(path + ".tmp", path)
        csv_file = open(path, "a", newline="")
        return csv_file, csv.DictWriter(csv_file, fieldnames=columns)


def format_eta(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


if __name__ == "__main__":
    main()
