# Tutorial: docs/README.md walks through this file; `diff ppo.py ppo_ewma.py` is the paper's change.
"""PPO (Schulman et al. 2017) on Procgen, in one file: the baseline of
"Batch size-invariance for policy optimization" (Hilton, Cobbe, Schulman 2021).

    python ppo.py --env-id starpilot

The algorithm first, its sections in one order in all four scripts; the machinery last."""
import argparse
import collections
import contextlib
import csv
import functools
import io
import json
import math
import os
import platform
import shlex
import signal
import sys
import time

import filelock  # comes with torch: the run folder's lock (open_run)
import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn  # here, not later by Adam: it would keep the process group alive
import torch.nn as nn
import torch.nn.functional as F

SCRIPT = os.path.basename(__file__)


# --- Arguments ------------------------------------------------------------------------------------
def parse_args(argv=None):
    # a flag is typed whole (a resume refuses flags by name); bad input: one line, no usage dump
    p = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.error = lambda message: p.exit(2, f"{SCRIPT}: error: {message}\n")
    a = p.add_argument
    yes_no = argparse.BooleanOptionalAction
    # experiment
    a("--exp-name", default=SCRIPT[:-3], help="name used in the run folder")
    a("--seed", type=NATURAL, default=1, help="seeds torch and Procgen")
    a("--cuda", action=yes_no, default=True, help="use the GPU if there is one")
    a("--runs-dir", type=FOLDER, default="runs", help="parent folder of the run folder")
    # environment (Procgen, Cobbe et al. 2019)
    a("--env-id", default="starpilot", choices=PROCGEN_GAMES, metavar="GAME", help="a Procgen game: %(choices)s")
    a("--distribution-mode", default="easy", choices=("easy", "hard"), help="the paper used hard")
    a("--num-levels", type=NATURAL, default=0, help="number of training levels (0 = unlimited)")
    a("--start-level", type=NATURAL, default=0, help="first training level")
    a("--total-timesteps", type=COUNT, default=25_000_000, help="env steps, rounded up to whole iterations")
    a("--num-envs", type=COUNT, default=64, help="parallel environments (N)")
    a("--num-steps", type=COUNT, default=256, help="steps per environment per rollout (T)")
    # optimisation (Appendix B, Tables 1 and 2)
    a("--num-minibatches", type=COUNT, default=8, help="minibatches per epoch")
    a("--minibatch-by", default="step", choices=("step", "env"), help="steps (CleanRL) or trajectories (official)")
    a("--update-epochs", type=COUNT, default=3, help="policy epochs per iteration (E)")
    a("--learning-rate", type=NON_NEGATIVE, default=5e-4, help="Adam step size (alpha)")
    a("--gamma", type=FRACTION, default=0.999, help="discount (gamma)")
    a("--gae-lambda", type=FRACTION, default=0.95, help="GAE bootstrapping parameter (lambda)")
    a("--clip-coef", type=DECAY, default=0.2, help="PPO clipping parameter (epsilon); 0 = no clipping")
    a("--kl-penalty", type=NON_NEGATIVE, default=0.0, help="KL penalty coefficient (beta, PPO's eq. 8); 0 = off")
    a("--ent-coef", type=NON_NEGATIVE, default=0.01, help="entropy coefficient")
    a("--vf-coef", type=NON_NEGATIVE, default=0.25, help="value loss weight (CleanRL 0.5 x 0.5 MSE, official 0.5)")
    a("--clip-vloss", action=yes_no, default=True, help="clip value updates at --clip-coef (CleanRL; official: no)")
    a("--max-grad-norm", type=NON_NEGATIVE, default=0.5, help="gradient norm clip; 0 = off (official code)")
    a("--adam-eps", type=NON_NEGATIVE, default=1e-5, help="Adam's epsilon (CleanRL 1e-5, official 1e-8)")
    a("--init", default="pytorch", choices=("pytorch", "normed"), help="weights: CleanRL PPO's or the official code's")
    a("--norm-reward", action=yes_no, default=True, help="reward normalisation")
    a("--norm-reward-gamma", type=DECAY, default=0.999, help="discount of the return scaling rewards (official 0.99)")
    a("--norm-adv", action=yes_no, default=True, help="advantage normalisation")
    a("--adv-ewma-decay", type=DECAY, default=0.0, help="EWMA decay of advantage statistics (Section 4)")
    # the paper's experiments
    a("--old-policy", default="behav", choices=("behav", "recent"), help="the data's, or the one before this iteration")
    a("--imp-samp-max", type=NON_NEGATIVE, default=100.0, help="cap on pi_theta/pi_old (App. B); 0 = off")
    a("--staleness", type=NATURAL, default=0, help="train on the rollout collected K iterations ago (Section 5.1)")
    a("--batch-divisor", type=COUNT, default=1, help="divide --num-envs by C with Section 4's adjustments")
    a("--no-adjust", action="append", default=[], choices=ADJUSTMENTS, help="drop one adjustment (repeatable)")
    a("--adam-beta-adjust", action="store_true", help="raise Adam's betas to the power 1/C (Appendix D)")
    # long runs, watching and testing the agent, speed
    a("--save-model", action=yes_no, default=True, help="checkpoint every --save-interval iterations and at the end")
    a("--save-interval", type=COUNT, default=10, help="iterations between checkpoints")
    a("--resume", metavar="RUN_DIR", type=FOLDER, help="continue the run in RUN_DIR from its checkpoint")
    a("--capture-video", action=yes_no, default=False, help="a GIF of one episode every --video-interval iterations")
    a("--video-interval", type=COUNT, default=50, help="iterations between videos")
    a("--eval-episodes", type=NATURAL, default=0, help="episodes per evaluation, on untrained levels (0 = off)")
    a("--eval-interval", type=COUNT, default=10, help="iterations between evaluations")
    a("--evaluate", metavar="RUN_DIR", type=FOLDER, help="evaluate RUN_DIR's agent on untrained levels")
    a("--micro-batch-size", type=NATURAL, help="micro-batch (same gradient); None: off on a GPU, max(32, 16 x threads)")
    a("--bf16", action="store_true", help="bfloat16 autocast in the CNNs (other numerics; faster on GPUs, bf16 CPUs)")
    a("--compile", action=yes_no, default=False, help="torch.compile the CNNs (costs start-up time; same maths)")
    args = p.parse_args(argv)
    if args.resume or args.evaluate:
        return resume_args(p, argv, args)  # the run's config.json, adjustments included (appendix)
    check_args(p, args, "update_epochs")  # whole minibatches; Section 4's one epoch (appendix)
    apply_batch_size_invariance(args)
    return args


def checked(kind, allowed, ok):
    """An argparse type: a `kind` that ok() accepts, else "argument --FLAG: must be {allowed}"."""
    def number(text):  # the name argparse prints: "invalid number value: 'abc'"
        value = kind(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}")
        return value
    return number


COUNT = checked(int, "at least 1", lambda v: v >= 1)
NATURAL = checked(int, "at least 0", lambda v: v >= 0)
NON_NEGATIVE = checked(float, "at least 0 and finite", lambda v: 0 <= v < math.inf)
FRACTION = checked(float, "in [0, 1]", lambda v: 0 <= v <= 1)
DECAY = checked(float, "in [0, 1)", lambda v: 0 <= v < 1)  # --clip-coef too: log(1 - epsilon)
FOLDER = checked(os.path.expanduser, 'a folder (not "")', bool)  # --resume "$UNSET" gives ""


# --- Batch-size invariance (Section 4) ------------------------------------------------------------
# --no-adjust's choices in this script
ADJUSTMENTS = ("lr", "adv")


def apply_batch_size_invariance(args):
    """Section 4: to divide the batch size by C, divide the envs by C and adjust the rest."""
    c = args.batch_divisor
    args.adam_betas = (0.9, 0.999)  # Adam's defaults
    if c == 1:
        return
    args.num_envs //= c
    if "lr" not in args.no_adjust:
        args.learning_rate /= math.sqrt(c)  # Adam step size / sqrt(C) (Section 3.2, Appendix C)
    # effective sample size 2/(1-decay)-1, in iterations, times C (footnote 1)
    if "adv" not in args.no_adjust:
        args.adv_ewma_decay = 1 - 2 / (c * (2 / (1 - args.adv_ewma_decay) - 1) + 1)
    if args.adam_beta_adjust:
        args.adam_betas = tuple(b ** (1 / c) for b in args.adam_betas)  # Appendix D


# --- Environment: Procgen's vector env ------------------------------------------------------------
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball",
                 "fruitbot", "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder",
                 "starpilot")
NUM_ACTIONS = 15  # every Procgen game has the same 15 actions


class ProcgenVecEnv:
    """num_envs Procgen games (ProcgenGames: appendix), stepped together. An env resets inside the
    step that ends its episode (obs: the next level's first frame); a time-out is an end too, as
    officially."""
    def __init__(self, env_id, num_envs, distribution_mode, num_levels, start_level, seed):
        self.games = ProcgenGames(num_envs, env_name=env_id, distribution_mode=distribution_mode,
                                  num_levels=num_levels, start_level=start_level, rand_seed=seed,
                                  num_threads=min(16, cpu_threads()))
        self.num_envs = num_envs
        self.obs = self.games.reset()[0]
        self.first = np.ones(num_envs, bool)
        self.returns = np.zeros(num_envs)
        self.lengths = np.zeros(num_envs, int)

    # -> obs, reward, first, (return, length) of each env's episode: ended where first
    def step(self, actions):
        obs, reward, first = self.games.step(np.asarray(actions, dtype=np.int32))[:3]
        self.obs = obs
        self.first = first
        self.returns = self.returns + reward
        self.lengths = self.lengths + 1
        episodes = self.returns, self.lengths
        self.returns = np.where(first, 0, self.returns)
        self.lengths = np.where(first, 0, self.lengths)
        return obs, reward, first, episodes

    def state_dict(self):  # every game, each env's episode and last frame: a resume goes on in them
        return {"games": self.games.get_state(),
                **{k: torch.tensor(getattr(self, k))
                   for k in ("obs", "first", "returns", "lengths")}}

    def load_state_dict(self, state):
        self.games.set_state(state["games"])
        for k in ("obs", "first", "returns", "lengths"):
            setattr(self, k, state[k].numpy())


# --- Network: IMPALA CNN (Espeholt et al. 2018) ---------------------------------------------------
def normed(layer, scale):
    """--init normed (the official code's): each output unit's weights scaled to norm `scale`."""
    with torch.no_grad():
        rows = layer.weight.view(len(layer.weight), -1)  # a row per output unit, in place
        rows.mul_(scale / rows.norm(dim=1, keepdim=True))
        layer.bias.zero_()
    return layer


def pytorch_init(agent):
    """--init pytorch (CleanRL PPO's): PyTorch's default weights, then orthogonal heads of gain 0.01
    (logits) and 1 (values): the policy starts near uniform."""
    for layer in [m for m in agent.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]:
        layer.reset_parameters()
        # a head: no conv or hidden layer has 1 or 15 outputs
        if layer.weight.shape[0] in (1, NUM_ACTIONS):
            nn.init.orthogonal_(layer.weight, 0.01 if layer.weight.shape[0] == NUM_ACTIONS else 1.0)
            nn.init.zeros_(layer.bias)


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
        self.blocks = nn.Sequential(ResidualBlock(out_channels, scale),
                                    ResidualBlock(out_channels, scale))

    def forward(self, x):
        return self.blocks(F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1))


class ImpalaCNN(nn.Module):
    """uint8 frames (B, 64, 64, 3) -> features (B, 256). 3 stages of 16, 32, 32 channels."""
    def __init__(self, channels=(16, 32, 32), out_features=256):
        super().__init__()
        # = sqrt(1/sqrt(3 stages) / sqrt(2 blocks)): the residual sums keep unit variance (official)
        scale = 6 ** -0.25
        self.stages = nn.Sequential(*[ConvSequence(c_in, c_out, scale)
                                      for c_in, c_out in zip((3,) + channels[:-1], channels)])
        self.dense = normed(nn.Linear(channels[-1] * 8 * 8, out_features), 1.4)
        self.bf16 = False  # --bf16: autocast inside the CNN only; heads and losses stay float32

    def forward(self, obs):
        with torch.autocast(obs.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            x = obs.permute(0, 3, 1, 2).float() / 255.0  # observations stay uint8 until here
            x = F.relu(self.stages(x).flatten(1))
            return F.relu(self.dense(x)).float()


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
    """Log-probs of stored actions over a whole buffer, in no-grad chunks: bounded memory."""
    return torch.cat([log_prob(net.logits(o), a)
                      for o, a in zip(obs.split(chunk), actions.split(chunk))])


# --- Rollout --------------------------------------------------------------------------------------
def new_rollout(num_steps, num_envs, device):
    """One rollout, on the device. `firsts[t]` marks obs t as the first frame of an episode."""
    z = lambda dtype: torch.zeros((num_steps, num_envs), dtype=dtype, device=device)
    return {"obs": torch.zeros((num_steps, num_envs, 64, 64, 3), dtype=torch.uint8, device=device),
            "actions": z(torch.long), "logp_behav": z(torch.float32), "rewards": z(torch.float32),
            "firsts": z(torch.bool), "values": z(torch.float32)}


@torch.no_grad()
def collect_rollout(envs, agent, num_steps, device):
    """Run the behaviour policy (the current network) num_steps more steps in every env. Returns the
    rollout, with the frame after it (to bootstrap from), and the log of its finished episodes."""
    rollout = new_rollout(num_steps, envs.num_envs, device)
    log = {"episode_returns": [], "episode_lengths": []}
    next_obs = torch.from_numpy(envs.obs).to(device)
    next_first = torch.from_numpy(envs.first).to(device)
    # a GPU replays one CUDA graph (appendix): the same maths, fewer launches
    forward = cuda_graph(agent, envs.num_envs) if device.type == "cuda" else agent
    for t in range(num_steps):
        rollout["obs"][t] = next_obs
        rollout["firsts"][t] = next_first
        logits, value = forward(next_obs)
        action = torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(-1)
        rollout["actions"][t] = action
        rollout["values"][t] = value
        rollout["logp_behav"][t] = log_prob(logits, action)  # pi_behav(a_t|s_t)
        # the one host sync per step
        obs, reward, first, (returns, lengths) = envs.step(action.cpu().numpy())
        rollout["rewards"][t] = torch.from_numpy(reward).to(device)
        next_obs = torch.from_numpy(obs).to(device)
        next_first = torch.from_numpy(first).to(device)
        # every episode that finished on this step, not just one
        log["episode_returns"] += returns[first].tolist()
        log["episode_lengths"] += lengths[first].tolist()
    rollout["next_obs"] = next_obs
    rollout["next_first"] = next_first
    return rollout, log


# --- Reward normalisation -------------------------------------------------------------------------
class RewardNormalizer(nn.Module):
    """Rewards / the running std of a discounted return (--norm-reward-gamma: 0.99 in the official
    code, the agent's gamma in CleanRL), clipped to [-10, 10]; updated per rollout, workers' moments
    pooled (officially: averaged)."""
    def __init__(self, num_envs, gamma=0.99, clip=10.0, eps=1e-8):
        super().__init__()
        self.gamma = gamma
        self.clip = clip
        self.eps = eps
        self.register_buffer("ret", torch.zeros(num_envs))  # each env's running discounted return
        # the running moments of all returns
        for name, start in (("mean", 0.0), ("var", 1.0), ("count", 1e-4)):
            self.register_buffer(name, torch.tensor(start, dtype=torch.float64))

    def forward(self, rewards, firsts):
        returns = torch.empty_like(rewards)
        for t in range(rewards.shape[0]):  # an episode's return restarts at its first frame
            self.ret = returns[t] = rewards[t] + self.gamma * self.ret * (~firsts[t])
        # this rollout's moments over all workers' returns (one all-reduce), merged into the running
        # ones (Chan et al.)
        x = returns.double().flatten()
        n, total_x, total_sq = all_reduce_sum(
            torch.stack([x.new_tensor(x.numel()), x.sum(), (x * x).sum()]))
        mean_x = total_x / n
        var_x = (total_sq / n - mean_x * mean_x).clamp_min(0)
        delta = mean_x - self.mean
        total = self.count + n
        self.var = (self.var * self.count + var_x * n + delta ** 2 * self.count * n / total) / total
        self.mean = self.mean + delta * n / total
        self.count = total
        return torch.clamp(rewards / torch.sqrt(self.var + self.eps).float(), -self.clip, self.clip)


# --- GAE (Schulman et al. 2015) -------------------------------------------------------------------
def compute_gae(rewards, values, firsts, next_value, next_first, gamma, gae_lambda):
    """Advantages and value targets. An episode ended after step t iff obs t+1 is a first frame:
    nothing is bootstrapped across it (Procgen's time-outs are ends, as officially)."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(next_value)
    for t in reversed(range(num_steps)):
        nonterminal = (~(firsts[t + 1] if t + 1 < num_steps else next_first)).to(rewards.dtype)
        next_v = values[t + 1] if t + 1 < num_steps else next_value
        delta = rewards[t] + gamma * next_v * nonterminal - values[t]
        advantages[t] = last_gae = delta + gamma * gae_lambda * nonterminal * last_gae
    return advantages, advantages + values


# --- Advantage normalisation (Section 4) ----------------------------------------------------------
class AdvantageMoments(nn.Module):
    """EWMA estimates of the advantage mean and std across iterations, each batch weighted by
    its size. decay 0 = this batch only; the effective sample size is 2/(1-decay)-1 iterations."""
    def __init__(self, decay):
        super().__init__()
        self.decay = decay
        for name in ("weight", "sum", "sumsq"):
            self.register_buffer(name, torch.zeros((), dtype=torch.float64))

    def forward(self, advantages):
        x = advantages.double()
        # all workers' advantages, as in the official code
        count, total, total_sq = all_reduce_sum(
            torch.stack([x.new_tensor(x.numel()), x.sum(), (x * x).sum()]))
        self.weight = self.decay * self.weight + count
        self.sum = self.decay * self.sum + total
        self.sumsq = self.decay * self.sumsq + total_sq
        mean = self.sum / self.weight
        return mean.float(), (self.sumsq / self.weight - mean * mean).clamp_min(0).sqrt().float()


def make_batch(rollout, agent, adv_moments, args):
    """The batch the update trains on: GAE on a (possibly stale) rollout, normalised advantages."""
    # the bootstrap value by the current network; the other values as collected (official code)
    with torch.no_grad():
        next_value = agent(rollout["next_obs"])[1]
    advantages, returns = compute_gae(rollout["rewards"], rollout["values"], rollout["firsts"],
                                      next_value, rollout["next_first"], args.gamma,
                                      args.gae_lambda)
    adv_mean, adv_std = adv_moments(advantages)
    if args.norm_adv:
        advantages = (advantages - adv_mean) / (adv_std + 1e-8)
    # steps x envs -> steps
    batch = {k: rollout[k].flatten(0, 1) for k in ("obs", "actions", "logp_behav", "values")}
    batch.update(advantages=advantages.flatten(), returns=returns.flatten(), adv_mean=adv_mean,
                 adv_std=adv_std)
    # Section 5.1: on stale data, "old" is the behaviour policy or the policy before this iteration
    batch["logp_old"] = (chunked_log_prob(agent, batch["obs"], batch["actions"])
                         if args.old_policy == "recent" else batch["logp_behav"])
    return batch


# --- Losses (PPO: Schulman et al. 2017, eq. 7 and 8) ----------------------------------------------
def policy_loss(logp, logp_old, advantages, clip_coef, kl_penalty, imp_samp_max):
    """Clipped surrogate (eq. 7) and/or KL penalty (eq. 8), in log space, against one old policy.
    pi_theta/pi_old is capped at imp_samp_max (Appendix B; 0 = no cap) by raising pi_old:
    a capped ratio's gradient is then imp_samp_max grad log pi_theta, not 0."""
    floor = (logp.detach() - math.log(imp_samp_max) if imp_samp_max
             else torch.full_like(logp, -math.inf))
    capped = logp_old < floor
    # exp(logp - this) = min(pi_theta/pi_old, imp_samp_max)
    logp_old_capped = torch.maximum(logp_old, floor)
    logratio = logp - logp_old  # log r_t(theta)
    pg_losses = -advantages * torch.exp(logp - logp_old_capped)
    if clip_coef > 0:
        clipped = torch.clamp(logratio, math.log(1 - clip_coef), math.log(1 + clip_coef))
        # = log[(pi_old/pi_old_capped) clip(r, 1-eps, 1+eps)], the first factor 1 unless capped
        log_weight = clipped + logp_old - logp_old_capped
        pg_losses = torch.maximum(pg_losses, -advantages * torch.exp(log_weight))
    # KL[old, theta] as the official code: 0.5 * (log r)^2 at behav's actions
    kl = 0.5 * logratio.pow(2)
    with torch.no_grad():
        outside = (logratio < math.log(1 - clip_coef)) | (logratio > math.log(1 + clip_coef))
        diagnostics = {"approx_kl": kl.mean(), "imp_samp_capfrac": capped.float().mean(),
                       "clipfrac": outside.float().mean() if clip_coef > 0 else kl.new_zeros(())}
    return pg_losses.mean() + kl_penalty * kl.mean(), diagnostics


def value_loss(value, returns, values_behav, clip_coef):
    """Squared error of the value against the GAE returns (times vf_coef, no 0.5: official code).
    With clip_coef > 0 (CleanRL, after OpenAI baselines): the larger of it and the error of the
    value held within clip_coef of the value at collection."""
    loss = (value - returns).pow(2)
    if clip_coef > 0:
        clipped = values_behav + (value - values_behav).clamp(-clip_coef, clip_coef)
        loss = torch.maximum(loss, (clipped - returns).pow(2))
    return loss.mean()


def micro_batch_loss(agent, batch, idx, args):
    """The forward pass on the steps idx of the batch: their loss, and its terms and
    diagnostics to log."""
    logits, value = agent(batch["obs"][idx])
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch["actions"][idx].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    pg_loss, diagnostics = policy_loss(
        logp, batch["logp_old"][idx], batch["advantages"][idx],
        args.clip_coef, args.kl_penalty, args.imp_samp_max)
    v_loss = value_loss(value, batch["returns"][idx], batch["values"][idx],
                        args.clip_coef if args.clip_vloss else 0)
    loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss
    return loss, {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, **diagnostics}


# --- Update ---------------------------------------------------------------------------------------
def update(agent, optimizer, batch, args):
    """E epochs of minibatch Adam steps on the policy and value losses.
    Returns the mean diagnostics."""
    batch_size = batch["actions"].numel()
    micro = args.micro_batch_size or batch_size // args.num_minibatches
    # logged: watch the advantage std (Section 6.2's advice)
    sums = collections.defaultdict(float, adv_mean=batch["adv_mean"], adv_std=batch["adv_std"])
    for epoch in range(args.update_epochs):
        for mb in minibatches(args, batch["actions"].device):
            optimizer.zero_grad(set_to_none=True)
            # gradient accumulation: the same gradient as one pass over mb
            for idx in mb.split(micro):
                loss, diagnostics = micro_batch_loss(agent, batch, idx, args)
                (loss * (len(idx) / len(mb))).backward()
                for k, v in diagnostics.items():  # means over the epochs' steps
                    sums[k] = sums[k] + v.detach() * (len(idx) / (batch_size * args.update_epochs))
            average_gradients(agent.parameters())
            if args.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
    return {k: float(v) for k, v in sums.items()}


def minibatches(args, device):
    """One epoch's minibatches, indices into the (num_steps x num_envs) batch, every step once: by
    env (official code) whole trajectories of shuffled envs, cut in time when minibatches outnumber
    envs; by step (CleanRL) single steps."""
    t = args.num_steps
    n = args.num_envs
    m = args.num_minibatches
    if args.minibatch_by == "step":
        return torch.randperm(t * n, device=device).chunk(m)
    steps = torch.arange(t * n, device=device).view(t, n)  # steps[i, j]: step i of environment j
    envs = torch.randperm(n, device=device)
    if m <= n:
        return [steps[:, group].flatten() for group in envs.chunk(m)]
    return [chunk for j in envs.tolist() for chunk in steps[:, j].chunk(m // n)]


# --- Main -----------------------------------------------------------------------------------------
def main(argv=None):
    args = parse_args(argv)
    device = setup(args)  # the appendix: workers, device, threads and seed
    if args.evaluate:
        return evaluate_saved_agent(args, device)
    agent = Agent(NUM_ACTIONS).to(device)
    if args.init == "pytorch":
        pytorch_init(agent)  # CleanRL PPO's weights in place of the official code's
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, betas=args.adam_betas,
                                 eps=args.adam_eps)
    reward_normalizer = RewardNormalizer(args.num_envs, args.norm_reward_gamma).to(device)
    adv_moments = AdvantageMoments(args.adv_ewma_decay).to(device)
    stale_rollouts = collections.deque()  # Section 5.1's FIFO of rollouts awaiting training
    seed = args.seed + 100_000 * worker()[0]  # each worker (rank) seeds its own envs
    envs = ProcgenVecEnv(args.env_id, args.num_envs, args.distribution_mode, args.num_levels,
                         args.start_level, seed)
    # what a checkpoint holds
    learner = dict(agent=agent, optimizer=optimizer, reward_normalizer=reward_normalizer,
                   adv_moments=adv_moments, envs=envs)
    # the run's length: iterations of all workers' envs, rounded up
    iteration_steps = args.num_envs * args.num_steps * worker()[1]
    num_iterations = math.ceil(args.total_timesteps / iteration_steps)
    start = 0  # the iterations done (a resumed run's)
    time_s = 0.0  # the run's seconds so far
    last_saved = None  # the iteration of the last checkpoint
    # --resume: the saved state back in place (the envs' too: their episodes go on)
    if args.resume:
        start, time_s = load_checkpoint(args.resume, learner, stale_rollouts)
        last_saved = start
    prepare_networks(learner, args)  # rank 0's weights on every worker; --bf16, --compile
    run_dir, lock = open_run(args, device, num_iterations, start)  # config.json, progress.csv
    clock = (time_s, time.time(), start)  # time_s, and the ETA at this process's pace
    problem = stop = None
    for iteration in range(start + 1, num_iterations + 1):
        started = time.time()
        rollout, rollout_log = collect_rollout(envs, agent, args.num_steps, device)
        if args.norm_reward:
            rollout["rewards"] = reward_normalizer(rollout["rewards"], rollout["firsts"])
        # artificial staleness (Section 5.1): train on the rollout collected K iterations ago
        stale_rollouts.append(rollout)
        stats = {}
        if len(stale_rollouts) > args.staleness:
            batch = make_batch(stale_rollouts.popleft(), agent, adv_moments, args)
            stats = update(agent, optimizer, batch, args)
        seconds = time.time() - started  # this iteration's training: its speed, evaluation apart
        if args.eval_episodes and due(iteration, args.eval_interval, num_iterations):
            stats |= evaluate_held_out(args, agent, iteration)
        if args.capture_video and due(iteration, args.video_interval, num_iterations):
            save_video(args, agent, run_dir, iteration)
        row = log_iteration(run_dir, args, device, iteration, num_iterations, stats, rollout_log,
                            seconds, clock)
        problem, stop = stop_check(row, agent, device)  # a NaN or inf; a signal; torchrun gone
        save_now = stop or due(iteration, args.save_interval, num_iterations)
        if args.save_model and not problem and save_now:
            save_checkpoint(run_dir, learner, stale_rollouts, iteration, row["time_s"])
            last_saved = iteration
        if problem or stop:
            break
    return finish(run_dir, lock, problem, stop, last_saved)


# ==================================================================================================
# APPENDIX: the machinery. The same in all four scripts; the algorithm is complete above.
# ==================================================================================================
# Procgen: procgen-gym on Python 3.13; on 3.11 and 3.12 procgen-mirror (gym3, numpy < 2) wrapped
# in procgen-gym's reset() -> (obs, info), step(a)[:3] -> (obs, reward, first)
try:
    import procgen_gym as procgen
    ProcgenGames = procgen.ProcgenVecEnv
except ImportError:
    with contextlib.redirect_stderr(io.StringIO()):  # old gym prints that it is unmaintained
        import procgen

    class ProcgenGames(procgen.ProcgenGym3Env):
        def reset(self):
            return self.observe()[1]["rgb"], {}

        def step(self, actions):
            self.act(actions)
            reward, obs, first = self.observe()
            return obs["rgb"], reward, first


# --- Argument checks and resume -------------------------------------------------------------------
def check_args(p, args, epochs):
    """Rules across flags: a batch cut into whole parts, and Section 4's one epoch."""
    c = args.batch_divisor
    n = args.num_envs // c
    t = args.num_steps
    m = args.num_minibatches
    if args.num_envs % c:
        p.error(f"argument --num-envs: must be a multiple of --batch-divisor, got {args.num_envs}")
    if c > 1 and getattr(args, epochs) != 1:
        p.error(f"argument --{epochs.replace('_', '-')}: must be 1 with --batch-divisor above 1")
    if (n * t) % m:
        p.error(f"argument --num-minibatches: must divide the {n * t} steps, got {m}")
    if args.minibatch_by == "env" and n % m and m % n:  # whole trajectories, or equal time chunks
        p.error(f"argument --num-minibatches: must divide the {n} envs or be a multiple of them "
                f"(--minibatch-by env), got {m}")


# What a resume may change (--total-timesteps only upwards)
FREE = ("total_timesteps", "cuda", "save_interval", "capture_video", "video_interval",
        "eval_episodes", "eval_interval", "micro_batch_size", "compile", "resume", "evaluate",
        "save_model")


def resume_args(p, argv, args):
    """--resume or --evaluate RUN_DIR: the run's config.json becomes the parser's defaults. Only
    the FREE flags may be typed again: the run stays one configuration."""
    run_dir = args.resume or args.evaluate
    flag = "resume" if args.resume else "evaluate"
    checkpoint = checkpoint_path(run_dir)
    if not os.path.isfile(checkpoint):
        p.error(f"argument --{flag}: no {os.path.basename(checkpoint)} in {run_dir!r}")
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = dict(json.load(f))
    except (OSError, ValueError, TypeError) as e:  # missing, cut short, or not a run's config
        p.error(f"argument --{flag}: cannot read {run_dir!r}'s config.json ({type(e).__name__})")
    missing = sorted(set(vars(args)) - set(config))
    if missing:  # another script's run, or an older one's
        p.error(f"argument --{flag}: {run_dir!r} is a run of {config.get('script')}, not of this "
                f"{SCRIPT} as it is today (its config.json has no {missing[0]})")
    argv = sys.argv[1:] if argv is None else argv
    typed = [a[2:].split("=")[0].replace("-", "_") for a in argv if a.startswith("--")]
    refused = [k for k in typed if k.removeprefix("no_") not in FREE]  # --no-cuda is --cuda's
    if refused:
        free = ", ".join("--" + k.replace("_", "-") for k in FREE)
        p.error(f"argument --{refused[0].replace('_', '-')}: --{flag} keeps the run's "
                f"configuration (only {free} may be given)")
    kept = {k: v for k, v in config.items() if k not in ("micro_batch_size", "resume")}
    p.set_defaults(**kept)
    args = p.parse_args(argv)
    if args.total_timesteps < config["total_timesteps"]:
        p.error(f"argument --total-timesteps: a resume never shortens the run, which has "
                f"{config['total_timesteps']}, got {args.total_timesteps}")
    if args.resume and config["world_size"] != worker()[1]:  # each worker's envs are its own
        p.error(f"argument --resume: the run has {config['world_size']} workers: resume it with "
                f"{resume_command(run_dir, config['world_size'])}")
    return args


def resume_command(run_dir, world_size):
    """The command that resumes the run, from any folder, with its workers (on one node)."""
    # torchrun kills workers 30 s after Ctrl-C: before a CPU iteration ends
    torchrun = f"torchrun --shutdown-timeout 600 --nproc-per-node {world_size}"
    launcher = "python" if world_size == 1 else torchrun
    script = shlex.quote(os.path.abspath(__file__))
    return f"{launcher} {script} --resume {shlex.quote(os.path.abspath(run_dir))}"


# --- Many workers (torchrun) and the device -------------------------------------------------------
# `torchrun --nproc-per-node W script.py` starts W workers of --num-envs envs each (the paper:
# 4 x 64); each holds the same networks and steps on the averaged gradient.
LAUNCHER = os.getppid()  # torchrun, for a worker: if it dies (kill -9), the workers stop


def worker():
    """(rank, world size) as torchrun sets them, (0, 1) without it; rank 0 logs for all."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def cpu_threads():
    """The cores this process may use, shared by the workers (Linux knows its CPU set)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity else os.cpu_count()
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def setup(args):
    """Joins torchrun's workers; sets the GPU's maths, the threads, the seed, the micro-batch."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    use_cuda = args.cuda and torch.cuda.is_available()
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    if worker()[1] > 1:
        gpu_each = use_cuda and torch.cuda.device_count() >= local_size
        dist.init_process_group("nccl" if gpu_each else "gloo")
    # TF32 (a 10-bit mantissa); cuDNN's fastest algorithms, not all deterministic: a GPU run,
    # its resume too, is not repeatable to the bit (a CPU run's is)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.set_num_threads(cpu_threads())
    # training's random generator (Procgen, evaluate() seed their own)
    torch.manual_seed(args.seed + worker()[0])
    if args.micro_batch_size is None:  # 1-2 CPU threads: 16-64 ran alike, 128 slower
        args.micro_batch_size = 0 if use_cuda else max(32, 16 * cpu_threads())
    return device


def average_gradients(params):
    """Once per optimiser step, after the micro-batches: each worker's gradient becomes the mean."""
    grads = [p.grad for p in params if p.grad is not None]
    if dist.is_initialized():
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        means = flat.div_(dist.get_world_size()).split([g.numel() for g in grads])
        for g, mean in zip(grads, means):
            g.copy_(mean.view_as(g))


def all_reduce_sum(tensor):
    """The sum over workers (statistics, episode counts, stop flags); on one worker, the tensor."""
    if dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor


@torch.no_grad()
def prepare_networks(learner, args):
    """Rank 0's weights on every worker (not buffers: a worker's envs' returns are its own);
    --bf16, --compile (dynamic shapes fail in torch 2.13) for every IMPALA CNN."""
    nets = [m for m in learner.values() if isinstance(m, nn.Module)]
    if dist.is_initialized():
        for net in nets:
            for tensor in net.parameters():
                dist.broadcast(tensor, 0)
    for cnn in [m for net in nets for m in net.modules() if isinstance(m, ImpalaCNN)]:
        cnn.bf16 = args.bf16
        if args.compile:
            cnn.compile(dynamic=False)


@functools.cache  # once a network: the optimiser steps in place the weights the graph reads
def cuda_graph(net, num_envs):
    """net.forward on num_envs frames as one CUDA graph: one launch a step, not one a layer (given
    net, the graph would replace its forward, the update's too). A call overwrites the last's."""
    frames = torch.zeros((num_envs, 64, 64, 3), dtype=torch.uint8, device="cuda")
    return torch.cuda.make_graphed_callables(net.forward, (frames,))


# --- Evaluation and videos ------------------------------------------------------------------------
def held_out_levels(args):
    """(start_level, num_levels): after the training levels with --num-levels, else all levels."""
    return args.start_level + args.num_levels, (1_000_000 if args.num_levels else 0)


@torch.no_grad()
def evaluate(args, agent, episodes, seed, gif=None):
    """The returns and lengths of `episodes` held-out episodes, one env each (the first to end would
    favour short ones); with `gif`, the first one's GIF."""
    start_level, num_levels = held_out_levels(args)
    device = next(agent.parameters()).device
    mode = args.distribution_mode
    envs = ProcgenVecEnv(args.env_id, episodes, mode, num_levels, start_level, seed)
    generator = torch.Generator(device).manual_seed(seed)
    obs = envs.obs
    returns = np.full(episodes, np.nan)
    lengths = np.zeros(episodes, dtype=int)
    frames = []
    while np.isnan(returns).any():
        if gif and np.isnan(returns[0]):  # Procgen ends an episode by 1,000 steps
            frames.append(obs[0])
        logits = agent.logits(torch.from_numpy(obs).to(device))
        action = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
        obs, _, ended, (episode_returns, episode_lengths) = envs.step(action.cpu().numpy())
        first_end = ended & np.isnan(returns)  # after an end, obs is the next level's first frame
        returns[first_end] = episode_returns[first_end]
        lengths[first_end] = episode_lengths[first_end]
    if gif:
        from PIL import Image  # comes with matplotlib
        images = [Image.fromarray(frame).resize((128, 128), Image.NEAREST) for frame in frames]
        os.makedirs(os.path.dirname(gif), exist_ok=True)
        images[0].save(gif, save_all=True, append_images=images[1:], duration=40, loop=0)
    return returns.tolist(), lengths.tolist()


def evaluate_held_out(args, agent, iteration):
    """Rank 0: the row's eval_return and eval_length, over --eval-episodes held-out episodes."""
    if worker()[0]:
        return {}
    returns, lengths = evaluate(args, agent, args.eval_episodes, args.seed + iteration)
    return {"eval_return": np.mean(returns), "eval_length": np.mean(lengths)}


def save_video(args, agent, run_dir, iteration):
    """Rank 0: a GIF of one held-out episode, in the run folder's videos/."""
    if worker()[0] == 0:
        gif = os.path.join(run_dir, "videos", f"iter_{iteration:06d}.gif")
        evaluate(args, agent, 1, args.seed + iteration, gif)


def evaluate_saved_agent(args, device):
    """--evaluate RUN_DIR: load the saved agent, evaluate it on held-out levels, maybe a GIF."""
    agent = Agent(NUM_ACTIONS).to(device)
    iteration = load_checkpoint(args.evaluate, {"agent": agent}, collections.deque())[0]
    returns, lengths = evaluate(args, agent, args.eval_episodes or 10, seed=args.seed + 10_000)
    stderr = np.std(returns, ddof=1) / math.sqrt(len(returns)) if len(returns) > 1 else math.nan
    say(f"{args.env_id}, iteration {iteration}: mean return {np.mean(returns):.2f} +- {stderr:.2f} "
        f"(standard error) over {len(returns)} held-out episodes, "
        f"mean length {np.mean(lengths):.0f}")
    if args.capture_video:
        gif = os.path.join(args.evaluate, "videos", f"evaluate_iter_{iteration:06d}.gif")
        evaluate(args, agent, 1, seed=args.seed + 20_000, gif=gif)
        say(f"video: {gif}")
    return returns


# --- Checkpoints: what a resume puts back ---------------------------------------------------------
def checkpoint_path(run_dir):
    """Each worker saves its own."""
    rank = worker()[0]
    return os.path.join(run_dir, f"checkpoint.rank{rank}.pt" if rank else "checkpoint.pt")


def save_checkpoint(run_dir, learner, stale_rollouts, iteration, time_s):
    """The learner (the envs' games too), the staleness FIFO, the generator, the run's time."""
    state = {name: part.state_dict() for name, part in learner.items()}
    device = next(learner["agent"].parameters()).device
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    rng = {"torch": torch.get_rng_state(), "cuda": cuda}
    state.update(iteration=iteration, time_s=time_s, rng=rng, stale_rollouts=list(stale_rollouts))
    # no worker renames its checkpoint before all have written theirs: a set (.item() waits)
    written = lambda: all_reduce_sum(torch.ones((), device=device)).item()
    replace_file(checkpoint_path(run_dir), lambda f: torch.save(state, f), "wb", written)


def load_checkpoint(run_dir, learner, stale_rollouts):
    """--resume and --evaluate: the saved state back in place; returns (iteration, time_s)."""
    path = checkpoint_path(run_dir)
    try:  # safe, mapped, onto the CPU from any device: load_state_dict puts each tensor in place
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # truncated, corrupt, or not a checkpoint at all
        error(f"cannot read {path} ({type(e).__name__}): put back a copy, or start a new run")
    device = next(learner["agent"].parameters()).device
    for name in learner.keys() & state.keys():
        learner[name].load_state_dict(state[name])
    torch.set_rng_state(state["rng"]["torch"])
    if device.type == "cuda" and state["rng"].get("cuda") is not None:  # none from a CPU run
        torch.cuda.set_rng_state(state["rng"]["cuda"], device)
    stale_rollouts.extend({k: v.to(device) for k, v in r.items()} for r in state["stale_rollouts"])
    newest_and_minus_oldest = torch.tensor([state["iteration"], -state["iteration"]], device=device)
    if dist.is_initialized():
        dist.all_reduce(newest_and_minus_oldest, op=dist.ReduceOp.MAX)
    if newest_and_minus_oldest.sum() != 0:
        error(f"the workers' checkpoints in {run_dir} are of different iterations: put back a set")
    return state["iteration"], state["time_s"]


def replace_file(path, write, mode="w", ready=lambda: None):
    """write(f) into path + ".tmp", synced to the disk, renamed over path once ready(): a crash,
    kill -9 or power cut leaves the old file or the new one whole; a failure (full disk) no .tmp."""
    text = {} if "b" in mode else {"newline": ""}
    try:
        with open(path + ".tmp", mode, **text) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        ready()
        os.replace(path + ".tmp", path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + ".tmp")


# --- The run: its folder, progress.csv, the console, signals and stops ----------------------------
COLUMNS = ["iteration", "global_step", "time_s", "sps", "episodic_return", "episodic_length",
           "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "adv_mean", "adv_std",
           "imp_samp_capfrac", "eval_return", "eval_length",
           "aux_kl", "aux_value_loss", "aux_true_value_loss", "aux_time_s"]
SIGNALLED = []  # Ctrl-C, SIGTERM, SIGHUP: the run stops after this iteration
HANDLERS = {}  # the handlers that on_signal replaced, put back when the run ends


def error(message):
    """One line and exit code 2, as argparse's."""
    print(f"{SCRIPT}: error: {message}", file=sys.stderr, flush=True)
    if dist.is_initialized():  # at once: tearing down a live group can abort
        os._exit(2)
    sys.exit(2)


def say(*args):
    """Print, on rank 0 alone: it speaks for all workers."""
    if worker()[0] == 0:
        print(*args, flush=True)


def on_signal(signum, frame):
    """Finish the iteration, save, exit; a second signal stops at once."""
    if SIGNALLED:
        sys.exit(128 + signum)
    SIGNALLED.append(signal.Signals(signum).name)
    say(f"\n{SIGNALLED[0]}: finishing this iteration, then stopping (again to stop at once)")


def open_run(args, device, num_iterations, start):
    """The run folder (rank 0's for all), locked for one writer, its files written, the signals
    caught; returns (run_dir, lock)."""
    name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    folder = [args.resume or os.path.join(args.runs_dir, name)]
    rank = worker()[0]
    if rank == 0 and not args.resume:  # a run started in the same second, same name, fails
        os.makedirs(folder[0])
    if dist.is_initialized():
        dist.broadcast_object_list(folder, 0)
    run_dir = folder[0]
    # held till the run ends: a resume of a run that still trains fails here
    lock = filelock.FileLock(os.path.join(run_dir, f"run.rank{rank}.lock" if rank else "run.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        error(f"{run_dir} is in use by another process (the run, or a resume of it): stop it first")
    batch_size = args.num_envs * args.num_steps
    if rank == 0:
        write_run_files(run_dir, args, start, batch_size=batch_size, num_iterations=num_iterations,
                        minibatch_size=batch_size // args.num_minibatches, device=str(device),
                        world_size=worker()[1], global_batch_size=batch_size * worker()[1],
                        script=SCRIPT)
    SIGNALLED.clear()
    # SIGHUP: a closed terminal; ignored under nohup, and Windows has none
    for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if s and signal.getsignal(s) != signal.SIG_IGN:
            HANDLERS[s] = signal.signal(s, on_signal)
    say(f"{args.exp_name} on {args.env_id} ({args.distribution_mode}), {device}: "
        f"{args.num_envs} envs x {args.num_steps} steps x {worker()[1]} worker(s), "
        f"{num_iterations} iterations = {num_iterations * batch_size * worker()[1]:,} steps "
        f"({start} done); run folder {run_dir}")
    return run_dir, lock


def columns(args):
    """progress.csv's columns; the last four, aux_*, are PPG's alone."""
    return COLUMNS if "n_pi" in vars(args) else COLUMNS[:-4]


def write_run_files(run_dir, args, start, **derived):
    """config.json: every hyperparameter after Section 4's adjustments, what the run is made of, the
    package versions; progress.csv anew: its header and, on resume, its rows up to `start`."""
    procgen_version = getattr(procgen, "__version__", "unknown").strip()
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "numpy": np.__version__, "procgen": f"{procgen.__name__} {procgen_version}"}
    config = {**vars(args), **derived, "versions": versions}
    replace_file(os.path.join(run_dir, "config.json"), lambda f: json.dump(config, f, indent=2))
    path = os.path.join(run_dir, "progress.csv")
    rows = []
    with contextlib.suppress(FileNotFoundError), open(path, newline="") as f:  # a new run has none
        rows = [row for row in csv.DictReader(f) if int(row["iteration"]) <= start]

    def write(f):  # the header, then the rows kept
        writer = csv.DictWriter(f, columns(args))
        writer.writeheader()
        writer.writerows(rows)
    replace_file(path, write)


def due(iteration, every, num_iterations):
    """Every `every` iterations, and at the end."""
    return iteration % every == 0 or iteration == num_iterations


def log_iteration(run_dir, args, device, iteration, num_iterations, stats, rollout_log, seconds,
                  clock):
    """Rank 0 writes a row of progress.csv (every worker's episodes, its own losses) and a console
    line; returns the row. `seconds`: this iteration's training, for its speed; `clock`: main's."""
    time_before, began, start = clock
    returns = rollout_log["episode_returns"]
    lengths = rollout_log["episode_lengths"]
    totals = [len(returns), sum(returns), sum(lengths)]
    totals = all_reduce_sum(torch.tensor(totals, dtype=torch.float64, device=device))
    episodes, return_sum, length_sum = totals.tolist()
    global_batch_size = args.num_envs * args.num_steps * worker()[1]
    elapsed = time.time() - began
    row = dict(stats, iteration=iteration, global_step=iteration * global_batch_size,
               time_s=round(time_before + elapsed, 3), sps=round(global_batch_size / seconds, 1))
    mean = "       - (0 eps)"
    if episodes:  # else the episodes' columns stay empty
        row["episodic_return"] = return_sum / episodes
        row["episodic_length"] = length_sum / episodes
        mean = f"{row['episodic_return']:8.2f} ({episodes:.0f} eps)"
    if worker()[0] == 0:
        with open(os.path.join(run_dir, "progress.csv"), "a", newline="") as f:
            csv.DictWriter(f, columns(args)).writerow(row)
    # the remaining time at this process's pace
    eta = int(elapsed / (iteration - start) * (num_iterations - iteration))
    say(f"iter {iteration}/{num_iterations} | step {row['global_step']:,} | return {mean} | "
        f"sps {row['sps']:.0f} | eta {eta // 3600}h{eta % 3600 // 60:02d}m")
    return row


def stop_check(row, agent, device):
    """(problem, stop), set on every worker whichever saw it: a non-finite value in the row or
    the parameters stops before saving; a signal, or the torchrun launcher gone, after."""
    bad = [k for k, v in row.items() if not math.isfinite(v)]
    bad += [f"parameter {n}" for n, p in agent.named_parameters() if not p.isfinite().all()]
    orphaned = worker()[1] > 1 and os.getppid() != LAUNCHER
    flags = [bool(bad), bool(SIGNALLED), orphaned]
    flags = all_reduce_sum(torch.tensor(flags, dtype=torch.float64, device=device))
    broken, signalled, orphaned = flags.tolist()
    where = bad[0] if bad else "values on another worker"
    problem = f"iteration {row['iteration']}: non-finite {where}" if broken else None
    stop = "no launcher" if orphaned else "SIGTERM" if signalled else None
    return problem, SIGNALLED[0] if SIGNALLED and signalled else stop


def finish(run_dir, lock, problem, stop, last_saved):
    """Close everything; exit on a problem or a stop, with its message; else return the folder."""
    while HANDLERS:
        signal.signal(*HANDLERS.popitem())
    lock.release()  # for a caller that goes on
    if dist.is_initialized():
        dist.destroy_process_group()
    kept = "no checkpoint"
    resume = "."
    if last_saved is not None:
        kept = f"checkpoint of iteration {last_saved}"
        resume = f": resume with {resume_command(run_dir, worker()[1])}"
    if problem:
        sys.exit(f"{SCRIPT}: {problem}; stopped, {kept} in {run_dir}")
    if stop:
        say(f"Stopped ({stop}), {kept}{resume}")
        sys.exit(128 + getattr(signal, stop, signal.SIGTERM))
    return run_dir


if __name__ == "__main__":
    main()
