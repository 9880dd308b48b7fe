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

--quick (CPU, 25 min measured on a 2-core Intel Xeon, 2 runs at a time on 1 core each):
starpilot, easy, seed 1, staleness 0 2 8, --num-envs 16 --num-steps 64 --num-minibatches 8 (1,024
steps per iteration), 49,152 steps (48 iterations) per run: 5 ppo.py runs (5.4-6.7 min each) and 3
ppo_ewma.py runs (6.0-6.9 min each). Too short to learn much: it checks the pipeline, not the paper's claim.

--cpu (the paper's three findings at CPU scale): StarPilot, easy, seed 1, 1M env steps, the scripts' defaults otherwise,
staleness 0 2 8: the six runs at K = 2 and 8, a control, (b) at K = 8 with --no-clip-vloss (the value loss's clip is
centred on values predicted K iterations earlier), and seed 2 of the three objectives at K = 8 (the ranking there rests
on margins of about one run-to-run difference), then (b) and (a) at K = 4, seed 1 (the knee), the control's seed 2,
(c) at K = 4 and seed 2 of (b), (a) and (c) at K = 4 and then at K = 2, then the control at K = 0 and 4, seeds 1 and 2
(does the clip cost without staleness? is it why (b) falls at K = 4?), one at a time on both cores into runs/fig1_cpu
(1-2.5 h a run, measured; --dry-run estimates what is left), each copied to data/runs when it finishes (the same command
continues the sweep later); K = 0 is the README's ppo.py runs, seeds 1 and 2 (at K = 0 the three objectives are one). An
iteration is 16,384 env steps here (the paper's 65,536), so K = 8 is 131k env steps of staleness. Output, from data/runs
alone: docs/figures/fig1_cpu.png (the return over the last 10% of the env steps against K, one line per objective; each
objective's learning curves), data/fig1_cpu_summary.csv, and printed: the mean return per 100k env steps of every run
and over the last 10%, with fresh PPO after as many updates as each K allows, and each run's entropy, approx_kl and
clipfrac over the last 10%.

Resumable: finished runs (same exp_name, e.g. fig1__ppo__old-recent__stale4, matching config, progress
reaching --total-timesteps) are skipped, so rerunning the same command continues an interrupted sweep.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

VARIANTS = {  # name: (script, options, label)
    "recent": ("ppo", {"old_policy": "recent"}, "(a) PPO, old = recent"),
    "decoupled": ("ppo_ewma", {"prox": "recent"}, "(b) decoupled, prox = recent"),
    "behav": ("ppo", {"old_policy": "behav"}, "(c) PPO, old = behav"),
    # a control: under staleness the value loss's clip is centred on values predicted K iterations earlier
    "noclip": ("ppo_ewma", {"prox": "recent", "clip_vloss": False}, "(b) without the value clip"),
}
OBJECTIVES = ["recent", "decoupled", "behav"]
PAPER = {"envs": list(sweep.PROCGEN_GAMES), "seeds": [1, 2, 3, 4], "total_timesteps": 100_000_000,
         "distribution_mode": "hard", "num_envs": 256, "num_steps": 256, "num_minibatches": 8,
         "staleness_values": [0, 1, 2, 4, 8, 16], "variants": OBJECTIVES, "runs_dir": "runs/fig1"}
QUICK = {"envs": ["starpilot"], "seeds": [1], "total_timesteps": 49_152, "distribution_mode": "easy",
         "num_envs": 16, "num_steps": 64, "num_minibatches": 8, "staleness_values": [0, 2, 8],
         "parallel": 2}
CPU = {"envs": ["starpilot"], "seeds": [1], "total_timesteps": 1_000_000, "distribution_mode": "easy",
       "num_envs": 64, "num_steps": 256, "num_minibatches": 8, "staleness_values": [0, 2, 8], "defaults": True,
       "save_model": True, "committed": sweep.COMMITTED,
       # (variant, K, seed) beside the sweep: the value-clip control, a second seed at K = 8, K = 4 (the knee), the
       # control's second seed, (c) at K = 4, a second seed of (b) at K = 4 (where it fell before the paper's knee)
       # and of (a) and (c) there: K = 4 in two seeds each; a second seed of (b) at K = 2, where it barely fell, and
       # of (a) and (c) there; the control at K = 0 (does the clip cost without staleness?) and 4 (is it (b)'s fall
       # there?), two seeds each
       "extra_runs": [("noclip", 8, 1), ("recent", 8, 2), ("behav", 8, 2), ("decoupled", 8, 2), ("decoupled", 4, 1),
                      ("recent", 4, 1), ("noclip", 8, 2), ("behav", 4, 1), ("decoupled", 4, 2), ("recent", 4, 2),
                      ("behav", 4, 2), ("decoupled", 2, 2), ("recent", 2, 2), ("behav", 2, 2), ("noclip", 0, 1),
                      ("noclip", 4, 1), ("noclip", 0, 2), ("noclip", 4, 2)],
       "out_dir": os.path.join(sweep.ROOT, "docs", "figures"), "summary_dir": sweep.DATA,
       "sps_per_core": {"ppo": 205, "ppo_ewma": 190},
       "estimate_note": "the medians of the sps of the committed runs that name the AMD EPYC (Zen 4), one at a "
                        "time on 2 cores: ppo.py 185-228, ppo_ewma.py --prox recent 190-191"}


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--staleness-values", nargs="+", type=sweep.NATURAL, metavar="K",
                   help="staleness K in iterations (paper: 0 1 2 4 8 16)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="objectives (default: all three)")
    p.add_argument("--cpu", action="store_true", help="the CPU preset described below")
    return sweep.parse_sweep_args(p, argv, PAPER, QUICK, tiny={"staleness_values": [0, 2]}, cpu=CPU)  # 4 iterations


def build_runs(args):
    runs = []
    for variant in args.variants:
        script, options, _ = VARIANTS[variant]
        for k in args.staleness_values:
            seeds = args.seeds
            if k == 0 and (script == "ppo" or args.cpu):  # recent = behav without staleness: one shared run
                # (--cpu: the README's ppo.py runs, for (b) too: with prox = recent = behav it is PPO's objective)
                script_k, name = "ppo", sweep.README_EXP_NAMES["ppo"] if args.cpu else "fig1__ppo__stale0"
                options_k = {"old_policy": "behav"}
                if args.cpu:
                    seeds = sweep.README_SEEDS["ppo"]
            else:
                script_k, name, options_k = script, run_name(script, options, k), options
            for env in args.envs:
                for seed in seeds:
                    runs.append(sweep.Job(script_k, env, seed, name, args.total_timesteps,
                                          {**sweep.base_options(args, script_k), **options_k, "staleness": k},
                                          {"variant": variant, "staleness": k}))
    for variant, k, seed in getattr(args, "extra_runs", []):  # --cpu: single runs beside the sweep
        script, options, _ = VARIANTS[variant]
        for env in args.envs:
            runs.append(sweep.Job(script, env, seed, run_name(script, options, k), args.total_timesteps,
                                  {**sweep.base_options(args, script), **options, "staleness": k},
                                  {"variant": variant, "staleness": k}))
    return runs


def run_name(script, options, k):
    """e.g. fig1__ppo__old-recent__stale2, fig1__ppo_ewma__prox-recent-no-clip-vloss__stale8"""
    knob = "-".join(f"{key.replace('_policy', '')}-{value}" if value is not False else f"no-{key.replace('_', '-')}"
                    for key, value in options.items())
    return f"fig1__{script}__{knob}__stale{k}"


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


# --- --cpu: one game, raw returns over the last tenth -----------------------------------------------------------
def cpu_rows(loaded, args):
    """A row per objective, K and seed: the mean return over the last 10% of the env steps (e.g. (900k, 1M])."""
    low = (1 - args.final_frac) * args.total_timesteps
    return [{**r["tags"], "seed": r["config"]["seed"],
             "final_return": analysis.window_return(r, low, args.total_timesteps),
             "run": os.path.basename(os.path.normpath(r["dir"]))} for r in loaded]


def make_cpu_figure(loaded, rows, args, out):
    """The return over the last tenth against K, a line per objective; each objective's learning curves per K
    (smoothed over 100k env steps); printed: the return per 100k env steps of every run and the last tenth's."""
    loaded = [analysis.without_resumed(r) for r in loaded]
    ks = sorted({*args.staleness_values, *(r["tags"]["staleness"] for r in loaded)})  # a control's K too
    finals = analysis.aggregate_final(rows, ("variant", "staleness"), "final_return")
    shown = [v for v in VARIANTS if v in args.variants or any(key[0] == v for key in finals)]
    fig, axes = figures.subplots(1 + len(args.variants), "Figure 1 at CPU scale: PPO with artificial staleness", args,
                                 sorted({r["config"]["seed"] for r in loaded}))
    figures.plot_final(axes[0], finals, {v: VARIANTS[v][2] for v in shown}, "staleness K (iterations)",
                       f"return over the last {args.final_frac:.0%} of env steps")
    axes[0].set_xscale("symlog", linthresh=1)
    axes[0].set_xticks(ks, [str(k) for k in ks])
    for ax, variant in zip(axes[1:], args.variants):
        figures.plot_curves_by(ax, loaded, "staleness", ks, lambda k: f"K = {k}", False, smooth_steps=100_000,
                               variant=variant)
        ax.set_title(VARIANTS[variant][2])
    figures.save_figure(fig, out)
    runs = {}  # each run folder once, by K then objective: the K = 0 run serves every objective
    for run in sorted(loaded, key=lambda r: (r["tags"]["staleness"], list(VARIANTS).index(r["tags"]["variant"]))):
        runs.setdefault(run["dir"], run)
    labels = [f"K={r['tags']['staleness']} " + ("(all)" if shared_k0(r) else r["tags"]["variant"])
              + f" seed {r['config']['seed']}" for r in runs.values()]
    table = analysis.window_table(list(runs.values()), labels, 100_000)
    print(f"Mean episodic return per 100,000 env steps\n\n{table}")
    print(f"\nMean return over the last {args.final_frac:.0%} of the env steps, mean over seeds\n\n"
          + analysis.markdown_table(["objective", *[f"K = {k}" for k in ks]],
                                    [[VARIANTS[v][2], *[analysis.cell(finals[v, k]["mean"]) if (v, k) in finals else ""
                                                        for k in ks]] for v in shown]
                                   + [lag_matched(runs.values(), ks, args)]))
    print(f"\nOver the last {args.final_frac:.0%} of the env steps, per iteration: the policy's entropy, the KL of an "
          f"update (approx_kl) and the fraction of samples clipped\n\n" + diagnostics(runs.values(), labels, args))


def shared_k0(run):
    """The K = 0 run that serves the three objectives (not the control's own K = 0 run)."""
    return run["tags"]["staleness"] == 0 and run["tags"]["variant"] in OBJECTIVES


def lag_matched(runs, ks, args):
    """The finals table's last row: fresh PPO (K = 0) after as many updates as a run K stale has made, its return over
    the last tenth's iterations moved K earlier. Whatever K costs beyond the updates it idles shows against this."""
    batch = args.num_envs * args.num_steps
    low, high = (1 - args.final_frac) * args.total_timesteps, args.total_timesteps
    fresh = [run for run in runs if shared_k0(run)]
    means = [np.mean([analysis.window_return(run, low - k * batch, high - k * batch) for run in fresh]) for k in ks]
    return ["fresh PPO after as many updates", *map(analysis.cell, means)]


def diagnostics(runs, labels, args):
    """Markdown: a row per run, the mean entropy, approx_kl and clipfrac of its iterations in the last tenth."""
    low = (1 - args.final_frac) * args.total_timesteps
    columns = ("entropy", "approx_kl", "clipfrac")
    rows = [[label, *[analysis.cell(analysis.column_mean(analysis.in_steps(run["rows"], low, args.total_timesteps), c),
                                    "{:.4f}" if c == "approx_kl" else "{:.3f}") for c in columns]]
            for run, label in zip(runs, labels)]
    return analysis.markdown_table(["run", *columns], rows)


def main(argv=None):
    args = parse_args(argv)
    if args.cpu:
        return sweep.sweep_main(args, build_runs(args), (), "fig1_cpu_summary.csv", "fig1_cpu.png", make_cpu_figure,
                                summarize=cpu_rows)
    return sweep.sweep_main(args, build_runs(args), ("variant", "staleness"), "fig1_summary.csv",
                            "fig1_staleness.png", make_figure)


if __name__ == "__main__":
    main()
