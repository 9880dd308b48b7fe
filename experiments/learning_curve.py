"""It learns: mean episodic return against env steps, one curve per script, and a Markdown table of the
return per window of env steps and of each run's wall time and speed.

    python experiments/learning_curve.py                  # the 1M-step runs of ppo.py and ppo_ewma.py in docs/runs
    python experiments/learning_curve.py runs/starpilot__ppo*__1__* -o curves.png --smooth-steps 50000

Without RUN_DIRs it takes the runs under docs/runs that a script made on its own (exp_name is the script's
name, not a figure runner's) with --total-timesteps env steps, 1M by default: the runs of
    python ppo.py --env-id starpilot --seed 1 --total-timesteps 1000000 --save-model    (and ppo_ewma.py)
With RUN_DIRs (run folders, or folders holding them) it takes every run there.

The curves are smoothed over --smooth-steps env steps, a window in env steps rather than iterations, so
that runs with different batch sizes are smoothed alike; runs of the same script are averaged (band: +-1
std). The first table has the mean return of the iterations whose global_step falls in each window of
--window env steps; the second has each run's env steps, wall time (its last time_s) and speed (env steps
/ wall time, and the median of its per-iteration sps). One seed of one game shows that a script learns,
not which one learns better.
"""
import argparse
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

RUNS = os.path.join(sweep.ROOT, "docs", "runs")
OUT = os.path.join(sweep.ROOT, "docs", "figures", "learning_1m.png")


def script_name(run):
    return run["config"].get("script", "?.py")[:-3]


def by_script(run):  # table columns and curves in order of script, then seed
    return script_name(run), str(run["config"].get("seed"))


def default_runs(folder, total_timesteps):
    """The runs under `folder` that a script made on its own (its default exp_name) with total_timesteps steps."""
    runs = [run for run in analysis.load_runs(folder) if run["config"].get("total_timesteps") == total_timesteps
            and run["config"].get("exp_name") == script_name(run)]
    return sorted(analysis.dedupe(runs), key=by_script)


def run_labels(runs):
    """`script seed N` per run; the folder name where two runs would share that label."""
    labels = [f"{script_name(r)} seed {r['config'].get('seed')}" for r in runs]
    return [os.path.basename(r["dir"]) if labels.count(label) > 1 else label for r, label in zip(runs, labels)]


def tables(runs, width):
    """The two Markdown tables: return per window of env steps (a column per run), then wall time and speed."""
    labels, cell = run_labels(runs), analysis.cell
    returns = analysis.window_table(runs, labels, width)
    speeds = []
    for label, run in zip(labels, runs):
        d = analysis.run_diagnostics(run)
        speeds.append([label, f"{d['global_step']:,.0f}", sweep.format_wall_time(d["time_s"]),
                       cell(d["sps_mean"], "{:.0f}"), cell(d["sps_median"], "{:.0f}")])
    speed = analysis.markdown_table(["run", "env steps", "wall time", "env steps/s (steps / wall time)",
                                     "env steps/s (median of sps)"], speeds)
    return f"Mean episodic return per {width:,} env steps\n\n{returns}\n\nWall time and speed\n\n{speed}"


def count_text(n, thing):
    return f"{'one' if n == 1 else n} {thing}{'s' if n != 1 else ''}"


def draw(runs, out, smooth_steps):
    """One curve per script (mean over its runs), return against env steps; the title says how many games and
    seeds it rests on."""
    configs = [r["config"] for r in runs]
    games, seeds = sorted({c.get("env_id") for c in configs}), sorted({c.get("seed") for c in configs}, key=str)
    context = types.SimpleNamespace(envs=games, seeds=seeds, distribution_mode="/".join(
        sorted({str(c.get("distribution_mode")) for c in configs})))
    steps = max(r["rows"][-1]["global_step"] for r in runs if r["rows"])
    fig, (ax,) = figures.subplots(1, f"It learns: {count_text(len(games), 'game')}, {count_text(len(seeds), 'seed')}, "
                                     f"{steps:,.0f} env steps", context)
    for script in dict.fromkeys(map(script_name, runs)):
        members = [r for r in runs if script_name(r) == script]
        stats = analysis.mean_curve([analysis.curve(r, smooth_steps=smooth_steps) for r in members])
        figures.plot_band(ax, stats, script + (f" (mean of {len(members)} runs)" if len(members) > 1 else ""))
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"episodic return, smoothed over {smooth_steps:,} env steps")
    figures.save_figure(fig, out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", metavar="RUN_DIR", help="run folders, or folders holding them (default: the "
                                                                "scripts' own runs in docs/runs, see below)")
    p.add_argument("-o", "--out", default=OUT, help="output image (PNG); default docs/figures/learning_1m.png")
    p.add_argument("--smooth-steps", type=int, default=100_000, help="moving average over this many env steps")
    p.add_argument("--window", type=int, default=100_000, help="the table's windows, in env steps")
    p.add_argument("--total-timesteps", type=int, default=1_000_000,
                   help="without RUN_DIRs: the length of the runs to take from docs/runs")
    args = p.parse_args(argv)
    missing = [path for path in args.paths if not os.path.isdir(path)]
    if missing:
        p.error(f"not a folder: {', '.join(missing)}")
    if args.paths:
        runs = sorted(analysis.load_runs(args.paths), key=by_script)
    else:
        runs = default_runs(RUNS, args.total_timesteps)
    runs = [run for run in runs if run["rows"]]
    if not runs:
        p.error("no runs with progress found under " + (", ".join(args.paths) if args.paths else
                f"{RUNS} made by a script on its own with --total-timesteps {args.total_timesteps}"))
    draw(runs, args.out, args.smooth_steps)
    print(tables(runs, args.window))
    print(f"\nfigure {args.out}")
    return args.out


if __name__ == "__main__":
    main()
