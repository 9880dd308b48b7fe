"""Which of four groups of choices, where the official code and CleanRL differ, make ppo.py learn like CleanRL's
ppo_procgen.py: 1M-step StarPilot runs, each group at either choice, committed to data/runs.

    python experiments/tools/cleanrl_ablation.py            # train what data/runs lacks (resumes a cut run), the table
    python experiments/tools/cleanrl_ablation.py --dry-run  # the commands of the runs still to do
    python experiments/tools/cleanrl_ablation.py --table    # train nothing: the table from data/runs

The groups, each at the official code's choice or CleanRL's (the scripts' defaults):
    mb  minibatches      --minibatch-by env (whole trajectories of 8 envs)  | step (2,048 random steps)
    vf  value weight     --vf-coef 0.5 --no-clip-vloss --norm-reward-gamma 0.99 | 0.25 --clip-vloss 0.999
    gc  grad clip, eps   --max-grad-norm 0 --adam-eps 1e-8                  | 0.5, 1e-5
    init initialisation  --init normed (per-unit weight norms)              | pytorch (orthogonal heads)
Every run passes every flag of every group, so a run means the same whatever the scripts' defaults become.
The stages (STAGES: the groups at CleanRL's choice, and the seed), each chosen after the one before had run, so the
runs are not one planned design: 1, mb+vf+gc (seed 1) and none (seed 2); 2, all four (seed 1); 3, init alone (seed
2); 4, all four (seed 2); 5, leave one out: all four but mb, vf or gc (seeds 3-5), which with stage 1's first run
(init left out) says which groups the result needs. docs/results.md has the tables and what they show.
Each run took 73-147 min on both cores of a 2-core AMD EPYC (medians 218-228 env steps/s; --table), one at a time.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/
import analysis  # noqa: E402
import sweep  # noqa: E402

# group: its flags (their values: sweep.OFFICIAL_CODE's or sweep.CLEANRL's)
GROUPS = {"mb": ("minibatch_by",), "vf": ("vf_coef", "clip_vloss", "norm_reward_gamma"),
          "gc": ("max_grad_norm", "adam_eps"), "init": ("init",)}
# (groups switched to CleanRL's, seed) of each stage
STAGES = {1: [(("mb", "vf", "gc"), 1), ((), 2)],
          2: [(("mb", "vf", "gc", "init"), 1)],
          3: [(("init",), 2)],
          4: [(("mb", "vf", "gc", "init"), 2)],
          5: [(("vf", "gc", "init"), 3), (("mb", "gc", "init"), 4), (("mb", "vf", "init"), 5)]}


# The committed 1M-step run of seed 1 at the official code's choice in each group (ppo.py's defaults when it ran)
DEFAULT_RUN = sweep.Job("ppo", "starpilot", 1, "ppo", 1_000_000, sweep.OFFICIAL_CODE,
                        tags={"groups": "official", "stage": 0})


def exp_name(script, groups):
    return f"ablation__{script}__{'+'.join(groups) or 'official'}"


def plan(stages, script="ppo", total_timesteps=1_000_000):
    runs = []
    for stage in stages:
        for groups, seed in STAGES[stage]:
            options = {"save_model": True}
            for group, flags in GROUPS.items():
                options.update({k: (sweep.CLEANRL if group in groups else sweep.OFFICIAL_CODE)[k] for k in flags})
            runs.append(sweep.Job(script, "starpilot", seed, exp_name(script, groups), total_timesteps, options,
                                  tags={"groups": "+".join(groups) or "official", "stage": stage}))
    return runs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", type=int, nargs="+", choices=sorted(STAGES), default=sorted(STAGES),
                   help="which runs (see below); default: all")
    p.add_argument("--runs-dir", default=os.path.join(sweep.ROOT, "runs", "ablation"), help="where runs train")
    p.add_argument("--dry-run", action="store_true", help="print the commands of the runs still to do")
    p.add_argument("--table", action="store_true", help="train nothing: the table from data/runs")
    args = p.parse_args(argv)
    runs = plan(args.stage)
    todo = [r for r in runs if not sweep.is_finished(r, sweep.COMMITTED)]
    if args.dry_run:
        print(f"{len(runs)} runs planned, {len(todo)} still to train (the others are committed in {sweep.COMMITTED})")
        for run in todo:
            print(" ".join(sweep.launch_command(run, args.runs_dir)))
        return todo
    if not args.table:
        failed = sweep.run_all(runs, args.runs_dir, committed=sweep.COMMITTED)
        if failed:
            sys.exit(f"{len(failed)} run(s) failed; see {os.path.join(args.runs_dir, 'logs')}")
    loaded = sweep.select_runs([DEFAULT_RUN] + runs, sweep.COMMITTED)
    print(tables(loaded) if loaded else "no finished runs in data/runs yet")
    return loaded


def tables(loaded, width=100_000):
    """Markdown: the return per window of env steps beside CleanRL's; then each run's flags (those of the groups
    switched to CleanRL's), mean clip fraction and approx_kl, wall time and median speed."""
    labels = [f"{r['tags']['groups']} seed {r['config']['seed']}" for r in loaded]
    loaded = [{**run, "rows": analysis.in_steps(run["rows"], 0, run["config"]["total_timesteps"])}
              for run in map(analysis.without_resumed, loaded)]  # to 1M (the 62nd iteration ends past it)
    rows = []
    for label, run in zip(labels, loaded):
        d = analysis.run_diagnostics(run)
        groups = [group for group in run["tags"]["groups"].split("+") if group in GROUPS]
        flags = {k: sweep.CLEANRL[k] for group in groups for k in GROUPS[group]}
        rows.append([label, " ".join(sweep.option_tokens(flags)) or "(none)", analysis.cell(d["clipfrac"], "{:.3f}"),
                     analysis.cell(d["approx_kl"], "{:.4f}"), sweep.format_wall_time(d["time_s"]),
                     analysis.cell(d["sps_median"], "{:.0f}")])
    cleanrl = analysis.cleanrl_references(sweep.CLEANRL_RUNS, width)
    return (f"Mean episodic return per {width:,} env steps (the first iteration after a resume left out)\n\n"
            f"{analysis.window_table(loaded, labels, width, cleanrl)}\n\n"
            + analysis.markdown_table(["run", "CleanRL's flags", "clipfrac", "approx_kl", "wall time",
                                       "env steps/s (median)"], rows))


if __name__ == "__main__":
    main()
