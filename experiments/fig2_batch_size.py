"""Figure 2 of Hilton et al. (Section 5.2): PPG-EWMA at different batch sizes, and the ablations.

`--batch-divisor C` divides the envs by C and applies Section 4's adjustments (Adam step size / sqrt(C),
EWMA centre of mass x C, advantage-normalisation sample size x C, N_pi x C; 1 policy epoch as PPG has).
Variants:
  all      ppg_ewma.py --batch-divisor C                  every adjustment (Fig. 2, left)
  no-lr    ppg_ewma.py --batch-divisor C --no-adjust lr   ablations (Fig. 2, right; App. F Figs 11-14)
  no-prox  ppg_ewma.py --batch-divisor C --no-adjust prox
  no-adv   ppg_ewma.py --batch-divisor C --no-adjust adv
  ppg      ppg.py --batch-divisor C                       no EWMA at all, just PPG (Fig. 15, "2(d)")
An ablation at C = 1 is the `all` run (nothing to adjust), so ablations run only at C > 1
(--ablation-divisors). Not reproduced: the paper's reference line of PPG with the KL penalty
coefficient divided by 256 (the base coefficient is not stated).

Output in --runs-dir: run folders, logs/, fig2_batch_size.png (learning curves of `all` per batch size;
final return against batch size for all/ppg; the ablations) and fig2_summary.csv (variant, divisor,
batch_size, env, seed, final_return, normalized, ...). Batch size = iteration batch = envs x steps.
It also prints the paper's headline number: the difference in final mean (normalised) return between
the largest and the smallest batch size (paper: 0.052 over the 16 games).

Paper settings (the defaults): 16 games, hard, 3 seeds, 100M env steps, 256 envs (4 workers x 64) x 256
steps, 8 minibatches, N_pi 32, E_aux 6, divisors 1 4 16 64 256 (down to a single env). GPU-days per run.

--quick (CPU, 44 min measured on the 2-core dev machine, 2 runs at a time on 1 core each):
starpilot, easy, seeds 1 2, --num-envs 16 --num-steps 64 --num-minibatches 8 --n-pi 2 (a PPG phase is
2,048 env steps at every C, as N_pi is scaled by C), divisors 1 4 16, ablations at 16 only, variants
all/no-lr/no-prox/no-adv, 12,288 steps (6 phases) per run: 12 ppg_ewma.py runs of 7-8 min each
(the auxiliary phase, 6 epochs of both networks, took 67-79% of it). Checks the pipeline only; the
second seed shows how far apart one setting's runs land at this scale.

Resumable: finished runs (exp_name e.g. fig2__ppg_ewma__div4__no-lr, matching config, progress reaching
--total-timesteps) are skipped.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import figures  # noqa: E402
import sweep  # noqa: E402

VARIANTS = {  # name: (script, options, label)
    "all": ("ppg_ewma", {}, "PPG-EWMA, all adjustments"),
    "no-lr": ("ppg_ewma", {"no_adjust": ["lr"]}, "no Adam step size adjustment"),
    "no-prox": ("ppg_ewma", {"no_adjust": ["prox"]}, "no EWMA adjustment"),
    "no-adv": ("ppg_ewma", {"no_adjust": ["adv"]}, "no advantage normalisation adjustment"),
    "ppg": ("ppg", {}, "PPG (no EWMA), other adjustments"),
}
ABLATIONS = ("no-lr", "no-prox", "no-adv")
PAPER = {"envs": list(sweep.PROCGEN_GAMES), "seeds": [1, 2, 3], "total_timesteps": 100_000_000,
         "distribution_mode": "hard", "num_envs": 256, "num_steps": 256, "num_minibatches": 8,
         "divisors": [1, 4, 16, 64, 256], "variants": list(VARIANTS), "runs_dir": "runs/fig2"}
QUICK = {"envs": ["starpilot"], "seeds": [1, 2], "total_timesteps": 12_288, "distribution_mode": "easy",
         "num_envs": 16, "num_steps": 64, "num_minibatches": 8, "n_pi": 2, "divisors": [1, 4, 16],
         "variants": ["all", *ABLATIONS], "parallel": 2}


def parse_args(argv=None):
    p = sweep.sweep_parser(__doc__.split("\n\n")[0], __doc__.split("\n\n", 1)[1])
    p.add_argument("--divisors", nargs="+", type=int, metavar="C", help="batch divisors (paper: 1 4 16 64 256)")
    p.add_argument("--ablation-divisors", nargs="+", type=int, metavar="C",
                   help="divisors at which the ablations run (default: every divisor > 1; --quick: the largest)")
    p.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="default: all five")
    sweep.add_ppg_flags(p)
    args = sweep.parse_sweep_args(p, argv, PAPER, QUICK, tiny={"divisors": [1, 4]})  # the tiny preset has 4 envs
    if args.ablation_divisors is None:  # --quick: only at the largest divisor
        larger = [c for c in args.divisors if c > 1]
        args.ablation_divisors = larger[-1:] if args.quick or args.tiny else larger
    bad = [c for c in set(args.divisors) | set(args.ablation_divisors) if c < 1 or args.num_envs % c]
    if bad:
        p.error(f"argument --divisors: each must divide --num-envs ({args.num_envs}), got {sorted(bad)}")
    return args


def build_runs(args):
    runs = []
    for variant in args.variants:
        script, options, _ = VARIANTS[variant]
        divisors = args.divisors
        if variant in ABLATIONS:  # C = 1 is the `all` run; plus the divisors where the ablation is run
            divisors = sorted(({1} & set(args.divisors)) | set(args.ablation_divisors))
        for c in divisors:
            name = f"fig2__{script}__div{c}"
            opts = {**sweep.base_options(args, script), "batch_divisor": c}
            if c > 1 and options:
                name += "__" + "__".join(f"no-{x}" for x in options["no_adjust"])
                opts.update(options)
            for env in args.envs:
                for seed in args.seeds:
                    runs.append(sweep.Run(script, env, seed, name, args.total_timesteps, opts,
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
    # An iteration at divisor C is C times fewer env steps: smooth over C times as many iterations, so every
    # curve averages the same number of env steps and the smaller batches do not look noisier for that alone.
    figures.plot_curves_by(axes[0], loaded, "divisor", sorted(args.divisors),
                           lambda c: f"{args.num_envs // c} env{'s' if args.num_envs // c > 1 else ''} (C={c})",
                           lambda c: args.smooth * c, metric == "normalized", variant="all")
    axes[0].set_title(f"PPG-EWMA, all adjustments (smoothed over {args.smooth * args.num_envs * args.num_steps:,} "
                      "env steps)", fontsize="medium")
    xlabel = f"iteration batch size (envs x {args.num_steps} steps)"
    figures.plot_final(axes[1], finals, {v: VARIANTS[v][2] for v in ("all", "ppg")}, xlabel,
                       figures.final_label(metric))
    axes[1].set_title(f"mean +- std over seeds; gap largest-smallest {invariance_gap(finals):+.3f}")
    figures.plot_final(axes[2], finals, {v: VARIANTS[v][2] for v in ("all", *ABLATIONS)}, xlabel,
                       figures.final_label(metric))
    axes[2].set_title("ablations: all but one adjustment")
    for ax in axes[1:]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
    figures.save_figure(fig, out)
    print(f"{figures.final_label(metric)} at the largest minus at the smallest batch size (all adjustments): "
          f"{invariance_gap(finals):+.3f} (paper: 0.052 in magnitude, 16 hard games, 100M steps)")


def main(argv=None):
    args = parse_args(argv)
    return sweep.sweep_main(args, build_runs(args), ("variant", "divisor", "batch_size"), "fig2_summary.csv",
                            "fig2_batch_size.png", make_figure)


if __name__ == "__main__":
    main()
