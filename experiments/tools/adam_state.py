"""How much of each network's Adam step its eps takes away, read from a run's checkpoint.

    python experiments/tools/adam_state.py RUN_DIR [RUN_DIR ...]   # run folders of yours, with their checkpoint.pt

Adam moves a weight by lr * m_hat / (sqrt(v_hat) + eps), where sqrt(v_hat) is the running RMS of that weight's
gradient. Where the gradients are much smaller than eps, eps, not the gradient's scale, sets the step: the weight
moves by about lr * m_hat / eps, a smaller step than Adam's lr. For each optimizer in the checkpoint (ppg.py has
two: the policy phase's and the aux phase's) and each part of the networks (a trunk, a head), the table gives the
median of sqrt(v_hat) over its weights, the share of weights with sqrt(v_hat) < eps, and the mean over its weights
of sqrt(v_hat) / (sqrt(v_hat) + eps): the share of the eps-free step that is left, at the run's eps and at 1e-8.
ppg.py's policy network gets no value gradient, so its gradients are much smaller than ppo.py's trunk's.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/
from sweep import CHECKPOINT  # noqa: E402


def part_of(name):
    """A parameter's part of the networks: the trunk holding it ("policy.trunk", "value.0", "trunk"), else its
    layer ("policy.pi_head", "value.1", "v_head")."""
    for layer in (".stages.", ".dense."):
        if layer in name:
            return name.split(layer)[0]
    return name.rsplit(".", 1)[0]


def step_kept(rms, eps):
    """The share of Adam's eps-free step lr * m_hat / sqrt(v_hat) left with eps: sqrt(v_hat) / (sqrt(v_hat) + eps)."""
    return rms / (rms + eps)


def adam_parts(names, optimizer_state):
    """{part: tensor of sqrt(v_hat) over its weights} of a torch.optim.Adam state_dict whose parameters are `names`,
    in order (a parameter that never had a gradient has no state and is left out)."""
    beta2, parts = optimizer_state["param_groups"][0]["betas"][1], {}
    for index, state in optimizer_state["state"].items():
        v_hat = state["exp_avg_sq"] / (1 - beta2 ** float(state["step"]))  # Adam's bias correction
        parts.setdefault(part_of(names[index]), []).append(v_hat.sqrt().flatten())
    return {part: torch.cat(rms) for part, rms in parts.items()}


def table(run_dir, checkpoint, compare_eps=1e-8):
    names = [k for k, v in checkpoint["agent"].items() if v.is_floating_point()]  # the agent's parameters, in order
    lines = []
    for key in (k for k in ("optimizer", "aux_optimizer") if k in checkpoint):
        eps = checkpoint[key]["param_groups"][0]["eps"]
        steps = int(max(float(s["step"]) for s in checkpoint[key]["state"].values()))
        lines += [f"\n{os.path.basename(os.path.normpath(run_dir))}, {key} (eps {eps:g}, {steps:,} steps)\n",
                  f"| part | weights | median sqrt(v_hat) | share < eps | step kept at eps {eps:g} "
                  f"| step kept at eps {compare_eps:g} |", "|---|---|---|---|---|---|"]
        for part, rms in adam_parts(names, checkpoint[key]).items():
            lines.append(f"| {part} | {rms.numel():,} | {rms.median():.1e} | {(rms < eps).float().mean():.2f} "
                         f"| {step_kept(rms, eps).mean():.2f} | {step_kept(rms, compare_eps).mean():.2f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help=f"run folders with a {CHECKPOINT}")
    args = p.parse_args(argv)
    missing = [d for d in args.run_dirs if not os.path.isfile(os.path.join(d, CHECKPOINT))]
    if missing:  # data/runs keeps no checkpoints
        p.error(f"no {CHECKPOINT} in {missing[0]}")
    for run_dir in args.run_dirs:
        checkpoint = torch.load(os.path.join(run_dir, CHECKPOINT), map_location="cpu", weights_only=False)
        print(table(run_dir, checkpoint))


if __name__ == "__main__":
    main()
