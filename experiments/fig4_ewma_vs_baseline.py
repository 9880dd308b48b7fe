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

Resumable: finished runs (exp_name fig4__<script>, matching config, progress reaching --total-timesteps)
are skipped.
"""
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


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS), help="scripts to run (default: all four)")
    sweep.add_ppg_flags(p)
    return sweep.parse_sweep_args(p, argv, PAPER, QUICK)


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


def main(argv=None):
    args = parse_args(argv)
    return sweep.sweep_main(args, build_runs(args), ("algorithm",), "fig4_summary.csv", "fig4_ewma.png", make_figure)


if __name__ == "__main__":
    main()
