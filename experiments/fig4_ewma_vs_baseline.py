"""Figure 4 of Hilton et al. (Section 5.3): PPO vs PPO-EWMA and PPG vs PPG-EWMA, head to head.

All four scripts with the paper's hyperparameters (Appendix B; sweep.OFFICIAL_CODE where CleanRL's differ) on the same
games and seeds; --cpu: ppo.py and ppo_ewma.py at the scripts' defaults.

Output in --runs-dir: run folders, logs/, fig4_ewma.png (learning curves of the four algorithms against
env steps and against wall-clock time, averaged over games; and per game the difference in final
return EWMA minus baseline, mean and standard error over seeds, paired by seed) and fig4_summary.csv
(algorithm, env, seed, final_return, normalized, global_step, time_s, ...). time_s gives the EWMA's
wall-clock cost (paper footnote 3: +19% for PPO, +3% for PPG). The paper averages its per-game
differences over the last 4M of 100M steps; here the final return is over the last --final-frac of
the iterations (default 10%).

Paper settings (the defaults): 16 games, hard, 4 seeds, 100M env steps, 256 envs x 256 steps,
8 minibatches, PPO 3 epochs, PPG N_pi 32 / E_aux 6, beta_prox 0.889. 256 runs, GPU-days each.

--quick (CPU, 24 min measured on a 2-core Intel Xeon, 2 runs at a time on 1 core each):
starpilot, easy, seed 1, --num-envs 16 --num-steps 64 --num-minibatches 8 (1,024 steps per
iteration), PPG --n-pi 8 (a phase = 8,192 steps), 32,768 steps (32 iterations, 4 PPG phases) per run:
ppg_ewma.py and ppg.py 18 min each (the auxiliary phase dominates), ppo_ewma.py 5 min, ppo.py 4 min.
Checks the pipeline only; the EWMA's effect (small, consistent over 100M steps) is far below this noise.

--cpu (PPO-EWMA against PPO at CPU scale, as the paper's test): ppo.py and ppo_ewma.py at the scripts' defaults, easy,
1M env steps, seeds 1-4, on the paper's untuned games. The paper tuned beta_prox "on the first 8 of the 16 Procgen
environments" in its own (the Procgen paper's) order, so the untuned eight are leaper, maze, bigfish, heist, climber,
plunder, ninja and bossfight (UNTUNED). A pilot ranks them before any comparison run: ppo.py, seed 1, 16 iterations
(262,144 env steps) on each; the rise of a pilot is its normalised return (easy-mode constants) over its last 3
iterations minus its first 3. The compared games are ninja and plunder ("games", picked first: docs/results.md
says how) and the two others whose pilots rise most ("pick"). Each pilot is the first 16
iterations of its game's ppo.py seed-1 run, which goes on from the pilot's checkpoint where it is at hand (else it
starts anew). StarPilot, a tuned game, is shown apart: the README's runs, seeds 1-2 (--envs names the tuned game; the
compared games are the pilots' pick). One run at a time on both cores into runs/fig4_cpu (1.1-3.5 h a run, measured;
--dry-run estimates what is left), a pair's two runs one after the other, each copied to data/runs when it finishes
(runs there are skipped: the same command continues the sweep in a later session). Runs made on a GPU count too, from
data/runs/gpu: experiments/tools/gpu_check.sh fig4 trains there, eight at a time (--cpu --committed data/runs/gpu
--parallel 8). Output, from data/runs and data/runs/gpu alone: the pilots' table, per game the mean return per 100k env
steps of every run, the final returns, the paired test, docs/figures/fig4_cpu.png and data/fig4_cpu_summary.csv.

The paired test, fixed before every run but ninja's and plunder's seeds 1-2. For each game and seed, d = PPO-EWMA's
minus PPO's normalised return (Procgen's easy-mode constants, analysis.PROCGEN_RANGES) over the last 10% of the env
steps (900k-1M); the two runs of a pair share the seed, so the same first levels and initial weights. Over all pairs of
the untuned games: the mean of d, its standard error and its two-sided 95% interval (Student's t, n - 1 degrees of
freedom). Verdict: "ahead" if the interval lies above 0, "behind" if it lies below 0, "level" otherwise; per game the
same rule over its seeds. The sign test (the positive d among the non-zero ones, two-sided, against 1/2) is printed
beside it, as the paper's "all of the last 8" counts signs; it decides nothing.

Resumable: finished runs (exp_name fig4__<script>; with --cpu <script>, or the README's names on StarPilot;
matching config, progress reaching --total-timesteps) are skipped.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

ALGORITHMS = {"ppo": "PPO", "ppo_ewma": "PPO-EWMA", "ppg": "PPG", "ppg_ewma": "PPG-EWMA"}
PAIRS = (("ppo_ewma", "ppo"), ("ppg_ewma", "ppg"))
COLOURS = {"ppo": "tab:blue", "ppo_ewma": "tab:blue", "ppg": "tab:orange", "ppg_ewma": "tab:orange"}  # EWMA solid
PAPER = {"envs": list(sweep.PROCGEN_GAMES), "seeds": [1, 2, 3, 4], "total_timesteps": 100_000_000,
         "distribution_mode": "hard", "num_envs": 256, "num_steps": 256, "num_minibatches": 8,
         "algorithms": list(ALGORITHMS), "runs_dir": "runs/fig4"}
QUICK = {"envs": ["starpilot"], "seeds": [1], "total_timesteps": 32_768, "distribution_mode": "easy",
         "num_envs": 16, "num_steps": 64, "num_minibatches": 8, "n_pi": 8, "parallel": 2}
# The paper's Fig. 4 games where beta_prox was not tuned: the last 8 of the 16 in the Procgen paper's order
UNTUNED = ("leaper", "maze", "bigfish", "heist", "climber", "plunder", "ninja", "bossfight")
CPU = {"algorithms": ["ppo", "ppo_ewma"], "envs": ["starpilot"], "tuned_seeds": [1, 2], "candidates": list(UNTUNED),
       "games": ["ninja", "plunder"], "pick": 2, "pilot_iterations": 16, "score_iterations": 3, "seeds": [1, 2, 3, 4],
       "total_timesteps": 1_000_000, "distribution_mode": "easy", "num_envs": 64, "num_steps": 256,
       "num_minibatches": 8, "defaults": True, "save_model": True, "committed": sweep.COMMITTED,
       "records": [sweep.COMMITTED, sweep.GPU_RUNS], "out_dir": os.path.join(sweep.ROOT, "docs", "figures"),
       "summary_dir": sweep.DATA, "sps_per_core": {"ppo": 220, "ppo_ewma": 166},
       "estimate_note": "the medians of the README's 1M-step runs' sps (ppo.py 222 and 218, ppo_ewma.py 167 and "
                        "166), one at a time on 2 cores (AMD EPYC, Zen 4)"}
TINY_CPU = {"envs": [], "candidates": ["maze", "heist", "leaper"], "games": ["leaper"], "pick": 1,
            "pilot_iterations": 2, "score_iterations": 1}


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS), help="scripts to run (default: all four)")
    p.add_argument("--cpu", action="store_true", help="the CPU preset described below")
    sweep.add_ppg_flags(p)
    args = sweep.parse_sweep_args(p, argv, PAPER, QUICK, cpu=CPU)
    if args.cpu and args.tiny:  # tests: two candidate games of 2 iterations, one picked, no StarPilot
        vars(args).update(TINY_CPU)
    return args


def build_runs(args):
    return [sweep.Job(script, env, seed, f"fig4__{script}", args.total_timesteps, sweep.base_options(args, script),
                      {"algorithm": script})
            for script in args.algorithms for env in args.envs for seed in args.seeds]


def paired_differences(rows, metric):
    """{(ewma, baseline): {env: seed_stats of (ewma - baseline) over the seeds both have}}."""
    value = {(r["algorithm"], r["env"], r["seed"]): r[metric] for r in rows}
    result = {}
    for ewma, base in PAIRS:
        per_env = {}
        for (algo, env, seed), v in value.items():
            if algo == ewma and (base, env, seed) in value:
                per_env.setdefault(env, []).append(v - value[(base, env, seed)])
        if per_env:
            result[(ewma, base)] = {env: analysis.seed_stats(d) for env, d in sorted(per_env.items())}
    return result


def make_figure(loaded, rows, args, out):
    metric = analysis.metric_name(rows)
    normalize = metric == "normalized"
    fig, axes = figures.subplots(3, "Figure 4: EWMA vs baseline", args)
    for script in args.algorithms:
        members = [r for r in loaded if r["tags"]["algorithm"] == script]
        for ax, x in zip(axes[:2], ("global_step", "time_s")):
            figures.plot_band(ax, analysis.env_mean_curve(members, x=x, smooth_k=args.smooth, normalize=normalize),
                              ALGORITHMS[script], COLOURS[script], "-" if "ewma" in script else "--")
    for ax, xlabel in zip(axes[:2], ("env steps", "wall-clock time (s)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("normalised return" if normalize else "episodic return")
        ax.set_title("mean +- std over seeds")
    diffs = paired_differences(rows, metric)
    envs = sorted({env for per_env in diffs.values() for env in per_env})
    width = 0.8 / max(1, len(diffs))
    for i, ((ewma, base), per_env) in enumerate(diffs.items()):
        xs = np.arange(len(envs)) + (i - (len(diffs) - 1) / 2) * width
        ax = axes[2]
        ax.bar(xs, [per_env.get(e, {"mean": np.nan})["mean"] for e in envs], width,
               yerr=[per_env.get(e, {"sem": 0})["sem"] for e in envs], capsize=2,
               color=COLOURS[ewma], label=f"{ALGORITHMS[ewma]} - {ALGORITHMS[base]}")
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_xticks(range(len(envs)), envs, rotation=60, fontsize="small")
    axes[2].set_ylabel(f"difference in {figures.final_label(metric)}")
    axes[2].set_title("per game, mean +- s.e. over seeds")
    figures.save_figure(fig, out)
    for (ewma, base), per_env in diffs.items():
        mean = np.mean([s["mean"] for s in per_env.values()])
        print(f"{ALGORITHMS[ewma]} - {ALGORITHMS[base]}: {figures.final_label(metric)} difference {mean:+.3f} "
              f"averaged over {len(per_env)} game(s); better on {sum(s['mean'] > 0 for s in per_env.values())}")


# --- --cpu: the untuned games, paired by seed ------------------------------------------------------------------
def pilot_runs(args):
    """ppo.py, seed 1, pilot_iterations iterations on each candidate game: the first iterations of its seed-1 run."""
    steps = args.pilot_iterations * args.num_envs * args.num_steps
    return [sweep.Job("ppo", env, 1, "ppo", steps, sweep.base_options(args, "ppo"), {"algorithm": "ppo"})
            for env in args.candidates]


def pilot_scores(pilots, args):
    """{game: (first, last, rise)}: the mean episodic return of the pilot's first and of its last score_iterations
    iterations, and the rise between them in normalised return (easy-mode constants)."""
    scores = {}
    for run in pilots:
        rows = [row for row in run["rows"] if row["iteration"] <= args.pilot_iterations]
        env, k = run["config"]["env_id"], args.score_iterations
        first, last = (analysis.column_mean(part, "episodic_return") for part in (rows[:k], rows[-k:]))
        rise = analysis.normalized_return(last, env, "easy") - analysis.normalized_return(first, env, "easy")
        scores[env] = (first, last, rise)
    return scores


def picked_games(scores, args):
    """The games compared: args.games, then the args.pick other candidates whose pilots rise most."""
    others = sorted((env for env in scores if env not in args.games), key=lambda env: scores[env][2], reverse=True)
    return list(args.games) + others[:args.pick]


def comparison_runs(args, envs, seeds=None):
    """Both scripts on each game and seed, game by game, seed by seed (a pair's two runs one after the other);
    StarPilot's are the README's runs (sweep.readme_runs)."""
    return [sweep.Job(script, env, seed, sweep.README_EXP_NAMES[script] if env == "starpilot" else script,
                      args.total_timesteps, sweep.base_options(args, script), {"algorithm": script})
            for env in envs for seed in seeds or args.seeds for script in args.algorithms]


def final_window(args):  # the last 10% of the env steps, e.g. (900k, 1M]
    return (1 - args.final_frac) * args.total_timesteps, args.total_timesteps


def cpu_rows(loaded, args):
    """A row per run: its script, game, seed, mean return over final_window (the first iteration after a resume
    left out, analysis.RESUMED) and that return normalised with Procgen's easy-mode constants."""
    low, high = final_window(args)
    rows = []
    for r in loaded:
        final, env = analysis.window_return(r, low, high), r["config"]["env_id"]
        rows.append({"algorithm": r["tags"]["algorithm"], "env": env, "seed": r["config"]["seed"],
                     "final_return": final, "normalized": analysis.normalized_return(final, env, "easy"),
                     "run": os.path.basename(os.path.normpath(r["dir"]))})
    return rows


def pairs(rows):
    """{game: {seed: PPO-EWMA minus PPO in normalised return}} over the seeds where both scripts have a run."""
    value = {(r["algorithm"], r["env"], r["seed"]): r["normalized"] for r in rows}
    out = {}
    for (algorithm, env, seed), v in sorted(value.items()):
        if algorithm == "ppo_ewma" and ("ppo", env, seed) in value:
            out.setdefault(env, {})[seed] = v - value[("ppo", env, seed)]
    return out


def paired_tables(rows):
    """The paired test (docstring above): per game, then over every pair of the untuned games."""
    by_game = pairs(rows)
    games = sorted(by_game, key=lambda env: (env not in UNTUNED, UNTUNED.index(env) if env in UNTUNED else 0))
    per_game = []
    for env in games:
        test = analysis.paired_test(list(by_game[env].values()))
        per_game.append([env + ("" if env in UNTUNED else " (tuned)"), " ".join(map(str, by_game[env])),
                         ", ".join(f"{d:+.3f}" for d in by_game[env].values()), f"{test['mean']:+.3f}",
                         interval(test), test["verdict"]])
    untuned = [d for env in games if env in UNTUNED for d in by_game[env].values()]
    overall = []
    if untuned:
        test = analysis.paired_test(untuned)
        overall.append([f"{test['n']} pairs, {sum(env in UNTUNED for env in games)} games", f"{test['mean']:+.4f}",
                        analysis.cell(test["sem"], "{:.4f}"), interval(test), test["verdict"],
                        f"{test['positive']} of {test['signed']}", f"{test['sign_p']:.3f}"])
    return per_game, overall


def interval(test):
    return "-" if test["n"] < 2 else f"[{test['low']:+.3f}, {test['high']:+.3f}]"


def make_cpu_figure(loaded, rows, args, out):
    """Per game, both scripts' learning curves (mean +- std over seeds, smoothed over 100k env steps), and the paired
    differences (a point per seed, the mean as a bar); printed: the return per 100k env steps of every run, the final
    returns and the paired test."""
    loaded = [analysis.without_resumed(r) for r in loaded]
    envs = sorted({r["config"]["env_id"] for r in loaded}, key=lambda e: (e != "starpilot", e))
    fig, axes = figures.subplots(len(envs) + 1, "Figure 4 at laptop scale: PPO-EWMA against PPO",
                                 argparse.Namespace(**{**vars(args), "envs": envs}),
                                 seeds=sorted({r["config"]["seed"] for r in loaded}))
    for ax, env in zip(axes, envs):
        for script in args.algorithms:
            members = [r for r in loaded if r["config"]["env_id"] == env and r["tags"]["algorithm"] == script]
            figures.plot_band(ax, analysis.env_mean_curve(members, normalize=False, smooth_steps=100_000),
                              ALGORITHMS[script], COLOURS[script], "-" if "ewma" in script else "--")
        ax.set(title=env, xlabel="env steps", ylabel="episodic return")
    by_game, ax = pairs(rows), axes[-1]
    games = sorted(by_game, key=lambda env: (env not in UNTUNED, env))
    for x, env in enumerate(games):
        ax.bar(x, np.mean(list(by_game[env].values())), 0.6, color="tab:blue", alpha=0.3)
        ax.scatter([x] * len(by_game[env]), list(by_game[env].values()), color="tab:blue", zorder=3, s=14)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(games)), [env if env in UNTUNED else f"{env}\n(tuned)" for env in games])
    ax.set(title="PPO-EWMA - PPO, seed by seed", ylabel="normalised return, last 10%")
    figures.save_figure(fig, out)
    for env in envs:
        runs = sorted((r for r in loaded if r["config"]["env_id"] == env),
                      key=lambda r: (r["tags"]["algorithm"], r["config"]["seed"]))
        labels = [f"{ALGORITHMS[r['tags']['algorithm']]} seed {r['config']['seed']}" for r in runs]
        print(f"\n{env}: mean episodic return per 100,000 env steps\n\n{analysis.window_table(runs, labels, 100_000)}")
    low, high = final_window(args)
    finals = {(r["algorithm"], r["env"], r["seed"]): r["final_return"] for r in rows}
    print(f"\nMean return over ({analysis.steps_text(low)}, {analysis.steps_text(high)}] env steps, by seed\n\n"
          + analysis.markdown_table(["game", "seeds", "PPO", "PPO-EWMA"], [
              [env, " ".join(map(str, seeds)), *[", ".join(f"{finals[a, env, s]:.2f}" for s in seeds)
                                                 for a in ("ppo", "ppo_ewma")]]
              for env, seeds in ((env, list(pairs(rows).get(env, {}))) for env in envs) if seeds]))
    per_game, overall = paired_tables(rows)
    print("\nThe paired test: PPO-EWMA minus PPO in normalised return (easy), seed by seed\n\n"
          + analysis.markdown_table(["game", "seeds", "differences", "mean", "95% interval", "verdict"], per_game))
    if overall:
        print("\n" + analysis.markdown_table(["untuned games", "mean difference", "s.e.", "95% interval", "verdict",
                                              "positive", "sign test p"], overall))


def main_cpu(args):
    """Train the pilots still to do, pick the games, then train and show the comparison."""
    pilots = pilot_runs(args)
    sweep.run_sweep(args, pilots)
    # each pilot as it picked the games: a seed-1 run trained later (elsewhere, from scratch) does not replace it
    dirs = sweep.record_dirs(args) or [args.runs_dir]
    scores = pilot_scores(sweep.select_runs(pilots, *dirs, earliest=True), args)
    k = args.score_iterations
    print(f"Pilots (ppo.py, seed 1, {args.pilot_iterations} iterations): mean return of the first and the last {k} "
          f"iterations\n\n" + analysis.markdown_table(
              ["game", f"first {k}", f"last {k}", "rise (normalised)"],
              [[env, *(analysis.cell(v) for v in s[:2]), f"{s[2]:+.3f}"] for env, s in scores.items()]))
    games = list(args.games)
    if len(scores) < len(pilots):
        print(f"\n{len(scores)} of {len(pilots)} pilots finished: the other games are picked once all are")
    else:
        games = picked_games(scores, args)
        print(f"\nCompared: {', '.join(games)}\n")
    runs = comparison_runs(args, games)
    shown = runs + comparison_runs(args, args.envs, args.tuned_seeds)  # StarPilot: the README's runs
    return sweep.sweep_main(args, runs, ("algorithm",), "fig4_cpu_summary.csv", "fig4_cpu.png", make_cpu_figure,
                            summarize=cpu_rows, shown=shown)


def main(argv=None):
    args = parse_args(argv)
    if args.cpu:
        return main_cpu(args)
    return sweep.sweep_main(args, build_runs(args), ("algorithm",), "fig4_summary.csv", "fig4_ewma.png", make_figure)


if __name__ == "__main__":
    main()
