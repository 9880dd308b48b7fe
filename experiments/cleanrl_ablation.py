"""Why ppo.py fell behind CleanRL's ppo_procgen.py after 400k env steps: 1M-step StarPilot runs that switch
groups of the official code's choices to CleanRL's, committed to docs/runs.

    python experiments/cleanrl_ablation.py             # train what docs/runs lacks (resumes a cut run), then the table
    python experiments/cleanrl_ablation.py --dry-run   # the commands of the runs still to do
    python experiments/cleanrl_ablation.py --table     # train nothing: the table from docs/runs

The groups, each either the official code's choice (the defaults of the runs' time) or CleanRL's:
    mb  minibatches      --minibatch-by env (whole trajectories of 8 envs)  | step (2,048 random steps)
    vf  value weight     --vf-coef 0.5 --no-clip-vloss --norm-reward-gamma 0.99 | 0.25 --clip-vloss 0.999
    gc  grad clip, eps   --max-grad-norm 0 --adam-eps 1e-8                  | 0.5, 1e-5
Every run passes every flag of every group, so a run means the same whatever the scripts' defaults become.
Stage 1: all three (seed 1) and none (seed 2). Stage 2, the rest of the 2^3 design, a new seed per run:
each group alone and each pair. With the committed 1M-step default run of seed 1 the eight corners are
covered. Each run takes ~45-60 min on both cores of the 2-core machine; they run one at a time.
"""
import argparse
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402
import sweep  # noqa: E402

COMMITTED = os.path.join(sweep.ROOT, "docs", "runs")
GROUPS = {  # group: (official code, CleanRL)
    "mb": ({"minibatch_by": "env"}, {"minibatch_by": "step"}),
    "vf": ({"vf_coef": 0.5, "clip_vloss": False, "norm_reward_gamma": 0.99},
           {"vf_coef": 0.25, "clip_vloss": True, "norm_reward_gamma": 0.999}),
    "gc": ({"max_grad_norm": 0.0, "adam_eps": 1e-8}, {"max_grad_norm": 0.5, "adam_eps": 1e-5}),
}
# (groups switched to CleanRL's, seed): stage 1, then stage 2 with a new seed per run
STAGES = {1: [(("mb", "vf", "gc"), 1), ((), 2)],
          2: [(groups, seed) for seed, groups in zip(itertools.count(3), [("mb",), ("vf",), ("gc",), ("mb", "vf"),
                                                                            ("mb", "gc"), ("vf", "gc")])]}


def exp_name(script, groups):
    return f"ablation__{script}__{'+'.join(groups) or 'official'}"


def plan(stages, script="ppo", total_timesteps=1_000_000):
    runs = []
    for stage in stages:
        for groups, seed in STAGES[stage]:
            options = {"save_model": True}
            for group, (official, cleanrl) in GROUPS.items():
                options.update(cleanrl if group in groups else official)
            runs.append(sweep.Job(script, "starpilot", seed, exp_name(script, groups), total_timesteps, options,
                                  tags={"groups": "+".join(groups) or "official", "stage": stage}))
    return runs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", type=int, nargs="+", choices=sorted(STAGES), default=[1], help="which runs (see below)")
    p.add_argument("--runs-dir", default=os.path.join(sweep.ROOT, "runs", "ablation"), help="where runs train")
    p.add_argument("--dry-run", action="store_true", help="print the commands of the runs still to do")
    p.add_argument("--table", action="store_true", help="train nothing: the table from docs/runs")
    args = p.parse_args(argv)
    runs = plan(args.stage)
    todo = [r for r in runs if not sweep.is_finished(r, COMMITTED)]
    if args.dry_run:
        for run in todo:
            print(" ".join(sweep.launch_command(run, args.runs_dir)))
        return todo
    if not args.table:
        failed = sweep.run_all(runs, args.runs_dir, committed=COMMITTED)
        if failed:
            sys.exit(f"{len(failed)} run(s) failed; see {os.path.join(args.runs_dir, 'logs')}")
    loaded = sweep.select_runs(runs, COMMITTED)
    print(analysis.window_table(loaded, [r["tags"]["groups"] + f" seed {r['config']['seed']}" for r in loaded],
                                100_000) if loaded else "no finished runs in docs/runs yet")
    return loaded


if __name__ == "__main__":
    main()
