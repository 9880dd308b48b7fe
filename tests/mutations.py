"""Slips of the hand the suite must catch: each mutation changes one line, the same way in every file that has it (the
four scripts, experiments/analysis.py), in a scratch copy of the repository, and runs the test files named beside it
there. A mutation that no test fails on is a hole in the suite. Not collected by pytest (its name does not start with
test_); run by hand:

    python tests/mutations.py              # every mutation, a line each: caught (by which test) or MISSED
    python tests/mutations.py adv-no-mean  # one, by name

The results of the last run are in tests/README.md.
"""
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile

from conftest import ROOT, SCRIPTS as NAMES

# the four scripts, and the analysis behind the figures' tables (its slips fail on the numbers in docs/results.md)
FILES = tuple(f"{name}.py" for name in NAMES) + ("experiments/analysis.py",)

LOSS_FLAGS = "args.clip_coef, args.kl_penalty, args.imp_samp_max)"  # what micro_batch_loss passes policy_loss

# (name, the line as it is, the line mutated, the test files that should catch it)
MUTATIONS = [
    ("ewma-no-bias-correction", "prox.lerp_(theta, float(1 / w_new))", "prox.lerp_(theta, 1 - self.beta_prox)",
     ["test_ewma.py"]),
    ("clip-lower-bound", "math.log(1 - clip_coef), math.log(1 + clip_coef))", "-math.inf, math.log(1 + clip_coef))",
     ["test_objectives.py"]),
    ("gae-off-by-one", "next_v = values[t + 1] if t + 1 < num_steps else next_value",
     "next_v = values[t] if t + 1 < num_steps else next_value", ["test_gae.py"]),
    ("lr-over-c", "args.learning_rate /= math.sqrt(c)", "args.learning_rate /= c", ["test_knobs.py"]),
    ("adv-no-mean", "advantages = (advantages - adv_mean) / (adv_std + 1e-8)",
     "advantages = advantages / (adv_std + 1e-8)", ["test_knobs.py"]),
    ("adv-moments-forget", "self.weight = self.decay * self.weight + count", "self.weight = count",
     ["test_knobs.py"]),
    ("entropy-sign", "loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss",
     "loss = pg_loss + args.ent_coef * entropy + args.vf_coef * v_loss", ["test_objectives.py"]),
    ("entropy-sign-ppg", "loss = loss + pg_loss - args.ent_coef * entropy",
     "loss = loss + pg_loss + args.ent_coef * entropy", ["test_objectives.py"]),
    ("ent-coef-ignored", "loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss",
     "loss = pg_loss - 0.01 * entropy + args.vf_coef * v_loss", ["test_objectives.py"]),
    ("vf-coef-ignored", "loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss",
     "loss = pg_loss - args.ent_coef * entropy + v_loss", ["test_objectives.py"]),
    ("vf-coef-ignored-ppg", "loss = loss + args.vf_coef * v_loss", "loss = loss + 0.5 * v_loss",
     ["test_objectives.py"]),
    ("value-loss-half", "    return loss.mean()", "    return 0.5 * loss.mean()", ["test_objectives.py"]),
    ("clip-vloss-min", "loss = torch.maximum(loss, (clipped - returns).pow(2))",
     "loss = torch.minimum(loss, (clipped - returns).pow(2))", ["test_objectives.py"]),
    ("max-grad-norm-ignored", "nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)",
     "nn.utils.clip_grad_norm_(agent.parameters(), 1e9)", ["test_objectives.py"]),
    ("aux-kl-reversed", "kl = (logp_old.exp() * (logp_old - logp)).sum(-1).mean()",
     "kl = (logp.exp() * (logp - logp_old)).sum(-1).mean()", ["test_ppg.py"]),
    ("aux-beta-clone-ignored", "loss = aux_value_loss + args.beta_clone * kl + true_value_loss",
     "loss = aux_value_loss + kl + true_value_loss", ["test_ppg.py"]),
    ("aux-no-true-value-loss", "loss = aux_value_loss + args.beta_clone * kl + true_value_loss",
     "loss = aux_value_loss + args.beta_clone * kl", ["test_ppg.py"]),
    ("aux-no-aux-value-loss", "loss = aux_value_loss + args.beta_clone * kl + true_value_loss",
     "loss = args.beta_clone * kl + true_value_loss", ["test_ppg.py"]),
    ("value-epochs-train-policy", "train_pi = epoch < args.e_pi", "train_pi = epoch < args.e_v", ["test_ppg.py"]),
    ("ewma-on-value-steps", "            if train_pi:  # theta_prox <- EWMA(theta), after every policy step",
     "            if True:  # theta_prox <- EWMA(theta), after every policy step", ["test_ppg.py"]),
    ("norm-reward-gamma-ignored", "RewardNormalizer(args.num_envs, args.norm_reward_gamma)",
     "RewardNormalizer(args.num_envs)", ["test_reward_norm.py"]),
    ("adam-eps-ignored", "betas=args.adam_betas,\n                                 eps=args.adam_eps)",
     "betas=args.adam_betas)", ["test_reward_norm.py"]),
    ("init-ignored", "        pytorch_init(agent)  #", "        None  #",
     ["test_reward_norm.py"]),
    ("init-no-reset", "        layer.reset_parameters()\n", "", ["test_reward_norm.py"]),
    ("init-gains-swapped", "0.01 if layer.weight.shape[0] == NUM_ACTIONS else 1.0",
     "1.0 if layer.weight.shape[0] == NUM_ACTIONS else 0.01", ["test_reward_norm.py"]),
    ("obs-after-step", "        rollout[\"obs\"][t] = next_obs\n        rollout[\"firsts\"][t] = next_first\n",
     "", ["test_learning.py"],
     "        next_first = torch.from_numpy(first).to(device)\n",
     "        next_first = torch.from_numpy(first).to(device)\n"
     # the frame after the action
     "        rollout[\"obs\"][t] = next_obs\n        rollout[\"firsts\"][t] = next_first\n"),
    ("advantage-sign", "pg_losses = -advantages * torch.exp(logp - logp_",
     "pg_losses = advantages * torch.exp(logp - logp_", ["test_learning.py"]),
    ("firsts-after-step", "        rollout[\"firsts\"][t] = next_first\n", "", ["test_gae.py"],
     "        next_first = torch.from_numpy(first).to(device)\n",
     # the flag of the frame after the action
     "        next_first = torch.from_numpy(first).to(device)\n        rollout[\"firsts\"][t] = next_first\n"),
    ("gamma-is-the-normalisers", "rollout[\"next_first\"], args.gamma,",
     "rollout[\"next_first\"], args.norm_reward_gamma,", ["test_gae.py"]),
    ("gae-lambda-ignored", "args.gae_lambda)", "0.95)", ["test_gae.py"]),
    ("old-policy-recent-ignored", "logp, batch[\"logp_old\"][idx], batch[\"advantages\"][idx],",
     "logp, batch[\"logp_behav\"][idx], batch[\"advantages\"][idx],", ["test_knobs.py"]),
    ("prox-recent-ignored", "else batch[\"logp_recent\"][idx])", "else batch[\"logp_behav\"][idx])", ["test_knobs.py"]),
    ("clip-coef-ignored", LOSS_FLAGS, "0.2, args.kl_penalty, args.imp_samp_max)", ["test_knobs.py"]),
    ("kl-penalty-ignored", LOSS_FLAGS, "args.clip_coef, 0.0, args.imp_samp_max)", ["test_knobs.py"]),
    ("imp-samp-max-ignored", LOSS_FLAGS, "args.clip_coef, args.kl_penalty, 0)", ["test_knobs.py"]),
    ("clip-vloss-ignored", "args.clip_coef if args.clip_vloss else 0)", "args.clip_coef)", ["test_objectives.py"]),
    ("adam-betas-ignored", "lr=args.learning_rate, betas=args.adam_betas,", "lr=args.learning_rate,",
     ["test_reward_norm.py"]),
    ("aux-lr-is-the-policys", "lr=args.aux_learning_rate,", "lr=args.learning_rate,", ["test_reward_norm.py"]),
    ("aux-adam-without-the-value-network", "aux_optimizer = torch.optim.Adam(agent.parameters(),",
     "aux_optimizer = torch.optim.Adam(agent.policy.parameters(),", ["test_ppg.py"]),
    ("adv-ewma-decay-ignored", "AdvantageMoments(args.adv_ewma_decay).to(device)", "AdvantageMoments(0.0).to(device)",
     ["test_reward_norm.py"]),
    ("zero-grad-per-micro-batch", "            optimizer.zero_grad(set_to_none=True)\n"
     "            # gradient accumulation: the same gradient as one pass over mb\n"
     "            for idx in mb.split(micro):\n",
     "            for idx in mb.split(micro):\n                optimizer.zero_grad(set_to_none=True)\n",
     ["test_speed.py"]),
    ("aux-zero-grad-per-micro-batch", "            aux_optimizer.zero_grad(set_to_none=True)\n"
     "            for idx in torch.arange(len(mb_obs), device=device).split(micro):\n",
     "            for idx in torch.arange(len(mb_obs), device=device).split(micro):\n"
     "                aux_optimizer.zero_grad(set_to_none=True)\n", ["test_ppg.py"]),
    ("zero-grads-not-none", "            optimizer.zero_grad(set_to_none=True)\n",
     "            optimizer.zero_grad(set_to_none=False)\n", ["test_ppg.py"]),
    ("sign-test-one-sided", "range(max(positive, signed - positive), signed + 1)", "range(positive, signed + 1)",
     ["test_experiments.py"]),
    ("sign-test-uncapped", "\"sign_p\": min(1.0, 2 * tail)", "\"sign_p\": 2 * tail", ["test_experiments.py"]),
    ("sign-test-zeros-positive", "positive = int((d > 0).sum())", "positive = int((d >= 0).sum())",
     ["test_experiments.py"]),
    ("checkpoint-set-not-waited", "        ready()\n", "", ["test_checkpoint.py"]),
    ("signal-handlers-kept", "    while HANDLERS:\n        signal.signal(*HANDLERS.popitem())\n",
     "    for item in HANDLERS.items():\n        signal.signal(*item)\n", ["test_run_folder.py"]),
]


def mutate(root, mutation):
    """Apply one mutation to every file of FILES in `root` that has its line; the files it changed."""
    name, old, new, _, *more = mutation
    changed = []
    for file in FILES:
        path = os.path.join(root, file)
        text = open(path).read()
        if old in text:
            text = text.replace(old, new)
            if more:  # a second edit that goes with the first (a line moved)
                text = text.replace(more[0], more[1])
            open(path, "w").write(text)
            changed.append(file)
    return changed


def run(mutation, scratch):
    name, _, _, tests, *_ = mutation
    root = os.path.join(scratch, name)
    left_out = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pt")  # and runs/, not data/runs
    shutil.copytree(ROOT, root, ignore=lambda d, names: left_out(d, names) | ({"runs"} if d == ROOT else set()))
    changed = mutate(root, mutation)
    if not changed:
        return f"{name}: NOT APPLIED (the line is in no file)"
    try:  # a slip that breaks the file's syntax would fail every test: no hole found, none closed
        for file in changed:
            py_compile.compile(os.path.join(root, file), doraise=True)
    except py_compile.PyCompileError as e:
        return f"{name}: BROKEN (not Python: {e.msg.strip().splitlines()[-1]})"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                           *[os.path.join("tests", t) for t in tests]], cwd=root, capture_output=True, text=True)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M) or [f"pytest's exit {proc.returncode}"]
    where = ", ".join(os.path.basename(file)[:-3] for file in changed)
    return f"{name} ({where}): " + (f"caught by {failed[0]}" if proc.returncode else "MISSED")


def main(names):
    chosen = [m for m in MUTATIONS if not names or m[0] in names]
    with tempfile.TemporaryDirectory() as scratch:
        for mutation in chosen:
            print(run(mutation, scratch), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
