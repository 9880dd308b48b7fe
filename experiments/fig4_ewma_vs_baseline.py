"""Figure 4 of Hilton et al. (Section 5.3): PPO vs PPO-EWMA and PPG vs PPG-EWMA, head to head.

All four scripts at their default hyperparameters (Appendix B) on the same games and seeds.

Output in --runs-dir: run folders, logs/, fig4_ewma.png (learning curves of the four algorithms against
env steps and against wall-clock time, averaged over games; and per game the difference in final
return EWMA minus baseline, mean and standard error over seeds, paired by seed) and fig4_summary.csv
(algorithm, env, seed, final_return, normalized, global_step, time_s, ...). time_s gives the EWMA's
wall-clock cost (paper footnote 3: +19% for PPO, +3% for PPG). The paper averages its per-game
differences over the last 4M of 100M steps; here the final return is over the last --final-frac of
the iterations (default 10%).

Paper settings (the defaults): 16 games, hard, 4 seeds, 100M env steps, 256 envs x 256 steps,
8 minibatches, PPO 3 epochs, PPG N_pi 32 / E_aux 6, beta_prox 0.889. 256 runs, GPU-days each.

--quick (CPU, about 30 min estimated on the 2-core dev machine, 2 runs at a time on 1 core each):
starpilot, easy, seed 1, --num-envs 16 --num-steps 64 --num-minibatches 8 (1,024 steps per
iteration), PPG --n-pi 8 (a phase = 8,192 steps), 32,768 steps (32 iterations, 4 PPG phases) per run:
measured one at a time on one core: ppg_ewma.py 24 min, ppg.py 20 min (the auxiliary phase dominates),
ppo_ewma.py 6 min, ppo.py 4 min.
Checks the pipeline only; the EWMA's effect (small, consistent over 100M steps) is far below this noise.

--cpu (PPO-EWMA against PPO at CPU scale): ppo.py and ppo_ewma.py at the scripts' defaults, easy, seeds 1 and 2,
1M env steps, on StarPilot (the README's runs) and on two more of the paper's untuned games, picked by a pilot
before any comparison run: ppo.py, seed 1, 16 iterations (262,144 env steps) on each of heist, jumper, leaper,
maze, miner, ninja and plunder; the two whose normalised return rises most from the pilot's first 3 iterations to
its last 3 are compared. Each pilot is the first 16 iterations of its game's ppo.py seed-1 run, which goes on from
the pilot's checkpoint. One run at a time on both cores into runs/fig4_cpu, each copied to data/runs when it
finishes (runs there are skipped: the same command continues the sweep in a later session). Runs made on a GPU
count too, from data/runs/gpu: experiments/tools/gpu_check.sh fig4 trains the pilots and the picked games' runs
there, eight at a time (--cpu --committed data/runs/gpu --parallel 8). Output, from data/runs and data/runs/gpu
alone: the pilot's table, per game the mean return per 100k env steps of every run and the difference PPO-EWMA
minus PPO over the last 10% of the env steps (900k-1M), docs/figures/fig4_cpu.png and data/fig4_cpu_summary.csv.

Resumable: finished runs (exp_name fig4__<script>, matching config, progress reaching --total-timesteps)
are skipped.
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
UNTUNED = ("heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")  # Fig. 4: beta_prox untuned
CPU = {"algorithms": ["ppo", "ppo_ewma"], "envs": ["starpilot"], "candidates": list(UNTUNED[:-1]), "pick": 2,
       "pilot_iterations": 16, "score_iterations": 3, "seeds": [1, 2], "total_timesteps": 1_000_000,
       "distribution_mode": "easy", "num_envs": 64, "num_steps": 256, "num_minibatches": 8, "defaults": True,
       "save_model": True, "committed": sweep.COMMITTED, "records": [sweep.COMMITTED, sweep.GPU_RUNS],
       "out_dir": os.path.join(sweep.ROOT, "docs", "figures"), "summary_dir": sweep.DATA,
       "sps_per_core": {"ppo": 235, "ppo_ewma": 200},
       "estimate_note": "from ppo.py's pilots and ppo_ewma.py's README runs, one at a time on 2 cores (AMD EPYC, Zen 4)"}
TINY_CPU = {"envs": [], "candidates": ["maze", "heist"], "pick": 1, "pilot_iterations": 2, "score_iterations": 1}


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS), help="scripts to run (default: all four)")
    p.add_argument("--cpu", action="store_true", help="the CPU preset described above")
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


# --- --cpu: StarPilot and two games picked by a pilot --------------------------------------------------------
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


def comparison_runs(args, envs):
    """Both scripts on each game and seed; StarPilot's are the README's runs (sweep.readme_runs)."""
    return [sweep.Job(script, env, seed, sweep.README_EXP_NAMES[script] if env == "starpilot" else script,
                      args.total_timesteps, sweep.base_options(args, script), {"algorithm": script})
            for env in envs for script in args.algorithms for seed in args.seeds]


def final_window(args):  # the last 10% of the env steps, e.g. (900k, 1M]
    return (1 - args.final_frac) * args.total_timesteps, args.total_timesteps


def cpu_rows(loaded, args):
    """A row per run: its script, game, seed and mean return over final_window (the first iteration after a resume
    left out, analysis.RESUMED)."""
    low, high = final_window(args)
    return [{"algorithm": r["tags"]["algorithm"], "env": r["config"]["env_id"], "seed": r["config"]["seed"],
             "final_return": analysis.window_return(r, low, high), "run": os.path.basename(os.path.normpath(r["dir"]))}
            for r in loaded]


def verdicts(rows):
    """Per game: PPO's and PPO-EWMA's seeds, the difference of their means, the difference seed by seed, and the
    verdict: ahead or behind if the difference is larger than the spread (max - min) of either script's seeds, else
    level."""
    table = []
    for env in sorted({r["env"] for r in rows}, key=lambda e: (e != "starpilot", e)):
        finals = {a: {r["seed"]: r["final_return"] for r in rows if r["env"] == env and r["algorithm"] == a}
                  for a in PAIRS[0]}
        if not all(finals.values()):
            continue
        ewma, ppo = (list(finals[a].values()) for a in PAIRS[0])
        diff = np.mean(ewma) - np.mean(ppo)
        spread = max(max(v) - min(v) for v in (ewma, ppo))
        paired = [finals["ppo_ewma"][s] - finals["ppo"][s] for s in sorted(finals["ppo"]) if s in finals["ppo_ewma"]]
        verdict = "ahead" if diff > spread else "behind" if diff < -spread else "level"
        table.append([env, ", ".join(f"{v:.2f}" for v in ppo), ", ".join(f"{v:.2f}" for v in ewma), f"{diff:+.2f}",
                      ", ".join(f"{d:+.2f}" for d in paired), f"{spread:.2f}", verdict])
    return table


def make_cpu_figure(loaded, rows, args, out):
    """Per game, both scripts' learning curves (mean +- std over seeds, smoothed over 100k env steps); printed: the
    return per 100k env steps of every run, and the verdicts."""
    loaded = [analysis.without_resumed(r) for r in loaded]
    envs = sorted({r["config"]["env_id"] for r in loaded}, key=lambda e: (e != "starpilot", e))
    fig, axes = figures.subplots(len(envs), "Figure 4 at laptop scale: PPO-EWMA against PPO",
                                 argparse.Namespace(**{**vars(args), "envs": envs}))
    for ax, env in zip(axes, envs):
        for script in args.algorithms:
            members = [r for r in loaded if r["config"]["env_id"] == env and r["tags"]["algorithm"] == script]
            figures.plot_band(ax, analysis.env_mean_curve(members, normalize=False, smooth_steps=100_000),
                              ALGORITHMS[script], COLOURS[script], "-" if "ewma" in script else "--")
        ax.set(title=env, xlabel="env steps", ylabel="episodic return")
    figures.save_figure(fig, out)
    for env in envs:
        runs = sorted((r for r in loaded if r["config"]["env_id"] == env),
                      key=lambda r: (r["tags"]["algorithm"], r["config"]["seed"]))
        labels = [f"{ALGORITHMS[r['tags']['algorithm']]} seed {r['config']['seed']}" for r in runs]
        print(f"\n{env}: mean episodic return per 100,000 env steps\n\n{analysis.window_table(runs, labels, 100_000)}")
    low, high = final_window(args)
    print(f"\nMean return over ({analysis.steps_text(low)}, {analysis.steps_text(high)}] env steps\n\n"
          + analysis.markdown_table(["game", "PPO (seeds)", "PPO-EWMA (seeds)", "PPO-EWMA - PPO", "seed by seed",
                                     "seeds' spread", "verdict"], verdicts(rows)))


def main_cpu(args):
    """Train the pilots still to do, pick the games, then train and show the comparison."""
    pilots = pilot_runs(args)
    sweep.run_sweep(args, pilots)
    scores = pilot_scores(sweep.select_runs(pilots, *(sweep.record_dirs(args) or [args.runs_dir])), args)
    k = args.score_iterations
    print(f"Pilots (ppo.py, seed 1, {args.pilot_iterations} iterations): mean return of the first and the last {k} "
          f"iterations\n\n" + analysis.markdown_table(
              ["game", f"first {k}", f"last {k}", "rise (normalised)"],
              [[env, *(analysis.cell(v) for v in s[:2]), f"{s[2]:+.3f}"] for env, s in scores.items()]))
    if len(scores) < len(pilots):
        print(f"\n{len(scores)} of {len(pilots)} pilots finished: the games are picked once all are")
        return None
    games = sorted(scores, key=lambda env: scores[env][2], reverse=True)[:args.pick]
    print(f"\nPicked: {', '.join(games)}\n")
    args.envs = list(args.envs) + games
    return sweep.sweep_main(args, comparison_runs(args, args.envs), ("algorithm",), "fig4_cpu_summary.csv",
                            "fig4_cpu.png", make_cpu_figure, summarize=cpu_rows)


def main(argv=None):
    args = parse_args(argv)
    if args.cpu:
        return main_cpu(args)
    return sweep.sweep_main(args, build_runs(args), ("algorithm",), "fig4_summary.csv", "fig4_ewma.png", make_figure)


if __name__ == "__main__":
    main()
