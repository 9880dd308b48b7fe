"""Figure 2 of Hilton et al. (Section 5.2): PPG-EWMA (or PPO-EWMA) at different batch sizes, and the ablations.

`--batch-divisor C` divides the envs by C and applies Section 4's adjustments (Adam step size / sqrt(C),
EWMA centre of mass x C, advantage-normalisation sample size x C, PPG's N_pi x C; 1 policy epoch, as PPG
has: the PPO-EWMA runs pass --update-epochs 1 at every C). Variants, with S the EWMA script (--script):
  all      S --batch-divisor C                  every adjustment (Fig. 2, left)
  no-lr    S --batch-divisor C --no-adjust lr   ablations (Fig. 2, right; App. F Figs 11-14)
  no-prox  S --batch-divisor C --no-adjust prox
  no-adv   S --batch-divisor C --no-adjust adv
  no-ewma  ppg.py (or ppo.py) --batch-divisor C  no EWMA at all, the other adjustments (Fig. 15, "2(d)")
An ablation at C = 1 is the `all` run (nothing to adjust), so ablations run only at C > 1
(--ablation-divisors). Not reproduced: the paper's reference line of PPG with the KL penalty
coefficient divided by 256 (the base coefficient is not stated); and its aux phase from C = 4 on, where it
had gone from 4 workers to 1 and kept a worker's aux minibatch (4 trajectories) at a smaller step size
(App. B): one process of 256 envs keeps C = 1's aux phase (16 trajectories, 5e-4) at every C.

Output in --runs-dir (or --out-dir): run folders, logs/, fig2_batch_size.png (learning curves of `all` per
batch size, smoothed over the same env steps at every C; final return against batch size for
all/no-ewma; the ablations) and fig2_summary.csv (variant, divisor, batch_size, env, seed, final_return,
normalized, ...). Batch size = iteration batch = envs x steps. It also prints the paper's headline
number: the difference in final mean (normalised) return between the largest and the smallest batch
size (paper: 0.052 over the 16 games).

Paper settings (the defaults): ppg_ewma.py, 16 games, hard, 3 seeds, 100M env steps, 256 envs (4
workers x 64) x 256 steps, 8 minibatches, N_pi 32, E_aux 6, divisors 1 4 16 64 256 (down to a single
env). GPU-days per run.

--quick (CPU, 50 min measured on a 2-core Intel Xeon, 2 runs at a time on 1 core each):
starpilot, easy, seeds 1 2, --num-envs 16 --num-steps 64 --num-minibatches 8 --n-pi 2 (a PPG phase is
2,048 env steps at every C, as N_pi is scaled by C), divisors 1 4 16, ablations at 16 only, variants
all/no-lr/no-prox/no-adv, 12,288 steps (6 phases) per run: 12 ppg_ewma.py runs of 7-9 min each
(the auxiliary phase, 6 epochs of both networks, took 67-80% of it). Checks the pipeline only; the
second seed shows how far apart one setting's runs land at this scale.

--cpu (batch size-invariance you can see on a CPU): ppo_ewma.py --update-epochs 1 on starpilot, easy, seed 1, 1M env
steps, the scripts' default 64 envs x 256 steps and 8 minibatches; divisors 1 4 16 (64, 16 and 4 envs) with all
adjustments, and at C = 16 the three ablations: 6 runs with --save-model, 2 at a time (one core each on the 2-core AMD
EPYC, Zen 4), into runs/fig2_cpu: 41 to 145 min a run there, measured (C = 1: 71 min, C = 16: 114), about 6 h in all
(derived; the printed estimate says how it is made). Each run, as soon as it finishes, has its config.json and
progress.csv copied to data/runs/<run folder>/ (--committed); runs finished there are skipped and an interrupted run
goes on from its checkpoint, so the same command continues the sweep in a later session;
`--seeds 2` adds a second seed of each (62 to 72 min a run, two side by side on a 2-core Intel Xeon).
Output, drawn from data/runs alone: docs/figures/fig2_cpu.png ((a) return against env steps at C = 1, 4, 16; (b) C = 16
with each ablation, against C = 16 and C = 1; every curve smoothed over --smooth-steps env steps), printed beside it the
mean return per --smooth-steps window of each run, and data/fig2_cpu_diagnostics.csv (--summary-dir), also printed as
Markdown: per run the adjusted learning_rate, beta_prox and adv_ewma_decay, mean clipfrac and approx_kl over the run and
over the last 10% of --total-timesteps ((900k, 1M]), the return over its first 100k env steps and over that last 10%
(with the standard error of that mean over its iterations), the largest max/min of the advantage normalisation's std
within 100k env steps (the paper finds dropping the adv adjustment hurts once that reaches about 10, App. F.2), and its
wall time.

Resumable: finished runs (exp_name e.g. fig2__ppg_ewma__div4__no-lr, matching config, progress reaching
--total-timesteps) are skipped.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

BASELINES = {"ppg_ewma": "ppg", "ppo_ewma": "ppo"}  # --script: the EWMA script, and its baseline (no-ewma)
NAMES = {"ppg_ewma": "PPG-EWMA", "ppo_ewma": "PPO-EWMA", "ppg": "PPG", "ppo": "PPO"}
VARIANTS = {  # name: (options, label)
    "all": ({}, "all adjustments"),
    "no-lr": ({"no_adjust": ["lr"]}, "no Adam step size adjustment"),
    "no-prox": ({"no_adjust": ["prox"]}, "no EWMA adjustment"),
    "no-adv": ({"no_adjust": ["adv"]}, "no advantage normalisation adjustment"),
    "no-ewma": ({}, "no EWMA, other adjustments"),
}
ABLATIONS = ("no-lr", "no-prox", "no-adv")
PAPER = {"script": "ppg_ewma", "envs": list(sweep.PROCGEN_GAMES), "seeds": [1, 2, 3], "total_timesteps": 100_000_000,
         "distribution_mode": "hard", "num_envs": 256, "num_steps": 256, "num_minibatches": 8,
         "divisors": [1, 4, 16, 64, 256], "variants": list(VARIANTS), "runs_dir": "runs/fig2"}
QUICK = {"envs": ["starpilot"], "seeds": [1, 2], "total_timesteps": 12_288, "distribution_mode": "easy",
         "num_envs": 16, "num_steps": 64, "num_minibatches": 8, "n_pi": 2, "divisors": [1, 4, 16],
         "variants": ["all", *ABLATIONS], "parallel": 2}
CPU = {"script": "ppo_ewma", "envs": ["starpilot"], "seeds": [1], "total_timesteps": 1_000_000,
       "distribution_mode": "easy", "num_envs": 64, "num_steps": 256, "num_minibatches": 8, "divisors": [1, 4, 16],
       "variants": ["all", *ABLATIONS], "parallel": 2, "save_model": True, "smooth_steps": 100_000,
       "committed": sweep.COMMITTED, "out_dir": os.path.join(sweep.ROOT, "docs", "figures"), "summary_dir": sweep.DATA,
       # Measured here at this configuration, one core each, two runs side by side: C = 1 took 4,277 s for 1,015,808
       # steps (237 steps/s), C = 16 6,845 s for 1,000,448 (146 steps/s; a median of 190 an iteration against C = 1's
       # 240, 1.26x the time per step; cpu_seconds assumes 1.4x at C = 16).
       "sps_per_core": {"ppo_ewma": 237},
       "estimate_note": "from the C = 1 and C = 16 runs measured on one core each, two at a time"}


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--script", choices=list(BASELINES), help="the EWMA script (paper: ppg_ewma; --cpu: ppo_ewma)")
    p.add_argument("--divisors", nargs="+", type=sweep.COUNT, metavar="C", help="batch divisors (paper: 1 4 16 64 256)")
    p.add_argument("--ablation-divisors", nargs="+", type=sweep.COUNT, metavar="C",
                   help="divisors at which the ablations run (default: every divisor > 1; --quick, --cpu: the largest)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                   help="default: all five (--quick, --cpu: all and the three ablations)")
    p.add_argument("--smooth-steps", type=sweep.COUNT, metavar="STEPS",
                   help="learning curves: moving average over this many env steps at every C (default: --smooth "
                        "iterations at C = 1; --cpu: 100000)")
    p.add_argument("--cpu", action="store_true", help="the 1M-step PPO-EWMA preset described below")
    sweep.add_ppg_flags(p)
    args = sweep.parse_sweep_args(p, argv, PAPER, QUICK, tiny={"divisors": [1, 4]}, cpu=CPU)  # tiny: 4 envs
    if args.ablation_divisors is None:  # --quick, --cpu: only at the largest divisor
        larger = [c for c in args.divisors if c > 1]
        args.ablation_divisors = larger[-1:] if args.quick or args.tiny or args.cpu else larger
    for flag, divisors in (("--divisors", args.divisors), ("--ablation-divisors", args.ablation_divisors)):
        bad = [c for c in divisors if args.num_envs % c]
        if bad:
            p.error(f"argument {flag}: each must divide --num-envs ({args.num_envs}), got {sorted(bad)}")
    if args.smooth_steps is None:
        args.smooth_steps = args.smooth * args.num_envs * args.num_steps
    return args


def script_of(variant, args):
    return BASELINES[args.script] if variant == "no-ewma" else args.script


def variant_label(variant, args):
    return (f"{NAMES[script_of(variant, args)]}, " if variant in ("all", "no-ewma") else "") + VARIANTS[variant][1]


def envs_label(args, c):
    return f"{args.num_envs // c} env{'s' if args.num_envs // c > 1 else ''} (C={c})"


def build_runs(args):
    runs = []
    for variant in args.variants:
        options, script = VARIANTS[variant][0], script_of(variant, args)
        divisors = args.divisors
        if variant in ABLATIONS:  # C = 1 is the `all` run; plus the divisors where the ablation is run
            divisors = sorted(({1} & set(args.divisors)) | set(args.ablation_divisors))
        for c in divisors:
            name = f"fig2__{script}__div{c}"
            opts = {**sweep.base_options(args, script), "batch_divisor": c}
            if script.startswith("ppo"):  # PPO's default is 3 epochs; Section 4 assumes 1, at every C alike
                opts["update_epochs"] = 1
            if c > 1 and options:
                name += "__" + "__".join(f"no-{x}" for x in options["no_adjust"])
                opts.update(options)
            for env in args.envs:
                for seed in args.seeds:
                    runs.append(sweep.Job(script, env, seed, name, args.total_timesteps, opts,
                                          {"variant": variant, "divisor": c,
                                           "batch_size": args.num_envs // c * args.num_steps}))
    return runs


def invariance_gap(finals, variant="all"):
    """Mean final return at the largest batch size minus at the smallest (the paper's 0.052)."""
    points = sorted((size, s["mean"]) for (v, size), s in finals.items() if v == variant)
    return points[-1][1] - points[0][1] if len(points) > 1 else float("nan")


def make_figure(loaded, rows, args, out):
    metric = analysis.metric_name(rows)
    finals = analysis.aggregate_final(rows, ("variant", "batch_size"), metric)
    sizes = sorted({size for _, size in finals})
    fig, axes = figures.subplots(3, "Figure 2: batch size-invariance", args)
    figures.plot_curves_by(axes[0], loaded, "divisor", sorted(args.divisors), lambda c: envs_label(args, c),
                           metric == "normalized", smooth_steps=args.smooth_steps, variant="all")
    axes[0].set_title(f"{variant_label('all', args)} (smoothed over {args.smooth_steps:,} env steps)",
                      fontsize="medium")
    xlabel = f"iteration batch size (envs x {args.num_steps} steps)"
    figures.plot_final(axes[1], finals, {v: variant_label(v, args) for v in ("all", "no-ewma")}, xlabel,
                       figures.final_label(metric))
    axes[1].set_title(f"mean +- std over seeds; gap largest-smallest {invariance_gap(finals):+.3f}")
    figures.plot_final(axes[2], finals, {v: variant_label(v, args) for v in ("all", *ABLATIONS)}, xlabel,
                       figures.final_label(metric))
    axes[2].set_title("ablations: all but one adjustment")
    for ax in axes[1:]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
    figures.save_figure(fig, out)
    print(f"{figures.final_label(metric)} at the largest minus at the smallest batch size (all adjustments): "
          f"{invariance_gap(finals):+.3f} (paper: 0.052 in magnitude, 16 hard games, 100M steps)")


# --- --cpu: learning curves and per-run diagnostics ------------------------------------------------------
FIRST_STEPS = 100_000  # "first-100k return": how fast each run starts, beside where it ends; adv_std's window
DIAGNOSTICS = (  # CSV column, Markdown header, Markdown format
    ("variant", "variant", str), ("C", "C", str), ("seed", "seed", str), ("envs", "envs", str),
    ("learning_rate", "learning_rate", "{:.3g}".format), ("beta_prox", "beta_prox", "{:.4f}".format),
    ("adv_ewma_decay", "adv_ewma_decay", "{:.4f}".format), ("clipfrac", "clipfrac", "{:.3f}".format),
    ("clipfrac_final", "clipfrac, last {final}", "{:.3f}".format), ("approx_kl", "approx_kl", "{:.4f}".format),
    ("approx_kl_final", "approx_kl, last {final}", "{:.4f}".format),
    ("return_first_100k", "return, first 100k", "{:.2f}".format),
    ("final_return", "return, last {final}", "{:.2f}".format), ("final_return_sem", "+- s.e.", "{:.2f}".format),
    ("adv_std_swing", "adv_std max/min in 100k", "{:.2f}".format), ("wall_time_s", "wall time", sweep.format_wall_time))


def table_runs(loaded):
    """Each run folder once (an ablation at C = 1 is the `all` run), by C, then variant, then seed."""
    order, runs = {v: i for i, v in enumerate(VARIANTS)}, {}
    for run in sorted(loaded, key=lambda r: (r["tags"]["divisor"], order[r["tags"]["variant"]], r["config"]["seed"])):
        runs.setdefault(run["dir"], run)
    return list(runs.values())


def run_label(run, seeds):
    variant = run["tags"]["variant"]
    return (f"C={run['tags']['divisor']}" + ("" if variant == "all" else f" {variant}") +
            (f" seed {run['config']['seed']}" if len(seeds) > 1 else ""))


def diagnostics_rows(loaded, args):
    """One row per run folder (table_runs): its variant and C, the envs and adjusted hyperparameters from its
    config.json, and analysis.run_diagnostics over env steps (the first iteration after a resume left out)."""
    rows = []
    for run in table_runs([analysis.without_resumed(r) for r in loaded]):
        config = run["config"]
        d = analysis.run_diagnostics(run, args.final_frac, FIRST_STEPS, args.total_timesteps)
        rows.append({"variant": run["tags"]["variant"], "C": run["tags"]["divisor"], "seed": config["seed"],
                     "envs": config["num_envs"], "learning_rate": config["learning_rate"],
                     "beta_prox": config.get("beta_prox", float("nan")), "adv_ewma_decay": config["adv_ewma_decay"],
                     "clipfrac": d["clipfrac"], "clipfrac_final": d["clipfrac_last"], "approx_kl": d["approx_kl"],
                     "approx_kl_final": d["approx_kl_last"], "return_first_100k": d["return_first"],
                     "final_return": d["return_last"], "final_return_sem": d["return_last_sem"],
                     "adv_std_swing": d["adv_std_swing"], "wall_time_s": d["time_s"],
                     "run": os.path.basename(os.path.normpath(run["dir"]))})  # not the path: the CSV is committed
    return rows


def diagnostics_markdown(rows, args):
    final = f"{args.final_frac:.0%}"
    return analysis.markdown_table([header.format(final=final) for _, header, _ in DIAGNOSTICS],
                                   [[fmt(row[key]) for key, _, fmt in DIAGNOSTICS] for row in rows])


def shown_runs(args):
    """What the --cpu figure and table show: the preset's design joined with this command's, for every seed
    of this figure committed so far or asked for. A command that adds a second seed of two runs then redraws the
    whole figure, rather than one of those two runs alone."""
    seeds = set(args.seeds)
    for run_dir in analysis.find_run_dirs([args.committed] if args.committed else []):
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        if config.get("exp_name", "").startswith("fig2__"):  # not the other figures' runs in data/runs
            seeds.add(config.get("seed"))
    divisors = sorted(set(args.divisors) | set(args.preset["divisors"]))
    design = {"seeds": sorted(seeds), "divisors": divisors, "ablation_divisors": sorted(
        set(args.ablation_divisors) | {max(args.preset["divisors"])} - {1}),
        "variants": list(dict.fromkeys([*args.preset["variants"], *args.variants]))}
    return build_runs(argparse.Namespace(**{**vars(args), **design}))


def make_cpu_figure(loaded, rows, args, out):
    """(a) the return against env steps at every C, all adjustments; (b) at the largest C each ablation,
    against all adjustments at that C and at C = 1. Every curve is smoothed over the same env steps. Raw
    episodic return: one game, and the diagnostics table is in the same unit. In the runs of analysis.RESUMED the
    first iteration after the resume played fresh levels: left out, as in every table."""
    loaded = [analysis.without_resumed(r) for r in loaded]
    divisors, window = sorted({r["tags"]["divisor"] for r in loaded}), args.smooth_steps
    largest, seeds = divisors[-1], sorted({r["config"]["seed"] for r in loaded})  # the seeds drawn, not asked for
    fig, axes = figures.subplots(2, f"Figure 2 at CPU scale: {NAMES[args.script]}, batch size-invariance", args, seeds)
    figures.plot_curves_by(axes[0], loaded, "divisor", divisors, lambda c: envs_label(args, c), False,
                           smooth_steps=window, variant="all")
    axes[0].set_title(f"(a) all adjustments, smoothed over {window:,} env steps at every C", fontsize="medium")
    figures.plot_curves_by(axes[1], loaded, "variant", ["all", *ABLATIONS], lambda v: f"C={largest}: {VARIANTS[v][1]}",
                           False, smooth_steps=window, divisor=largest)
    at_1 = [r for r in loaded if r["tags"]["variant"] == "all" and r["tags"]["divisor"] == 1]
    figures.plot_band(axes[1], analysis.env_mean_curve(at_1, normalize=False, smooth_steps=window),
                      "C=1: all adjustments", "black", "--")
    axes[1].set_title(f"(b) ablations at C={largest}: all adjustments but one", fontsize="medium")
    figures.save_figure(fig, out)
    runs = table_runs(loaded)
    print(f"Mean episodic return per {window:,} env steps (the figure's smoothing window)\n")
    print(analysis.window_table(runs, [run_label(run, seeds) for run in runs], window) + "\n")
    print(diagnostics_markdown(rows, args))


def main(argv=None):
    args = parse_args(argv)
    runs = build_runs(args)
    if args.cpu:
        return sweep.sweep_main(args, runs, (), "fig2_cpu_diagnostics.csv", "fig2_cpu.png", make_cpu_figure,
                                summarize=diagnostics_rows, shown=shown_runs(args))
    return sweep.sweep_main(args, runs, ("variant", "divisor", "batch_size"), "fig2_summary.csv",
                            "fig2_batch_size.png", make_figure)


if __name__ == "__main__":
    main()
