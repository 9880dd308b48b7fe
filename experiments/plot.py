"""Plot training curves: episodic return against env steps and against wall-clock time.

    python experiments/plot.py data/runs/starpilot__ppo_ewma__*__17956* -o ppo_ewma.png   # the README's 1M-step runs
    python experiments/plot.py runs/fig4_quick -o fig4_curves.png --normalize --smooth 10   # after fig4's --quick

Each argument is a run folder (config.json + progress.csv) or any folder containing run folders.
Runs that share an exp_name, env_id and distribution mode are one curve: the mean over seeds, with a
shaded spread (standard deviation by default, or min-max); of two runs of one seed, the one that got
further (then the newer) is drawn and the other named on stderr. Where progress.csv has an
`eval_return` column with values, it is drawn too, dashed, in the same colour (train vs test: the
generalisation gap).
"""
import argparse
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402

PANELS = (("global_step", "env steps"), ("time_s", "wall-clock time (s)"))


def draw_group(ax, runs, x, y, colour, label, smooth_k, normalize, spread, linestyle="-"):
    """One mean-over-seeds curve with its spread; returns whether anything was drawn."""
    stats = analysis.mean_curve([analysis.curve(run, x, y, smooth_k, normalize) for run in runs])
    if stats is None:
        return False
    low, high = ((stats["min"], stats["max"]) if spread == "minmax"
                 else (stats["mean"] - stats["std"], stats["mean"] + stats["std"]))
    ax.plot(stats["x"], stats["mean"], color=colour, linestyle=linestyle, label=label)
    if stats["n"] > 1:
        ax.fill_between(stats["x"], low, high, color=colour, alpha=0.2 if linestyle == "-" else 0.1, linewidth=0)
    return True


def plot_runs(runs, out, normalize=False, smooth_k=1, spread="std", title=None):
    """Two panels (return vs env steps, vs time); one curve per (exp_name, env_id, mode); writes `out`.

    Returns the labels of the curves drawn (eval curves end in ': eval')."""
    groups = analysis.group_runs(runs)
    if normalize:
        dropped = [key for key, members in groups.items() if not all(analysis.can_normalize(r) for r in members)]
        for key in dropped:
            print(f"plot.py: no normalisation constants for {key[1]} ({key[2]}); left out", file=sys.stderr)
            del groups[key]
    several_envs = len({key[1:] for key in groups}) > 1
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    drawn = []
    for i, ((exp_name, env_id, mode), members) in enumerate(groups.items()):
        colour = colours[i % len(colours)]
        label = f"{exp_name} ({env_id}, {mode})" if several_envs else exp_name
        label += f", {len(members)} seed{'s' if len(members) > 1 else ''}"
        for ax, (x, _) in zip(axes, PANELS):
            shown = label if ax is axes[0] else f"_{label}"  # one legend, on the first panel ("_": left out)
            drew = draw_group(ax, members, x, "episodic_return", colour, shown, smooth_k, normalize, spread)
            if drew and ax is axes[0]:
                drawn.append(label)
            if any("eval_return" in r["columns"] for r in members):
                if draw_group(ax, members, x, "eval_return", colour, f"{shown}: eval", smooth_k, normalize, spread,
                              "--") and ax is axes[0]:
                    drawn.append(f"{label}: eval")
    ylabel = "normalised return" if normalize else "episodic return"
    for ax, (_, xlabel) in zip(axes, PANELS):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel + (f" (smoothed over {smooth_k} iterations)" if smooth_k > 1 else ""))
    shaded = "min-max" if spread == "minmax" else "+- 1 std"
    several = any(len(members) > 1 for members in groups.values())
    # one game: its name in the title (several: in each curve's label)
    game = "" if several_envs or not groups else "{1} ({2}): ".format(*next(iter(groups)))
    fig.suptitle(title or game + (f"mean over seeds, shaded: {shaded}" if several else "one seed per curve"))
    figures.save_figure(fig, out)
    return drawn


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="RUN_DIR", help="run folders, or folders containing run folders")
    p.add_argument("-o", "--out", type=figures.image_file, default="returns.png",
                   help="output image (.png, .pdf, .svg, ...; default: returns.png)")
    p.add_argument("--normalize", action="store_true", help="Procgen normalised return (Cobbe et al. 2019 constants)")
    p.add_argument("--smooth", type=int, default=1, help="moving average over this many iterations")
    p.add_argument("--spread", choices=("std", "minmax"), default="std", help="shaded spread across seeds")
    args = p.parse_args(argv)
    if args.smooth < 1:
        p.error(f"argument --smooth: must be at least 1, got {args.smooth}")
    missing = [path for path in args.paths if not os.path.isdir(path)]
    if missing:
        p.error(f"not a folder: {', '.join(missing)}")
    runs = [analysis.without_resumed(run) for run in analysis.load_runs(args.paths)]  # as every figure
    if not runs:
        p.error("no run folders (config.json + progress.csv) found under " + ", ".join(args.paths))
    if all(math.isnan(analysis.column_mean(run["rows"], "episodic_return")) for run in runs):
        p.error("no episode has ended yet in " + ", ".join(run["dir"] for run in runs))
    kept = analysis.dedupe(runs)
    for run in runs:
        if all(run["dir"] != k["dir"] for k in kept):
            print(f"plot.py: left out {run['dir']}: one run per seed in a curve, the furthest (then the newest); "
                  "runs of other settings need an --exp-name of their own",
                  file=sys.stderr)
        elif math.isnan(analysis.column_mean(run["rows"], "episodic_return")):
            print(f"plot.py: left out {run['dir']}: no episode has ended yet", file=sys.stderr)
    plot_runs(kept, args.out, args.normalize, args.smooth, args.spread)
    print(f"{len(kept)} run{'s' if len(kept) > 1 else ''} -> {args.out}")
    return args.out


if __name__ == "__main__":
    main()
