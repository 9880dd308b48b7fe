# Tutorial: docs/README.md walks through this file top to bottom; `diff ppo.py ppo_ewma.py` is the paper.
"""PPO-EWMA on Procgen, in one file: PPO whose proximal policy is decoupled from the behaviour policy and is an
EWMA of the policy network, from "Batch size-invariance for policy optimization" (Hilton, Cobbe, Schulman 2021).

    python ppo_ewma.py --env-id starpilot

The algorithm first, in the same sections in ppo.py, ppo_ewma.py, ppg.py and ppg_ewma.py; then an appendix of
machinery (argument checks, resume, workers, evaluation, checkpoints, logging), identical in all four files."""
import argparse
import collections
import contextlib
import copy
import csv
import io
import json
import math
import os
import platform
import shlex
import signal
import sys
import time

import filelock  # comes with torch: the run folder's lock (Run)
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

SCRIPT = os.path.basename(__file__)  # this script's name, in messages and in config.json
try:  # Python 3.13: procgen-gym, Procgen's C++ games unchanged, ported to gymnasium and numpy 2
    import procgen_gym as procgen
    ProcgenGames = procgen.ProcgenVecEnv  # reset() -> (obs, info); step(actions) -> (obs, reward, first, ...)
except ImportError:  # Python 3.11 and 3.12: procgen-mirror, the original package, on gym3 and numpy < 2
    with contextlib.redirect_stderr(io.StringIO()):  # it imports old gym, which prints a notice about its own end
        import procgen

    class ProcgenGames(procgen.ProcgenGym3Env):  # procgen-gym's reset and step, on gym3's observe and act
        def reset(self):
            return self.observe()[1]["rgb"], {}

        def step(self, actions):
            self.act(actions)
            reward, obs, first = self.observe()
            return obs["rgb"], reward, first


# --- Arguments -----------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # help shows every default
    p.error = lambda message: p.exit(2, f"{SCRIPT}: error: {message}\n")  # bad input: one line, no usage dump
    a, yes_no = p.add_argument, argparse.BooleanOptionalAction
    # experiment
    a("--exp-name", default=SCRIPT[:-3], help="name used in the run folder")
    a("--seed", type=int, default=1, help="seeds torch and Procgen")
    a("--cuda", action=yes_no, default=True, help="use the GPU if there is one")
    a("--runs-dir", type=os.path.expanduser, default="runs", help="parent folder of the run folder")
    # environment (Procgen, Cobbe et al. 2019)
    a("--env-id", default="starpilot", choices=PROCGEN_GAMES, metavar="GAME", help="one of the 16 Procgen games")
    a("--distribution-mode", default="easy", choices=("easy", "hard"), help="the paper used hard")
    a("--num-levels", type=int, default=0, help="number of training levels (0 = unlimited)")
    a("--start-level", type=int, default=0, help="first training level")
    a("--total-timesteps", type=int, default=25_000_000, help="env steps in the whole run")
    a("--num-envs", type=int, default=64, help="parallel environments (N)")
    a("--num-steps", type=int, default=256, help="steps per environment per rollout (T)")
    # optimisation (Appendix B, Tables 1 and 2)
    a("--num-minibatches", type=int, default=8, help="minibatches per epoch")
    a("--minibatch-by", default="step", choices=("step", "env"), help="steps (CleanRL) or trajectories (official)")
    a("--update-epochs", type=int, default=3, help="policy epochs per iteration (E)")
    a("--learning-rate", type=float, default=5e-4, help="Adam step size (alpha)")
    a("--gamma", type=float, default=0.999, help="discount (gamma)")
    a("--gae-lambda", type=float, default=0.95, help="GAE bootstrapping parameter (lambda)")
    a("--clip-coef", type=float, default=0.2, help="PPO clipping parameter (epsilon); 0 = no clipping")
    a("--kl-penalty", type=float, default=0.0, help="KL penalty coefficient (beta in eq. 8); 0 = off")
    a("--ent-coef", type=float, default=0.01, help="entropy coefficient")
    a("--vf-coef", type=float, default=0.25, help="value function coefficient (official code 0.5)")
    a("--clip-vloss", action=yes_no, default=True, help="clip value updates at --clip-coef (CleanRL; official: no)")
    a("--max-grad-norm", type=float, default=0.5, help="gradient norm clip; 0 = off (official code)")
    a("--adam-eps", type=float, default=1e-5, help="Adam's epsilon (CleanRL 1e-5, official 1e-8)")
    a("--init", default="pytorch", choices=("pytorch", "normed"), help="weights: CleanRL's or the official code's")
    a("--norm-reward", action=yes_no, default=True, help="reward normalisation")
    a("--norm-reward-gamma", type=float, default=0.999, help="discount of the return scaling rewards (official 0.99)")
    a("--norm-adv", action=yes_no, default=True, help="advantage normalisation")
    a("--adv-ewma-decay", type=float, default=0.0, help="EWMA decay of advantage statistics (Section 4)")
    # the paper's experiments
    a("--prox", default="ewma", choices=("ewma", "recent"), help="prox: the EWMA, or the policy before this iteration")
    a("--beta-prox", type=float, default=0.889, help="EWMA decay (Table 4): centre of mass 1/(1-beta)-1 = 8 steps")
    a("--imp-samp-max", type=float, default=100.0, help="cap on pi_theta/pi_behav (App. B); 0 = off")
    a("--staleness", type=int, default=0, help="train on the rollout collected K iterations ago (Section 5.1)")
    a("--batch-divisor", type=int, default=1, help="divide the batch size by C with Section 4's adjustments")
    a("--no-adjust", action="append", default=[], choices=ADJUSTMENTS, help="drop one adjustment (repeatable)")
    a("--adam-beta-adjust", action="store_true", help="raise Adam's betas to the power 1/C (Appendix D)")
    # long runs, watching and testing the agent, speed
    a("--save-model", action=yes_no, default=True, help="checkpoint every --save-interval iterations and at the end")
    a("--save-interval", type=int, default=10, help="iterations between checkpoints")
    a("--resume", metavar="RUN_DIR", type=os.path.expanduser, help="continue the run in RUN_DIR from its checkpoint")
    a("--capture-video", action="store_true", help="save a GIF of one episode every --video-interval iterations")
    a("--video-interval", type=int, default=50, help="iterations between videos")
    a("--eval-episodes", type=int, default=0, help="episodes on held-out levels per evaluation (0 = off)")
    a("--eval-interval", type=int, default=10, help="iterations between evaluations")
    a("--evaluate", metavar="RUN_DIR", type=os.path.expanduser, help="evaluate RUN_DIR's agent on held-out levels")
    a("--micro-batch-size", type=int, help="micro-batch (same gradient); default: none on a GPU, 16 per thread >= 32")
    a("--bf16", action="store_true", help="bfloat16 autocast in the CNNs (other numerics; faster on GPUs, bf16 CPUs)")
    a("--compile", action="store_true", help="torch.compile the CNNs (costs start-up time; same maths)")
    args = p.parse_args(argv)
    if args.resume or args.evaluate:
        return resume_args(p, argv, args)  # the run's own config.json, adjustments included (appendix)
    check_args(p, args)  # ranges, and arguments that depend on each other (appendix)
    apply_batch_size_invariance(args)
    return args


# --- Batch-size invariance (Section 4) -------------------------------------------------------------------
ADJUSTMENTS = ("lr", "prox", "adv")  # Section 4's batch-size-invariance adjustments that apply to this script


def apply_batch_size_invariance(args):
    """Section 4: to divide the batch size by C, divide the envs by C and adjust the rest to match."""
    c = args.batch_divisor
    args.adam_betas = (0.9, 0.999)  # Adam's defaults
    if c == 1:
        return  # nothing to adjust
    args.num_envs //= c
    if "lr" not in args.no_adjust:
        args.learning_rate /= math.sqrt(c)  # Adam step size / sqrt(C) (Section 3.2, Appendix C)
    if "prox" not in args.no_adjust:  # EWMA centre of mass 1/(1-beta_prox)-1, in gradient steps, times C
        args.beta_prox = 1 - 1 / (c * (1 / (1 - args.beta_prox) - 1) + 1)
    if "adv" not in args.no_adjust:  # effective sample size 2/(1-beta)-1, in iterations, times C (footnote 1)
        args.adv_ewma_decay = 1 - 2 / (c * (2 / (1 - args.adv_ewma_decay) - 1) + 1)
    if args.adam_beta_adjust:
        args.adam_betas = tuple(b ** (1 / c) for b in args.adam_betas)  # Appendix D


# --- Environment: Procgen's vector env ------------------------------------------------------------------------
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
                 "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")
NUM_ACTIONS = 15  # every Procgen game has the same 15 actions


class ProcgenVecEnv:
    """num_envs Procgen games, stepped together. An env resets inside the step that ends its episode (the obs is then
    the next level's first frame); a time-out is an end too, as officially. It adds up each episode for the log; its
    state_dict holds every game, so a resumed run goes on in the same episodes."""
    def __init__(self, env_id, num_envs, distribution_mode, num_levels, start_level, seed):
        self.games = ProcgenGames(num_envs, env_name=env_id, distribution_mode=distribution_mode, num_levels=num_levels,
                                  start_level=start_level, rand_seed=seed, num_threads=min(16, cpu_threads()))
        self.num_envs, self.obs = num_envs, self.games.reset()[0]
        self.first, self.returns, self.lengths = np.ones(num_envs, bool), np.zeros(num_envs), np.zeros(num_envs, int)

    def step(self, actions):  # -> obs, reward, first, (return, length) of each env's episode: ended where first
        obs, reward, first = self.games.step(np.asarray(actions, dtype=np.int32))[:3]
        self.obs, self.first, self.returns, self.lengths = obs, first, self.returns + reward, self.lengths + 1
        episodes = self.returns, self.lengths
        self.returns, self.lengths = np.where(first, 0, self.returns), np.where(first, 0, self.lengths)
        return obs, reward, first, episodes

    def state_dict(self):  # every game, and each env's episode so far and last frame
        return {"games": self.games.get_state(),
                **{k: torch.tensor(getattr(self, k)) for k in ("obs", "first", "returns", "lengths")}}

    def load_state_dict(self, state):
        self.games.set_state(state["games"])
        for k in ("obs", "first", "returns", "lengths"):
            setattr(self, k, state[k].numpy())


# --- Network: IMPALA CNN (Espeholt et al. 2018) ------------------------------------------------------
def normed(layer, scale):
    """--init normed, the official code's: each output unit's weights rescaled to norm `scale`, zero biases."""
    with torch.no_grad():
        layer.weight.mul_(scale / layer.weight.flatten(1).norm(dim=1).view(-1, *[1] * (layer.weight.dim() - 1)))
        layer.bias.zero_()
    return layer


def pytorch_init(agent):
    """--init pytorch (CleanRL PPO's): PyTorch's defaults in place of the layers' normed weights, then orthogonal
    heads, gain 0.01 for logits and 1 for values, so that the policy starts near uniform."""
    for layer in [m for m in agent.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]:
        layer.reset_parameters()
        if layer.weight.shape[0] in (1, NUM_ACTIONS):  # a head: no conv or hidden layer has 1 or 15 outputs
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
        self.blocks = nn.Sequential(ResidualBlock(out_channels, scale), ResidualBlock(out_channels, scale))

    def forward(self, x):
        return self.blocks(F.max_pool2d(self.conv(x), kernel_size=3, stride=2, padding=1))


class ImpalaCNN(nn.Module):
    """uint8 frames (B, 64, 64, 3) -> features (B, 256). 3 stages of 16, 32, 32 channels."""
    def __init__(self, channels=(16, 32, 32), out_features=256):
        super().__init__()
        scale = 6 ** -0.25  # = sqrt(1/sqrt(3 stages) / sqrt(2 blocks)): the residual sums keep unit variance (official)
        self.stages = nn.Sequential(*[ConvSequence(c_in, c_out, scale)
                                      for c_in, c_out in zip((3,) + channels[:-1], channels)])
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


# --- EWMA proximal network (Section 4, Appendix A) ------------------------------------------------------
class EWMA(nn.Module):
    """theta_prox = (theta_t + beta theta_{t-1} + ... + beta^t theta_0) / (1 + beta + ... + beta^t) over the weights
    after each gradient step, kept incrementally (App. A). A copy of `net`, the policy's network; only `logits` runs."""
    def __init__(self, net, beta_prox):
        super().__init__()
        self.net, self.beta_prox = copy.deepcopy(net).requires_grad_(False).eval(), beta_prox
        self.reset(net)

    def reset(self, net):  # theta_prox <- theta, w <- 1
        self.net.load_state_dict(net.state_dict())
        self.w = 1.0

    @torch.no_grad()
    def update(self, net):
        w_new = 1 + self.beta_prox * self.w
        for prox, theta in zip(self.net.parameters(), net.parameters()):  # one in-place lerp per tensor:
            prox.lerp_(theta, 1 / w_new)  # theta_prox <- theta / w_new + beta_prox * (w / w_new) * theta_prox
        self.w = w_new

    def get_extra_state(self):  # checkpoints keep w beside the averaged weights
        return {"w": self.w}

    def set_extra_state(self, state):
        self.w = state["w"]


# --- Rollout ---------------------------------------------------------------------------------------------
def new_rollout(num_steps, num_envs, device):
    """One rollout, on the device. `firsts[t]` marks obs t as the first frame of an episode."""
    z = lambda dtype: torch.zeros((num_steps, num_envs), dtype=dtype, device=device)  # noqa: E731
    return {"obs": torch.zeros((num_steps, num_envs, 64, 64, 3), dtype=torch.uint8, device=device),
            "actions": z(torch.long), "logp_behav": z(torch.float32), "rewards": z(torch.float32),
            "firsts": z(torch.bool), "values": z(torch.float32)}


@torch.no_grad()
def collect_rollout(envs, agent, num_steps, device):
    """Run the behaviour policy (the current network) for num_steps more steps in every environment. The rollout also
    carries the frame after it (for the bootstrap value); beside it, for the log: its finished episodes."""
    rollout, log = new_rollout(num_steps, envs.num_envs, device), {"episode_returns": [], "episode_lengths": []}
    next_obs, next_first = torch.from_numpy(envs.obs).to(device), torch.from_numpy(envs.first).to(device)
    for t in range(num_steps):
        rollout["obs"][t], rollout["firsts"][t] = next_obs, next_first
        logits, value = agent(next_obs)
        action = torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(-1)
        rollout["actions"][t], rollout["values"][t] = action, value
        rollout["logp_behav"][t] = log_prob(logits, action)  # pi_behav(a_t|s_t), stored for later
        obs, reward, first, (returns, lengths) = envs.step(action.cpu().numpy())  # the one host sync per step
        rollout["rewards"][t] = torch.from_numpy(reward).to(device)
        next_obs, next_first = torch.from_numpy(obs).to(device), torch.from_numpy(first).to(device)
        log["episode_returns"] += returns[first].tolist()  # every episode that finished on this step, not just one
        log["episode_lengths"] += lengths[first].tolist()
    rollout["next_obs"], rollout["next_first"] = next_obs, next_first
    return rollout, log


# --- Reward normalisation --------------------------------------------------------------------------------
class RewardNormalizer(nn.Module):
    """Rewards / the running std of a discounted return (--norm-reward-gamma: 0.99 in the official code, the agent's
    gamma in CleanRL), clipped to [-10, 10]; updated per rollout, workers' moments pooled (officially: averaged)."""
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
        var_x, delta, total = (total_sq / n - mean_x * mean_x).clamp_min(0), mean_x - self.mean, self.count + n
        self.var = (self.var * self.count + var_x * n + delta ** 2 * self.count * n / total) / total
        self.mean, self.count = self.mean + delta * n / total, total
        return torch.clamp(rewards / torch.sqrt(self.var + self.eps).float(), -self.clip, self.clip)


# --- GAE (Schulman et al. 2015) ------------------------------------------------------------------------
def compute_gae(rewards, values, firsts, next_value, next_first, gamma, gae_lambda):
    """Advantages and value targets. An episode ended after step t iff obs t+1 is a first frame;
    then nothing is bootstrapped across the boundary (Procgen time-outs count as ends, as officially)."""
    num_steps, advantages, last_gae = rewards.shape[0], torch.zeros_like(rewards), torch.zeros_like(next_value)
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
    batch = {k: rollout[k].flatten(0, 1) for k in ("obs", "actions", "logp_behav", "values")}  # steps x envs -> steps
    batch.update(advantages=advantages.flatten(), returns=returns.flatten(), adv_mean=adv_mean, adv_std=adv_std)
    # Section 5.1: prox = recent is the policy before this iteration, so its log-probs are fixed here
    batch["logp_recent"] = chunked_log_prob(agent, batch["obs"], batch["actions"]) if args.prox == "recent" else None
    return batch


# --- Losses (decoupled objectives: Section 2) -----------------------------------------------------------
def policy_loss(logp, logp_behav, logp_prox, advantages, clip_coef, kl_penalty, imp_samp_max):
    """Section 2, in log space: (pi_prox/pi_behav) min(r A, clip(r, 1-eps, 1+eps) A) with r = pi_theta/pi_prox, and/or
    (pi_theta/pi_behav) A - beta KL[prox, theta]. With prox = behav this is exactly PPO's loss.
    The importance weight is capped at imp_samp_max (Appendix B; 0 = no cap), in value only: gradients still flow
    through logp. It bites only on stale data (Section 5.1), in every script as in the official code."""
    log_cap = logp.detach() - math.log(imp_samp_max) if imp_samp_max else torch.full_like(logp, -math.inf)
    capped = logp_behav < log_cap
    logp_behav_capped = torch.maximum(logp_behav, log_cap)  # exp(logp - this) = min(pi_theta/pi_behav, imp_samp_max)
    logratio = logp - logp_prox  # log r_t(theta), against the proximal policy
    pg_losses = -advantages * torch.exp(logp - logp_behav_capped)
    if clip_coef > 0:
        clipped = torch.clamp(logratio, math.log(1 - clip_coef), math.log(1 + clip_coef))
        log_weight = clipped + logp_prox - logp_behav_capped  # = log[(pi_prox/pi_behav_capped) clip(r, 1-eps, 1+eps)]
        pg_losses = torch.maximum(pg_losses, -advantages * torch.exp(log_weight))
    # KL[prox, theta] by the sampled estimate 0.5 * (log r)^2, as the official code
    kl = 0.5 * logratio.pow(2)
    with torch.no_grad():
        outside = (logratio < math.log(1 - clip_coef)) | (logratio > math.log(1 + clip_coef))
        diagnostics = {"approx_kl": kl.mean(), "imp_samp_capfrac": capped.float().mean(),
                       "clipfrac": outside.float().mean() if clip_coef > 0 else kl.new_zeros(())}
    return pg_losses.mean() + kl_penalty * kl.mean(), diagnostics


def value_loss(value, returns, values_behav, clip_vloss):
    """Squared error of the value against the GAE returns (times vf_coef, no 0.5: official code). With clip_vloss > 0
    (CleanRL, after OpenAI baselines): the larger of it and the error of the value held within clip_vloss of the old."""
    loss = (value - returns).pow(2)
    if clip_vloss > 0:
        clipped = values_behav + (value - values_behav).clamp(-clip_vloss, clip_vloss)
        loss = torch.maximum(loss, (clipped - returns).pow(2))
    return loss.mean()


def micro_batch_loss(agent, batch, idx, args, ewma):
    """The forward pass on the steps idx of the batch: their loss, and its terms and diagnostics to log."""
    logits, value = agent(batch["obs"][idx])
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch["actions"][idx].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
    with torch.no_grad():  # prox: the EWMA weights as they are at this optimiser step (never cached)
        logp_prox = (log_prob(ewma.net.logits(batch["obs"][idx]), batch["actions"][idx])
                     if args.prox == "ewma" else batch["logp_recent"][idx])
    pg_loss, diagnostics = policy_loss(logp, batch["logp_behav"][idx], logp_prox, batch["advantages"][idx],
                                       args.clip_coef, args.kl_penalty, args.imp_samp_max)
    v_loss = value_loss(value, batch["returns"][idx], batch["values"][idx], args.clip_coef if args.clip_vloss else 0)
    loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss
    return loss, {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, **diagnostics}


# --- Update ------------------------------------------------------------------------------------------------
def update(agent, optimizer, batch, args, ewma):
    """E epochs of minibatch Adam steps on the policy and value losses. Returns the mean diagnostics."""
    batch_size = batch["actions"].numel()
    micro = args.micro_batch_size or batch_size // args.num_minibatches
    sums = collections.defaultdict(float, adv_mean=batch["adv_mean"], adv_std=batch["adv_std"])  # Section 6.2
    for epoch in range(args.update_epochs):
        for mb in minibatches(args, batch["actions"].device):
            optimizer.zero_grad(set_to_none=True)
            for idx in mb.split(micro):  # gradient accumulation: the same gradient as one pass over mb
                loss, diagnostics = micro_batch_loss(agent, batch, idx, args, ewma)
                (loss * (len(idx) / len(mb))).backward()
                for k, v in diagnostics.items():  # means over the epochs' steps
                    sums[k] = sums[k] + v.detach() * (len(idx) / (batch_size * args.update_epochs))
            average_gradients(agent.parameters())
            if args.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            ewma.update(agent)  # theta_prox <- EWMA_beta_prox(theta), after every policy step (Appendix A)
    return {k: float(v) for k, v in sums.items()}


def minibatches(args, device):
    """One epoch's minibatches, indices into the (num_steps x num_envs) batch, every step once: by env (official code)
    whole trajectories of shuffled envs, cut in time when minibatches outnumber envs; by step (CleanRL) single steps."""
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
    device = setup(args)  # the appendix: workers, device, threads and seed
    if args.evaluate:
        return evaluate_saved_agent(args, device)
    agent = Agent(NUM_ACTIONS).to(device)
    if args.init == "pytorch":
        pytorch_init(agent)  # CleanRL PPO's initialisation in place of the official code's (Network)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, betas=args.adam_betas, eps=args.adam_eps)
    reward_normalizer = RewardNormalizer(args.num_envs, args.norm_reward_gamma).to(device)  # pooled over workers
    adv_moments = AdvantageMoments(args.adv_ewma_decay).to(device)
    stale_rollouts = collections.deque()  # Section 5.1's FIFO of rollouts awaiting training
    learner = dict(agent=agent, optimizer=optimizer, reward_normalizer=reward_normalizer, adv_moments=adv_moments)
    learner["ewma"] = ewma = EWMA(agent, args.beta_prox)  # theta_prox <- theta, w <- 1 (Appendix A)
    learner["envs"] = envs = ProcgenVecEnv(args.env_id, args.num_envs, args.distribution_mode, args.num_levels,
                                           args.start_level, seed=args.seed + 100_000 * worker()[0])  # a worker's own
    num_iterations = math.ceil(args.total_timesteps / (args.num_envs * args.num_steps * worker()[1]))  # rounded up
    # --resume, as nanoGPT's: the saved state back in place (the envs' too: their episodes go on), and go on from there
    start, time_s = load_checkpoint(checkpoint_path(args.resume), learner, stale_rollouts) if args.resume else (0, 0.0)
    prepare_networks(learner, args)  # the appendix: rank 0's weights on every worker; --bf16, --compile
    run = Run(args, device, agent, num_iterations, start, time_s)  # the run folder, progress.csv, the console
    for iteration in range(start + 1, num_iterations + 1):
        rollout, rollout_log = collect_rollout(envs, agent, args.num_steps, device)
        if args.norm_reward:
            rollout["rewards"] = reward_normalizer(rollout["rewards"], rollout["firsts"])
        stale_rollouts.append(rollout)  # artificial staleness (Section 5.1): train on the rollout of K iterations ago
        stats = {}
        if len(stale_rollouts) > args.staleness:
            batch = make_batch(stale_rollouts.popleft(), agent, adv_moments, args)
            stats = update(agent, optimizer, batch, args, ewma)
        if args.eval_episodes and run.due(iteration, args.eval_interval):
            stats |= run.evaluate(iteration)  # on held-out levels
        if args.capture_video and run.due(iteration, args.video_interval):
            run.evaluate(iteration, video=True)  # a GIF of one episode
        run.log(iteration, stats, rollout_log)  # a row of progress.csv and a line on the console
        broken, stopping = run.check(iteration)  # a non-finite value; SIGINT, SIGTERM or SIGHUP
        if args.save_model and not broken and (stopping or run.due(iteration, args.save_interval)):
            save_checkpoint(run, learner, stale_rollouts, iteration)  # the appendix
        if broken or stopping:
            break
    return run.finish()


# ===================================================================================================================
# APPENDIX: the machinery. The algorithm is complete above; a first-time reader may stop here. The same in all four.
# ===================================================================================================================
# --- Argument checks and resume ------------------------------------------------------------------------------------
def check_args(p, args):
    """What the types leave open, before anything is written: one line naming the argument, exit code 2."""
    v, inf = vars(args), math.inf
    rules = [(k, 1 <= v[k] < inf, "at least 1") for k in ("total_timesteps", "num_envs", "num_steps", "num_minibatches",
             "update_epochs", "n_pi", "e_pi", "e_v", "e_aux", "batch_divisor", "save_interval", "video_interval",
             "eval_interval") if k in v]
    rules += [(k, 0 <= v[k] < inf, "at least 0 and finite") for k in ("seed", "num_levels", "start_level", "staleness",
              "eval_episodes", "micro_batch_size", "ent_coef", "vf_coef", "kl_penalty", "max_grad_norm", "beta_clone")
              if v.get(k) is not None]
    rules += [(k, 0 < v[k] < inf, "above 0 and finite") for k in ("learning_rate", "adam_eps")]
    rules += [(k, 0 <= v[k] <= 1, "in [0, 1]") for k in ("gamma", "gae_lambda")]
    rules += [(k, 0 <= v[k] < 1, "in [0, 1)") for k in ("clip_coef", "norm_reward_gamma", "adv_ewma_decay", "beta_prox")
              if k in v]  # clip_coef: log(1 - epsilon) must exist
    rules += [("imp_samp_max", v["imp_samp_max"] == 0 or 1 <= v["imp_samp_max"] < inf, "0 or at least 1")]
    rules += [(k, v[k] < 2 ** 30, "below 2**30 (Procgen's seeds are 31-bit; workers and evaluation add offsets)")
              for k in ("seed", "start_level", "num_levels")]
    c, t, m = max(1, args.batch_divisor), args.num_steps, max(1, args.num_minibatches)
    n, epochs = max(1, args.num_envs // c), "update_epochs" if "update_epochs" in v else "e_pi"
    by_step, by_env = args.minibatch_by == "step", n % m == 0 if m <= n else m % n == 0 and t % (m // n) == 0
    rules += [("num_envs", args.num_envs % c == 0, f"a multiple of --batch-divisor ({c})"),
              (epochs, c == 1 or v[epochs] == 1, "1 with --batch-divisor above 1 (Section 4)"),
              ("num_minibatches", (n * t) % m == 0 if by_step else by_env, f"a divisor of the {n * t} steps" if by_step
               else f"a divisor of the {n} envs, or k x {n} with k dividing {t} steps (--minibatch-by env)")]
    for key, ok, allowed in rules:
        if not ok:
            p.error(f"argument --{key.replace('_', '-')}: must be {allowed}, got {v[key]}")


FREE = ("total_timesteps", "cuda", "save_interval", "capture_video", "video_interval", "eval_episodes", "eval_interval",
        "micro_batch_size", "compile", "resume", "evaluate", "save_model")  # what a resume may change (never shorten)
DERIVED = ("batch_size", "minibatch_size", "num_iterations", "device", "versions", "world_size", "global_batch_size",
           "script")  # in config.json beside the arguments


def resume_args(p, argv, args):
    """--resume or --evaluate RUN_DIR: the run's config.json becomes the parser's defaults, as in nanoGPT. A flag given
    again must repeat the run's value unless it is FREE: the run's results stay those of one configuration."""
    run_dir, flag = args.resume or args.evaluate, "resume" if args.resume else "evaluate"
    if not os.path.isfile(checkpoint_path(run_dir)):
        p.error(f"argument --{flag}: no {os.path.basename(checkpoint_path(run_dir))} in {run_dir!r}")
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = dict(json.load(f))
    except (OSError, ValueError, TypeError) as e:  # missing, cut short, or not a run's config
        p.error(f"argument --{flag}: cannot read {run_dir!r}'s config.json ({type(e).__name__})")
    made_by, missing = config.get("script"), sorted(set(vars(args)) - set(config))
    if made_by != SCRIPT or missing:  # another script, or an older version whose defaults may not be the run's
        why = f"a run of {made_by}" if made_by != SCRIPT else f"from an older {SCRIPT}, with no {missing[0]}"
        p.error(f"argument --{flag}: {run_dir!r} is {why}, not of this {SCRIPT}")
    p.set_defaults(**{k: v for k, v in config.items() if k not in DERIVED + ("micro_batch_size", "resume", "evaluate")})
    args = p.parse_args(argv)
    for key, value in vars(args).items():
        if key not in FREE and value != config[key] or key == "total_timesteps" and value < config[key]:
            p.error(f"argument --{key.replace('_', '-')}: the run in {run_dir!r} has {config[key]!r}, got {value!r}")
    if args.resume and config["world_size"] != worker()[1]:  # each worker's environments and generator are its own
        p.error(f"argument --resume: the run has {config['world_size']} workers: resume it with "
                f"{resume_command(run_dir, config['world_size'])}")
    check_args(p, argparse.Namespace(**{**vars(args), "num_envs": args.num_envs * args.batch_divisor}))  # as a new run
    args.eval_episodes = args.eval_episodes or (10 if args.evaluate else 0)
    return args


def resume_command(run_dir, world_size):  # from any folder, with the workers it was started with (on one node)
    launcher = "python" if world_size == 1 else f"torchrun --nproc-per-node {world_size}"
    return f"{launcher} {shlex.quote(os.path.abspath(__file__))} --resume {shlex.quote(os.path.abspath(run_dir))}"


# --- Many workers (torchrun) and the device ------------------------------------------------------------------------
# `torchrun --nproc-per-node W script.py ...` starts W workers of --num-envs environments each, as the paper ran (4 x 64
# envs); each holds the same networks and steps on the averaged gradient. Without torchrun these helpers do nothing.
def worker():  # (rank, world size) as torchrun sets them, (0, 1) without it; rank 0 prints and writes the run folder
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def cpu_threads():  # the cores this process may use (Linux knows its CPU set; others count all), shared by workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def setup(args):
    """Joins torchrun's workers (NCCL or gloo); sets the GPU's maths, the threads, the seed, the micro-batch size."""
    local_rank, local_size = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    use_cuda = args.cuda and torch.cuda.is_available()
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if worker()[1] > 1:
        dist.init_process_group("nccl" if use_cuda and torch.cuda.device_count() >= local_size else "gloo")
    # A GPU computes in TF32 (fp32's range, a 10-bit mantissa) with the fastest cuDNN algorithm for each shape: not
    # plain fp32, nor bit-repeatable: a resumed GPU run continues the same run, not to the last bit as a CPU run does.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = True, False
    torch.set_num_threads(cpu_threads())
    torch.manual_seed(args.seed + worker()[0])  # the only random generator drawn from (Procgen seeds its own)
    if args.micro_batch_size is None:  # on a CPU 16-64 ran alike, 128 1.22-1.50x slower (docs/results.md)
        args.micro_batch_size = 0 if use_cuda else max(32, 16 * cpu_threads())
    return device


def average_gradients(params):  # once per optimiser step, after micro-batch accumulation: each worker's gets the mean
    grads = [p.grad for p in params if p.grad is not None]
    if dist.is_initialized() and grads:
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat)
        for g, mean in zip(grads, flat.div_(dist.get_world_size()).split([g.numel() for g in grads])):
            g.copy_(mean.view_as(g))


def all_reduce_sum(tensor):  # the sum over workers (statistics, episode counts, stop flags); on one, the tensor
    if dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor


def prepare_networks(learner, args):
    """Rank 0's weights on every worker; --bf16 and --compile for every IMPALA CNN, in place (parameter names kept).
    Static shapes: a graph per batch size and grad mode (dynamic ones fail in torch 2.13); past torch's limit, eager."""
    nets = [m for m in learner.values() if isinstance(m, nn.Module)]
    if dist.is_initialized():
        for tensor in [t for net in nets for t in net.state_dict().values() if isinstance(t, torch.Tensor)]:
            dist.broadcast(tensor, 0)
    for cnn in [m for net in nets for m in net.modules() if isinstance(m, ImpalaCNN)]:
        cnn.bf16 = args.bf16
        if args.compile:
            cnn.compile(dynamic=False)


# --- Evaluation and videos -----------------------------------------------------------------------------------------
def held_out_levels(args):  # (start_level, num_levels): the levels after the training range with --num-levels, else all
    return (args.start_level + args.num_levels, 1_000_000) if args.num_levels else (args.start_level, 0)


@torch.no_grad()
def evaluate(args, agent, episodes, seed, gif=None):
    """The returns and lengths of `episodes` episodes on held-out levels, one environment each (the first to finish
    would favour short ones), envs and generator apart from training's. With `gif`: the first episode as a GIF there."""
    (start_level, num_levels), device, frames = held_out_levels(args), next(agent.parameters()).device, []
    envs = ProcgenVecEnv(args.env_id, episodes, args.distribution_mode, num_levels, start_level, seed)
    generator, obs = torch.Generator(device).manual_seed(seed), envs.obs
    returns, lengths = np.full(episodes, np.nan), np.zeros(episodes, dtype=int)
    while np.isnan(returns).any():
        if gif and np.isnan(returns[0]) and len(frames) < 1000:
            frames.append(obs[0])
        logits = agent.logits(torch.from_numpy(obs).to(device))
        action = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
        obs, _, ended, (episode_returns, episode_lengths) = envs.step(action.cpu().numpy())
        first_end = ended & np.isnan(returns)  # after an end, obs is the next level's first frame
        returns[first_end], lengths[first_end] = episode_returns[first_end], episode_lengths[first_end]
    if gif:
        from PIL import Image  # comes with matplotlib
        images = [Image.fromarray(frame).resize((128, 128), Image.NEAREST) for frame in frames]
        os.makedirs(os.path.dirname(gif), exist_ok=True)
        images[0].save(gif, save_all=True, append_images=images[1:], duration=40, loop=0)
    return returns.tolist(), lengths.tolist()


def evaluate_saved_agent(args, device):
    """--evaluate RUN_DIR: load the saved agent, evaluate it on held-out levels, optionally write a GIF."""
    agent = Agent(NUM_ACTIONS).to(device)
    iteration = load_checkpoint(checkpoint_path(args.evaluate), {"agent": agent}, collections.deque())[0]
    returns, lengths = evaluate(args, agent, args.eval_episodes, seed=args.seed + 10_000)
    stderr = np.std(returns, ddof=1) / math.sqrt(len(returns)) if len(returns) > 1 else float("nan")
    say(f"{args.env_id}, iteration {iteration}: mean return {np.mean(returns):.2f} +- {stderr:.2f} "
        f"(standard error) over {len(returns)} held-out episodes, mean length {np.mean(lengths):.0f}")
    if args.capture_video:
        gif = os.path.join(args.evaluate, "videos", f"evaluate_iter_{iteration:06d}.gif")
        evaluate(args, agent, 1, seed=args.seed + 20_000, gif=gif)
        say(f"video: {gif}")
    return returns


# --- Checkpoints: what a resume puts back ---------------------------------------------------------------------------
def checkpoint_path(run_dir):  # each worker saves its own
    return os.path.join(run_dir, f"checkpoint.rank{worker()[0]}.pt" if worker()[0] else "checkpoint.pt")


def save_checkpoint(run, learner, stale_rollouts, iteration):
    """What load_checkpoint puts back: the learner (the envs' games too), the staleness FIFO, the generators..."""
    state = {name: obj.state_dict() for name, obj in learner.items()}
    cuda = torch.cuda.get_rng_state(run.device) if run.device.type == "cuda" else None
    state.update(script=SCRIPT, iteration=iteration, time_s=time.time() - run.start_time,
                 stale_rollouts=list(stale_rollouts), rng={"torch": torch.get_rng_state(), "cuda": cuda})
    replace_file(run.checkpoint, lambda tmp: torch.save(state, tmp))
    run.last_saved = iteration


def load_checkpoint(path, learner, stale_rollouts):
    """--resume: the saved state put back in place, as nanoGPT's resume does; returns (iteration, seconds so far). A
    checkpoint from before the envs were saved resumes with fresh episodes from the run's first levels."""
    try:  # safe, memory-mapped, onto the CPU from any device: load_state_dict puts each tensor in its place, and
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # Adam's step counts stay there
    except Exception as e:  # missing, truncated, corrupt, or not a checkpoint at all
        error(f"cannot read {path} ({type(e).__name__}): put back a copy, or start a new run")
    device = next(learner["agent"].parameters()).device
    if state.get("script", SCRIPT) != SCRIPT:
        error(f"{path} is a checkpoint of {state['script']}, not of this {SCRIPT}")
    for name in learner.keys() & state.keys():
        learner[name].load_state_dict(state[name])
    torch.set_rng_state(state["rng"]["torch"])
    if device.type == "cuda" and state["rng"].get("cuda") is not None:  # none from a CPU run
        torch.cuda.set_rng_state(state["rng"]["cuda"], device)
    stale_rollouts.extend({k: v.to(device) for k, v in r.items()} for r in state["stale_rollouts"])
    n, total, squares = all_reduce_sum(torch.tensor([1, state["iteration"], state["iteration"] ** 2], device=device))
    if n * squares != total * total:  # every worker saves its own checkpoint: they must be of one iteration
        error(f"the workers' checkpoints in {os.path.dirname(path)} are of different iterations: put back a set")
    return state["iteration"], state["time_s"]


def replace_file(path, write):
    """write(path + ".tmp"), synced to the disk, renamed over path: a crash, kill -9 or power cut leaves the old file or
    the new one whole; a failure (a full disk) leaves no .tmp."""
    try:
        write(path + ".tmp")
        with open(path + ".tmp", "rb+") as f:  # on the disk before the rename: a power cut cannot leave it empty
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + ".tmp")


# --- The run: its folder, progress.csv, signals and the console -----------------------------------------------------
COLUMNS = ["iteration", "global_step", "time_s", "sps", "episodic_return", "episodic_length", "policy_loss",
           "value_loss", "entropy", "approx_kl", "clipfrac", "adv_mean", "adv_std", "imp_samp_capfrac", "eval_return",
           "eval_length", "aux_kl", "aux_value_loss", "aux_true_value_loss", "aux_time_s"]  # aux_*: PPG only


def error(message):  # one line and exit code 2, as argparse's
    print(f"{SCRIPT}: error: {message}", file=sys.stderr, flush=True)
    if dist.is_initialized():  # a torchrun worker leaves at once: torch's C++ teardown at exit can abort (SIGABRT)
        os._exit(2)
    sys.exit(2)


def say(*args):
    if worker()[0] == 0:  # rank 0 speaks for all workers
        print(*args, flush=True)


class Run:
    """The run folder, one writer at a time; a row of progress.csv and a console line per iteration; signals, stops."""
    def __init__(self, args, device, agent, num_iterations, start_iteration, time_s):
        self.args, self.device, self.agent, self.num_iterations = args, device, agent, num_iterations
        (self.rank, self.world_size), self.signal, self.problem, self.launcher = worker(), None, None, os.getppid()
        self.last_saved, self.global_batch_size = start_iteration or None, args.num_envs * args.num_steps * worker()[1]
        # SIGINT (Ctrl-C), SIGTERM, SIGHUP (a closed terminal; not under nohup): finish the iteration, save, exit
        self.handlers = {s: signal.signal(s, self.on_signal) for s in (signal.SIGINT, signal.SIGTERM,
                         getattr(signal, "SIGHUP", None)) if s and signal.getsignal(s) != signal.SIG_IGN}
        name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
        box = [args.resume or os.path.join(args.runs_dir, name)]
        if self.rank == 0 and not args.resume:  # a run started in the same second under the same name fails here
            os.makedirs(box[0])
        if dist.is_initialized():
            dist.broadcast_object_list(box, 0)  # rank 0's folder for every worker
        self.dir, self.checkpoint = box[0], checkpoint_path(box[0])
        self.lock = filelock.FileLock(os.path.join(self.dir, f"run.rank{self.rank}.lock" if self.rank else "run.lock"))
        try:  # held while this process lives, however it ends (the OS lets go): a second writer of the folder, as a
            self.lock.acquire(timeout=0)  # resume while the run or its orphaned workers still train, stops here
        except filelock.Timeout:
            error(f"{self.dir} is in use by another process (the run, or a resume of it, still going): stop it first")
        self.columns = [c for c in COLUMNS if not c.startswith("aux_") or "n_pi" in vars(args)]  # PPG's aux phase
        if self.rank == 0:
            batch_size = args.num_envs * args.num_steps
            write_run_files(self.dir, args, self.columns, start_iteration, batch_size=batch_size,
                            minibatch_size=batch_size // args.num_minibatches, num_iterations=num_iterations,
                            device=str(device), world_size=self.world_size, global_batch_size=self.global_batch_size,
                            script=SCRIPT)
        say(f"{args.exp_name} on {args.env_id} ({args.distribution_mode}), {device}: {args.num_envs} envs x "
            f"{args.num_steps} steps x {self.world_size} worker(s), {num_iterations} iterations = "
            f"{num_iterations * self.global_batch_size:,} steps; run folder {self.dir}")
        self.start_time, self.last_time, self.watch_time = time.time() - time_s, time.time(), 0.0
        self.began, self.start_iteration = self.last_time, start_iteration  # the ETA goes at this process's pace

    def on_signal(self, signum, frame):
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        say(f"\n{self.signal}: finishing this iteration, then stopping (send it again to stop at once)")

    def due(self, iteration, every):  # every `every` iterations, and at the end
        return iteration % every == 0 or iteration == self.num_iterations

    def evaluate(self, iteration, video=False):  # rank 0: held-out levels for eval_return and _length, or a GIF
        start, args = time.time(), self.args
        if self.rank != 0:
            return {}
        gif = os.path.join(self.dir, "videos", f"iter_{iteration:06d}.gif") if video else None
        returns, lengths = evaluate(args, self.agent, 1 if video else args.eval_episodes, args.seed + iteration, gif)
        self.watch_time += time.time() - start  # left out of the iteration's speed
        return {} if video else {"eval_return": np.mean(returns), "eval_length": np.mean(lengths)}

    def log(self, iteration, stats, rollout_log):
        """Every worker's finished episodes in one row of progress.csv (rank 0) and one console line."""
        now, returns, lengths = time.time(), rollout_log["episode_returns"], rollout_log["episode_lengths"]
        episodes, return_sum, length_sum = all_reduce_sum(torch.tensor(
            [len(returns), sum(returns), sum(lengths)], dtype=torch.float64, device=self.device)).tolist()
        busy = now - self.last_time - self.watch_time  # this iteration's time, evaluation and videos left out
        self.row = dict(stats, iteration=iteration, global_step=iteration * self.global_batch_size,
                        time_s=round(now - self.start_time, 3), sps=round(self.global_batch_size / busy, 1),
                        episodic_return=return_sum / episodes if episodes else "",
                        episodic_length=length_sum / episodes if episodes else "")
        if self.rank == 0:
            with open(os.path.join(self.dir, "progress.csv"), "a", newline="") as f:
                csv.DictWriter(f, self.columns).writerow(self.row)
        eta = int((now - self.began) / (iteration - self.start_iteration) * (self.num_iterations - iteration))
        ret = f"{self.row['episodic_return']:8.2f} ({episodes:.0f} eps)" if episodes else "       - (0 eps)"
        say(f"iter {iteration}/{self.num_iterations} | step {self.row['global_step']:,} | return {ret} | "
            f"sps {self.row['sps']:.0f} | eta {eta // 3600}h{eta % 3600 // 60:02d}m")
        self.last_time, self.watch_time = now, 0.0

    def check(self, iteration):
        """(broken, stopping), one answer and reason on all workers: non-finite stops before saving, a signal after."""
        bad = [k for k, v in self.row.items() if isinstance(v, float) and not math.isfinite(v)] or [
            f"parameter {n}" for n, p in self.agent.named_parameters() if not torch.isfinite(p).all()]
        orphaned = self.world_size > 1 and os.getppid() != self.launcher  # kill -9 of the torchrun launcher
        broken, signalled, orphaned = all_reduce_sum(torch.tensor([bool(bad), self.signal is not None, orphaned],
                                                                  dtype=torch.float64, device=self.device)).tolist()
        if broken:
            self.problem = f"iteration {iteration}: non-finite {bad[0] if bad else 'values on another worker'}"
        self.signal = self.signal or ("no launcher" if orphaned else "SIGTERM" if signalled else None)  # whoever saw it
        return bool(broken), self.signal is not None

    def finish(self):
        """Close everything; a non-finite stop or a signal exits with its message, a finished run returns its folder."""
        for s, handler in self.handlers.items():
            signal.signal(s, handler)
        self.lock.release()  # for a caller that goes on (a test, a notebook): a process that ends lets go anyway
        if dist.is_initialized():
            dist.destroy_process_group()
        kept = f"checkpoint of iteration {self.last_saved}" if self.last_saved is not None else "no checkpoint"
        if self.problem:
            sys.exit(f"{SCRIPT}: {self.problem}; stopped, {kept} in {self.dir}")
        if self.signal:
            say(f"Stopped ({self.signal}), {kept}" + (f": resume with {resume_command(self.dir, self.world_size)}"
                                                      if self.last_saved is not None else " (--no-save-model)."))
            sys.exit(128 + getattr(signal, self.signal, signal.SIGTERM))
        return self.dir


def write_run_files(run_dir, args, columns, start_iteration, **derived):
    """config.json: every hyperparameter after Section 4's adjustments, what the run is made of, package versions;
    progress.csv anew, written whole: its header and, on resume, its rows up to the checkpoint's iteration."""
    cpu = next((line.split(":")[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               "") if os.path.exists("/proc/cpuinfo") else platform.processor()  # a run's speed depends on it
    versions = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
                "procgen": f"{procgen.__name__} {getattr(procgen, '__version__', 'unknown').strip()}", "cpu": cpu}
    config = json.dumps({**vars(args), **derived, "versions": versions}, indent=2)
    replace_file(os.path.join(run_dir, "config.json"), lambda tmp: open(tmp, "w").write(config))
    path, rows = os.path.join(run_dir, "progress.csv"), []
    with contextlib.suppress(FileNotFoundError), open(path, newline="") as f:  # a new run has none
        rows = [row for row in csv.DictReader(f) if int(row["iteration"]) <= start_iteration]
    replace_file(path, lambda tmp: csv.DictWriter(open(tmp, "w", newline=""), columns).writerows(
        [dict(zip(columns, columns)), *rows]))  # the header, then the rows


if __name__ == "__main__":
    main()
