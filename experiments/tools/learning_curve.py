"""It learns: mean episodic return against env steps, one curve per script, and a Markdown table of the
return per window of env steps and of each run's wall time and speed.

    python experiments/tools/learning_curve.py          # the README's figure: the four scripts, from data/runs
    python experiments/tools/learning_curve.py --train  # train what data/runs lacks (PPO 1.3-1.8 h, PPG 4.6-6.3 h)
    python experiments/tools/learning_curve.py data/runs/starpilot__ppo_ewma__*__17959* --smooth-steps 5325  # 53k steps

Without RUN_DIRs it takes the README's runs from data/runs (sweep.readme_runs): the four scripts at the defaults,
StarPilot (easy), seeds 1 and 2 (ppg.py and ppg_ewma.py: seed 1), --total-timesteps env steps (1M by default; PPG
rounds up to whole phases: 1,048,576), with the flags where the official code and CleanRL differ named on the
command line (sweep.DEFAULTS: a run made at other values is not taken) and the --exp-name of the committed runs
(sweep.README_EXP_NAMES: ppo.py's the ablation's, experiments/tools/cleanrl_ablation.py with all four groups;
ppg.py's ppg_init_normed); --train makes the missing ones so. Beside them it sets CleanRL's return per window
beside them: its PPO (two runs on a GPU, analysis.CLEANRL_STARPILOT_1M, and its own script run on this CPU,
data/cleanrl/) and its PPG (ppg_procgen.py's runs in data/cleanrl/ppg/). --train trains the runs that data/runs
lacks, one at a time (a cut run resumes from its checkpoint), and commits each there.
With RUN_DIRs (run folders, or folders holding them) it takes every run there, of one game and mode (a curve
averages a script's runs), and no CleanRL reference but those given with --reference (a CSV with a row per
episode, global_step and episodic_return, as in data/cleanrl/).

In the runs of analysis.RESUMED, resumed from checkpoints that did not hold the games' state, the first iteration
after the resume played fresh levels (shorter episodes, lower returns): it is left out of the curves and tables.
The curves are smoothed over --smooth-steps env steps, a window in env steps rather than iterations, so that runs
with different batch sizes are smoothed alike; runs of the same script are averaged (band: +-1 std). The first
table has the mean return of the iterations whose global_step falls in each window of --window env steps; the
second has each run's env steps, wall time (its last time_s) and speed (env steps / wall time, and the median of
its per-iteration sps); a third, for PPG runs, has each aux phase's mean losses and its time (progress.csv's aux_
columns). One or two seeds of one game show that a script learns, not which one learns better.
"""
import argparse
import math
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

OUT = os.path.join(sweep.ROOT, "docs", "figures", "learning_1m.png")
CLEANRL_PPG = os.path.join(sweep.CLEANRL_RUNS, "ppg")  # ppg_procgen.py's: ppg_procgen_seed<N>_<gpu|cpu>_episodes.csv


def script_name(run):  # a GPU or bf16 run is its own curve and column: the same algorithm, other numerics and speed;
    config = run["config"]  # so is a run of other weights: PPO's from the official code's; PPG's always say theirs,
    gpu, init = str(config.get("device", "")).startswith("cuda"), config.get("init")  # as PPG's runs have either
    return config.get("script", "?.py")[:-3] + (" (GPU)" if gpu else "") + (" (bf16)" if config.get("bf16") else "") \
        + (f" (init {init})" if init == "normed" or init and config.get("script", "").startswith("ppg") else "")


def by_script(run):  # table columns and curves in order of script, then seed
    return script_name(run), str(run["config"].get("seed"))


def default_runs(folder, total_timesteps):
    """The README's runs (readme_runs) finished under `folder`."""
    return sorted(sweep.select_runs(sweep.readme_runs(total_timesteps), folder), key=by_script)


def run_labels(runs):
    """`script seed N` per run; the folder name where two runs would share that label."""
    labels = [f"{script_name(r)} seed {r['config'].get('seed')}" for r in runs]
    return [os.path.basename(r["dir"]) if labels.count(label) > 1 else label for r, label in zip(runs, labels)]


def tables(runs, width, references=None):
    """The two Markdown tables: return per window of env steps (a column per run, then per reference), then wall
    time and speed."""
    labels, cell = run_labels(runs), analysis.cell
    returns = analysis.window_table(runs, labels, width, references)
    speeds = []
    for label, run in zip(labels, runs):
        d = analysis.run_diagnostics(run)
        speeds.append([label, f"{d['global_step']:,.0f}", sweep.format_wall_time(d["time_s"]),
                       cell(d["sps_mean"], "{:.0f}"), cell(d["sps_median"], "{:.0f}")])
    speed = analysis.markdown_table(["run", "env steps", "wall time", "env steps/s (steps / wall time)",
                                     "env steps/s (median of sps)"], speeds)
    aux = [[label, f"{row['iteration']:.0f}", cell(row["aux_kl"], "{:.5f}"), cell(row["aux_value_loss"], "{:.3f}"),
            cell(row["aux_true_value_loss"], "{:.3f}"), sweep.format_wall_time(row["aux_time_s"])]
           for label, run in zip(labels, runs) for row in run["rows"] if math.isfinite(row.get("aux_kl", math.nan))]
    aux = analysis.markdown_table(["run", "aux phase after iteration", "KL to pi_old", "aux value loss",
                                   "true value loss", "time"], aux) if aux else ""
    resumed = any(os.path.basename(os.path.normpath(r["dir"])) in analysis.RESUMED for r in runs)
    left_out = " (the first iteration after a resume left out)" if resumed else ""
    return (f"Mean episodic return per {width:,} env steps{left_out}\n\n{returns}"
            f"\n\nWall time and speed\n\n{speed}" + (f"\n\nPPG's aux phases: each loss's mean over the phase's "
                                                   f"minibatches (0.5 x MSE for the values)\n\n{aux}" if aux else ""))


def cleanrl_ppg(width):
    """CleanRL's ppg_procgen.py, its mean return per window: the episode log in CLEANRL_PPG of each run that reached
    1M env steps, as the README's runs did (the shorter ones are in docs/results.md, given with --reference)."""
    names = sorted(os.listdir(CLEANRL_PPG)) if os.path.isdir(CLEANRL_PPG) else []
    logs = {f"CleanRL PPG seed {f.split('_')[2][4:]} ({'GPU' if '_gpu_' in f else 'this CPU'})":
            analysis.episode_windows(os.path.join(CLEANRL_PPG, f), width) for f in names if f.endswith("_episodes.csv")}
    return {label: means for label, means in logs.items() if len(means) * width > 1_000_000}


def count_text(n, thing):
    return f"{'one' if n == 1 else n} {thing}{'s' if n != 1 else ''}"


def draw(runs, out, smooth_steps, references=None, width=100_000):
    """One curve per script (mean over its runs), return against env steps; the title says how many games and
    seeds it rests on. A reference's window means are dots at each window's end, where a curve smoothed over
    one window shows the same mean."""
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
    for label, means in (references or {}).items():
        ax.plot([width * (k + 1) for k in range(len(means))], means, ":o", markersize=3, linewidth=1,
                label=f"{label}, mean per {width:,} env steps")
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"episodic return, smoothed over {smooth_steps:,} env steps")
    figures.save_figure(fig, out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", metavar="RUN_DIR", help="run folders, or folders holding them (default: the "
                                                                "README's runs in data/runs, see below)")
    p.add_argument("-o", "--out", type=figures.image_file,
                   help="output image (.png, .pdf, ...); default: docs/figures/learning_1m.png for the README's runs "
                        "(it is committed), curves.png for RUN_DIRs")
    p.add_argument("--smooth-steps", type=sweep.COUNT, default=100_000, help="moving average over this many env steps")
    p.add_argument("--window", type=sweep.COUNT, default=100_000, help="the table's windows, in env steps")
    p.add_argument("--total-timesteps", type=sweep.COUNT, default=1_000_000,
                   help="without RUN_DIRs: the README runs' length (--train trains to it; a longer run is taken whole)")
    p.add_argument("--reference", nargs="+", default=[], metavar="CSV",
                   help="episode logs (global_step, episodic_return) whose window means go beside the runs")
    p.add_argument("--train", action="store_true", help="first train the README's runs that data/runs lacks")
    p.add_argument("--runs-dir", default=os.path.join(sweep.ROOT, "runs", "learning"), help="where --train trains")
    args = p.parse_args(argv)
    args.out = args.out or ("curves.png" if args.paths else OUT)
    missing = [path for path in args.paths if not os.path.isdir(path)]
    if missing:
        p.error(f"not a folder: {', '.join(missing)}")
    if any(not os.path.isfile(path) for path in args.reference):
        p.error(f"not a file: {', '.join(path for path in args.reference if not os.path.isfile(path))}")
    if args.train and args.paths:
        p.error("--train trains the README's runs: give no RUN_DIR")
    if args.train and sweep.run_all(sweep.readme_runs(args.total_timesteps), args.runs_dir,
                                    committed=sweep.COMMITTED):
        sys.exit(f"a run failed; see {os.path.join(args.runs_dir, 'logs')}")
    if args.paths:
        runs, references = sorted(analysis.load_runs(args.paths), key=by_script), None
    else:
        runs, references = default_runs(sweep.COMMITTED, args.total_timesteps), None
        if args.total_timesteps == 1_000_000:  # CleanRL's numbers are of 1M-step runs: its PPO, then its PPG
            ppo = analysis.cleanrl_references(sweep.CLEANRL_RUNS, args.window)
            references = {label.replace("CleanRL", "CleanRL PPO"): means for label, means in ppo.items()} \
                | cleanrl_ppg(args.window)
    references = {**(references or {}), **{"CleanRL " + os.path.basename(path).removesuffix("_episodes.csv"):
                                           analysis.episode_windows(path, args.window) for path in args.reference}}
    runs = [analysis.without_resumed(run) for run in runs if run["rows"]]
    if not runs:
        p.error("no runs with progress found under " + (", ".join(args.paths) if args.paths else
                f"{sweep.COMMITTED}: the README's runs with --total-timesteps {args.total_timesteps} "
                "(--train trains them)"))
    games = sorted({f"{r['config'].get('env_id')} ({r['config'].get('distribution_mode')})" for r in runs})
    if len(games) > 1:  # a curve averages a script's runs: of one game
        p.error(f"runs of one game and mode at a time, got {', '.join(games)} (experiments/plot.py draws a curve each)")
    draw(runs, args.out, args.smooth_steps, references, args.window)
    print(tables(runs, args.window, references))
    print(f"\nfigure {args.out}")
    return args.out


if __name__ == "__main__":
    main()
