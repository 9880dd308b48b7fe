"""Figure 1 of Hilton et al. (Section 5.1): PPO with artificial staleness.

Every iteration's rollout waits K iterations in a FIFO before it is trained on. Three objectives:
  (a) recent     ppo.py --old-policy recent     one old policy = the policy before this iteration
  (b) decoupled  ppo_ewma.py --prox recent      decoupled objective: behav for importance sampling,
                                                recent as the proximal policy
  (c) behav      ppo.py --old-policy behav      one old policy = the behaviour policy
At staleness 0, recent = behav, so one `ppo.py` run serves (a) and (c).

Output in --runs-dir: the run folders, logs/, fig1_staleness.png (final return against staleness, one
line per objective, mean and std over seeds; and each objective's learning curves per staleness) and
fig1_summary.csv (variant, staleness, env, seed, final_return, normalized, ...). The final return is
the mean episodic return over the last 10% of iterations (--final-frac), normalised with the Procgen
constants and averaged over games, per seed.

Paper settings (the defaults): all 16 Procgen games, hard, 4 seeds, 100M env steps per run
(Appendix B), 256 envs x 256 steps (one iteration = 65,536 steps), 8 minibatches, 3 epochs, staleness
0 1 2 4 8 16. That is 16 games x 4 seeds x 17 configurations = 1088 runs of 100M steps, GPU-days
per run: for a cluster or a big GPU machine with --parallel (on a CPU use --quick).

--quick (CPU, 33 min measured on the 2-core dev machine, 2 runs at a time on 1 core each):
starpilot, easy, seed 1, staleness 0 2 8, --num-envs 16 --num-steps 64 --num-minibatches 8 (1,024
steps per iteration), 49,152 steps (48 iterations) per run: 5 ppo.py runs (~6.3 min each) and 3
ppo_ewma.py runs (~9 min each). Too short to learn much: it checks the pipeline, not the paper's claim.

Resumable: finished runs (same exp_name, e.g. fig1__ppo__old-recent__stale4, matching config, progress
reaching --total-timesteps) are skipped, so rerunning the same command continues an interrupted sweep.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

VARIANTS = {  # name: (script, options, label)
    "recent": ("ppo", {"old_policy": "recent"}, "(a) PPO, old = recent"),
    "decoupled": ("ppo_ewma", {"prox": "recent"}, "(b) decoupled, prox = recent"),
    "behav": ("ppo", {"old_policy": "behav"}, "(c) PPO, old = behav"),
}
PAPER = {"envs": list(sweep.PROCGEN_GAMES), "seeds": [1, 2, 3, 4], "total_timesteps": 100_000_000,
         "distribution_mode": "hard", "num_envs": 256, "num_steps": 256, "num_minibatches": 8,
         "staleness_values": [0, 1, 2, 4, 8, 16], "variants": list(VARIANTS), "runs_dir": "runs/fig1"}
QUICK = {"envs": ["starpilot"], "seeds": [1], "total_timesteps": 49_152, "distribution_mode": "easy",
         "num_envs": 16, "num_steps": 64, "num_minibatches": 8, "staleness_values": [0, 2, 8],
         "parallel": 2}


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--staleness-values", nargs="+", type=int, metavar="K",
                   help="staleness K in iterations (paper: 0 1 2 4 8 16)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="objectives (default: all three)")
    return sweep.parse_sweep_args(p, argv, PAPER, QUICK, tiny={"staleness_values": [0, 2]})  # 4 tiny iterations


def build_runs(args):
    runs = []
    for variant in args.variants:
        script, options, _ = VARIANTS[variant]
        for k in args.staleness_values:
            if script == "ppo" and k == 0:  # recent = behav without staleness: one shared run
                name, options_k = "fig1__ppo__stale0", {"old_policy": "behav"}
            else:
                knob = "-".join(f"{key.replace('_policy', '')}-{value}" for key, value in options.items())
                name, options_k = f"fig1__{script}__{knob}__stale{k}", options
            for env in args.envs:
                for seed in args.seeds:
                    runs.append(sweep.Job(script, env, seed, name, args.total_timesteps,
                                          {**sweep.base_options(args, script), **options_k, "staleness": k},
                                          {"variant": variant, "staleness": k}))
    return runs


def make_figure(loaded, rows, args, out):
    metric = analysis.metric_name(rows)
    finals = analysis.aggregate_final(rows, ("variant", "staleness"), metric)
    variants = [v for v in args.variants if any(key[0] == v for key in finals)]
    fig, axes = figures.subplots(1 + len(variants), "Figure 1: PPO with artificial staleness", args)
    ks = sorted(args.staleness_values)
    figures.plot_final(axes[0], finals, {v: VARIANTS[v][2] for v in variants}, "staleness (iterations)",
                       figures.final_label(metric))
    axes[0].set_xscale("symlog", linthresh=1)
    axes[0].set_xticks(ks, [str(k) for k in ks])
    axes[0].set_title("mean +- std over seeds")
    for ax, variant in zip(axes[1:], variants):
        figures.plot_curves_by(ax, loaded, "staleness", ks, lambda k: f"staleness {k}", metric == "normalized",
                               smooth_k=args.smooth, variant=variant)
        ax.set_title(VARIANTS[variant][2])
    figures.save_figure(fig, out)


def main(argv=None):
    args = parse_args(argv)
    return sweep.sweep_main(args, build_runs(args), ("variant", "staleness"), "fig1_summary.csv",
                            "fig1_staleness.png", make_figure)


if __name__ == "__main__":
    main()
