"""Running a figure's sweep: the training runs it plans, resumably, several at a time; and the command
line that the figure runners (fig1_staleness.py, fig2_batch_size.py, fig4_ewma_vs_baseline.py) share.

    runs      Job (one planned training run), command(), folders_of(), find_finished() / is_finished(),
              find_resumable(), launch_command(), commit(), select_runs(), core_slots(), run_all():
              resumable, P runs at a time, each pinned to its own cores
    CLI       sweep_parser() / parse_sweep_args(): the flags every runner shares, with its presets;
              base_options(); refuse_what_a_script_would(): every run's flags as its script parses them,
              before any starts; run_sweep() / sweep_main(): train, then summary CSV and figure

A runner parses its flags, plans its Runs and hands them to sweep_main() with a function that draws its
figure (figures.py) from the loaded runs and their summary rows (analysis.py).

A run is identified by (env_id, exp_name, seed); each runner encodes the configuration in the
exp_name (e.g. `fig1__ppo__old-recent__stale4`). A run counts as done when a folder
`<runs-dir>/<env>__<exp-name>__<seed>__<time>/` exists whose config.json matches the flags the sweep
would pass and whose progress.csv reaches the requested total_timesteps as the script rounds it up
(whole iterations; PPG: whole phases); done runs are never started again, so an interrupted sweep is
continued by running the same command again. A run started with --save-model that stopped half-way
(its folder has a checkpoint.pt) goes on from its checkpoint, `<script>.py --resume <folder>`,
instead of starting again from scratch.

With --committed DIR (a preset may set it, e.g. data/runs), each run's config.json and progress.csv
(never its checkpoint or videos) are copied to DIR/<run folder name>/ as soon as it finishes; runs
finished there are skipped, and the figure is drawn from there (and the preset's other record
folders) alone, so the same command continues a sweep in a fresh checkout whose runs/ folder is
empty.
"""
import argparse
import contextlib
import csv
import dataclasses
import glob
import importlib
import io
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time

import analysis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from ppo import PROCGEN_GAMES  # noqa: E402  (the scripts' --env-id choices)

SCRIPTS = ("ppo", "ppo_ewma", "ppg", "ppg_ewma")
CHECKPOINT = "checkpoint.pt"  # what the scripts write with --save-model
DATA = os.path.join(ROOT, "data")  # what the repository keeps of runs: data/README.md
COMMITTED = os.path.join(DATA, "runs")  # finished runs' config.json and progress.csv
GPU_RUNS = os.path.join(COMMITTED, "gpu")  # those made on a lent GPU (experiments/tools/gpu_check.sh)
CLEANRL_RUNS = os.path.join(DATA, "cleanrl")  # CleanRL's own scripts run as controls: their episodes, a CSV per run


# --- One run of a training script ----------------------------------------------------------------------
# Flags whose value in config.json is the one after Section 4's batch-size-invariance adjustments, so
# not the value passed on the command line (num_envs is checked as num_envs * batch_divisor instead).
ADJUSTED = {"learning_rate", "adv_ewma_decay", "beta_prox", "n_pi"}
NOT_CHECKED = {"cuda"}  # the device does not change what a run is
# The official code's choice wherever CleanRL's differs, and CleanRL's, the scripts' defaults but for PPG's weights
# (experiments/tools/cleanrl_ablation.py measures them): the paper's figures were made with the official code's, so
# the figure runners pass them all, and the runs mean the same whatever the defaults.
OFFICIAL_CODE = {"minibatch_by": "env", "vf_coef": 0.5, "clip_vloss": False, "norm_reward_gamma": 0.99,
                 "max_grad_norm": 0.0, "adam_eps": 1e-8, "init": "normed"}
CLEANRL = {"minibatch_by": "step", "vf_coef": 0.25, "clip_vloss": True, "norm_reward_gamma": 0.999,
           "max_grad_norm": 0.5, "adam_eps": 1e-5, "init": "pytorch"}
# The scripts' defaults of those flags: CleanRL's choices, but PPG's weights (the official code's). A preset that runs
# the scripts at their defaults ("defaults": True) names them on the command line, so that a run made with other
# values is not taken for one of its runs.
DEFAULTS = {script: CLEANRL | ({"init": "normed"} if script.startswith("ppg") else {}) for script in SCRIPTS}
# The README's runs: StarPilot (easy), 1M env steps, the defaults, these seeds and --exp-name (ppo.py's were made by
# experiments/tools/cleanrl_ablation.py with all four groups at CleanRL's choice, the same command but for the name).
README_EXP_NAMES = {"ppo": "ablation__ppo__mb+vf+gc+init", "ppo_ewma": "ppo_ewma", "ppg": "ppg_init_normed",
                    "ppg_ewma": "ppg_ewma"}
README_SEEDS = {"ppo": (1, 2), "ppo_ewma": (1, 2), "ppg": (1,), "ppg_ewma": (1,)}  # PPG: 4.5x PPO's time per env step


def readme_runs(total_timesteps=1_000_000, scripts=SCRIPTS):
    return [Job(script, "starpilot", seed, README_EXP_NAMES[script], total_timesteps,
                {"save_model": True, **DEFAULTS[script]}) for script in scripts for seed in README_SEEDS[script]]


# Flags that older committed runs' config.json lack, with the value those runs ran at: a config.json without the key
# is read as having it.
ADDED = {k: OFFICIAL_CODE[k] for k in ("clip_vloss", "adam_eps", "norm_reward_gamma", "init")}


@dataclasses.dataclass
class Job:
    """One training run: `python <script>.py --env-id ENV --seed S --exp-name NAME --total-timesteps T <options>`.

    options maps argparse dest names to values: True is a bare flag, False a `--no-` flag, a list a
    repeated flag (e.g. no_adjust=["lr"]). tags are labels for the analysis (variant, staleness, ...).
    """
    script: str
    env_id: str
    seed: int
    exp_name: str
    total_timesteps: int
    options: dict = dataclasses.field(default_factory=dict)
    tags: dict = dataclasses.field(default_factory=dict)
    extra: list = dataclasses.field(default_factory=list)  # raw tokens appended to the command (--extra)

    @property
    def key(self):
        return (self.env_id, self.exp_name, self.seed)


def option_tokens(options):
    tokens = []
    for dest, value in options.items():
        flag = "--" + dest.replace("_", "-")
        if value is True:
            tokens.append(flag)
        elif value is False:
            tokens.append("--no-" + dest.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            for item in value:
                tokens += [flag, str(item)]
        else:
            tokens += [flag, str(value)]
    return tokens


def command(run, runs_dir, python=None):
    """The argv list that trains `run` into `runs_dir`."""
    return ([python or sys.executable, os.path.join(ROOT, f"{run.script}.py"), "--env-id", run.env_id,
             "--seed", str(run.seed), "--exp-name", run.exp_name, "--total-timesteps", str(run.total_timesteps),
             "--runs-dir", os.path.abspath(runs_dir)] + option_tokens(run.options) + list(run.extra))


def _same(recorded, wanted):
    if isinstance(wanted, (list, tuple)):
        return sorted(map(str, recorded or [])) == sorted(map(str, wanted))
    if isinstance(wanted, bool):
        return bool(recorded) == wanted
    try:
        return math.isclose(float(recorded), float(wanted), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(recorded) == str(wanted)


def config_matches(config, run):
    """Is `config` (a config.json) the configuration `run` asks for?"""
    config = {**ADDED, **config}
    if (config.get("env_id"), config.get("exp_name"), config.get("seed")) != run.key:
        return False
    for dest, wanted in run.options.items():
        if dest in ADJUSTED or dest in NOT_CHECKED:
            continue
        if dest == "num_envs":
            if int(config.get("num_envs", -1)) * int(config.get("batch_divisor", 1)) != int(wanted):
                return False
        elif not _same(config.get(dest), wanted):
            return False
    return True


def last_global_step(run_dir):
    try:
        with open(os.path.join(run_dir, "progress.csv")) as f:
            rows = list(csv.DictReader(f))
        return int(float(rows[-1]["global_step"])) if rows else 0
    except (OSError, KeyError, ValueError, IndexError):
        return 0


def folders_of(run, runs_dir):
    """(folder, config) of every folder in runs_dir whose config.json is `run`'s configuration, newest first."""
    pattern = os.path.join(runs_dir, f"{run.env_id}__{run.exp_name}__{run.seed}__*")
    for run_dir in sorted(glob.glob(pattern), key=analysis.started, reverse=True):
        try:
            with open(os.path.join(run_dir, "config.json")) as f:
                config = json.load(f)
        except (OSError, ValueError):
            continue
        if config_matches(config, run):
            yield run_dir, config


def planned_steps(run, config):
    """The env steps at which `run` ends: total_timesteps rounded up to whole iterations, and whole phases for PPG (a
    PPG run stopped after 1M of its 1,048,576 steps has not had its second aux phase: it is not finished)."""
    per = int(config.get("global_batch_size", 1)) * int(config.get("n_pi", 1))
    return math.ceil(run.total_timesteps / per) * per


def find_finished(run, runs_dir):
    """The newest finished folder of `run` in runs_dir, or None."""
    return next((d for d, config in folders_of(run, runs_dir) if last_global_step(d) >= planned_steps(run, config)),
                None)


def is_finished(run, runs_dir):
    return find_finished(run, runs_dir) is not None


def find_resumable(run, runs_dir):
    """The newest unfinished folder of `run` in runs_dir that has a checkpoint to go on from, or None. A run
    asked for more steps than it was started with counts too (the scripts extend it); a longer one does not
    (they refuse to shorten it)."""
    return next((d for d, config in folders_of(run, runs_dir)
                 if os.path.isfile(os.path.join(d, CHECKPOINT)) and last_global_step(d) < planned_steps(run, config)
                 and config.get("total_timesteps", math.inf) <= run.total_timesteps), None)


def launch_command(run, runs_dir, python=None):
    """The argv that continues `run` from its checkpoint if it has one, else the one that starts it.

    A resumed run takes everything else from its config.json (the scripts refuse other flags that differ)."""
    run_dir = find_resumable(run, runs_dir)
    if run_dir:
        return [python or sys.executable, os.path.join(ROOT, f"{run.script}.py"), "--resume", os.path.abspath(run_dir),
                "--total-timesteps", str(run.total_timesteps)]
    return command(run, runs_dir, python)


def commit(run_dir, committed):
    """Copy a finished run's config.json and progress.csv (the record; not its checkpoint or videos, which are
    large and machine-specific) to <committed>/<run folder name>/; returns that folder."""
    target = os.path.join(committed, os.path.basename(os.path.normpath(run_dir)))
    os.makedirs(target, exist_ok=True)
    for name in ("config.json", "progress.csv"):
        shutil.copyfile(os.path.join(run_dir, name), os.path.join(target, name))
    return target


def select_runs(runs, *dirs, earliest=False):
    """The newest finished folder of each planned Job in the first of `dirs` that has one (earliest: the first
    started in any of `dirs`, by the time in its name), loaded, with its tags: a list of loaded runs."""
    selected = []
    for run in runs:
        if earliest:
            finished = [d for runs_dir in dirs for d, config in folders_of(run, runs_dir)
                        if last_global_step(d) >= planned_steps(run, config)]
            run_dir = min(finished, key=analysis.started, default=None)
        else:
            run_dir = next(filter(None, (find_finished(run, d) for d in dirs)), None)
        if run_dir:
            loaded = analysis.load_run(run_dir)
            loaded["tags"] = dict(run.tags)
            selected.append(loaded)
    return selected


def core_slots(parallel, cores_per_run=None):
    """CPU sets for `parallel` concurrent runs: disjoint blocks of this process's cores.

    The scripts use as many torch threads as the cores they may run on, so pinning a run to its block
    also sets its thread count; two runs with 2 threads each on 2 shared cores are many times slower
    than two single-threaded runs (OpenMP threads wait on each other). Without sched_getaffinity
    (not Linux) nothing is pinned: a list of None."""
    if not hasattr(os, "sched_getaffinity"):
        return [None] * parallel
    cores = sorted(os.sched_getaffinity(0))
    per = cores_per_run or max(1, len(cores) // parallel)
    return [[cores[(i * per + j) % len(cores)] for j in range(min(per, len(cores)))] for i in range(parallel)]


def unique_runs(runs):
    """The runs with distinct (env_id, exp_name, seed), first one kept (runners may share a run)."""
    seen, unique = set(), []
    for run in runs:
        if run.key not in seen:
            seen.add(run.key)
            unique.append(run)
    return unique


def cpu_seconds(run, sps_per_core=None, steps=None):
    """Rough single-core seconds that `run` (or `steps` of its env steps) takes on a 2-core CPU, for
    ordering and estimates; sps_per_core: a preset's own speeds per script, over CPU_SPS_PER_CORE.

    Smaller batches cost more per step (per-call overhead): assumed 1.4x at 16 times fewer envs (fig2's CPU preset
    says what was measured)."""
    divisor = int(run.options.get("batch_divisor", 1))
    sps = {**CPU_SPS_PER_CORE, **(sps_per_core or {})}[run.script]
    return (run.total_timesteps if steps is None else steps) / sps * (1 + 0.1 * math.log2(divisor))


def run_all(runs, runs_dir, parallel=1, cores_per_run=None, python=None, log=print, committed=None, records=()):
    """Train every run not finished yet, at most `parallel` at a time; returns the runs that failed.

    One at a time, the runs go in their planned order; several at a time, the longest start first. A run with a
    checkpoint goes on from it. Each run's output goes to
    <runs_dir>/logs/<env>__<exp-name>__<seed>.log. With `committed`, runs finished there (or in `records`, other
    folders of committed runs) are skipped and every run finished in runs_dir is committed there (also one that
    finished in an earlier session)."""
    os.makedirs(os.path.join(runs_dir, "logs"), exist_ok=True)
    pending = []
    for run in sorted(unique_runs(runs), key=cpu_seconds, reverse=True) if parallel > 1 else unique_runs(runs):
        if any(is_finished(run, d) for d in (committed, *records) if d):
            log(f"skip (committed): {run.env_id} {run.exp_name} seed {run.seed}")
        elif is_finished(run, runs_dir):
            log(f"skip (finished): {run.env_id} {run.exp_name} seed {run.seed}")
            if committed:
                log(f"committed to {commit(find_finished(run, runs_dir), committed)}")
        else:
            pending.append(run)
    slots = core_slots(parallel, cores_per_run)
    free, active, failed, total, started = list(range(parallel)), [], [], len(pending), 0
    while pending or active:
        while pending and free:
            run, slot = pending.pop(0), free.pop(0)
            cores = slots[slot]
            path = os.path.join(runs_dir, "logs", f"{run.env_id}__{run.exp_name}__{run.seed}.log")
            argv = launch_command(run, runs_dir, python)
            verb = "resume" if "--resume" in argv else "start"
            logfile = open(path, "a" if verb == "resume" else "w")  # a resumed run's log goes on
            env = dict(os.environ, **({"OMP_NUM_THREADS": str(len(cores)), "MKL_NUM_THREADS": str(len(cores))}
                                      if cores else {}))
            proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=(lambda cores=cores: os.sched_setaffinity(0, cores)) if cores else None)
            started += 1
            log(f"[{started}/{total}] {verb} on cores {cores}: {shlex.join(argv[1:])}")
            active.append((proc, run, slot, logfile, path, time.time()))
        time.sleep(0.2)
        for item in list(active):
            proc, run, slot, logfile, path, start = item
            if proc.poll() is None:
                continue
            active.remove(item)
            free.append(slot)
            logfile.close()
            if proc.returncode == 0 and is_finished(run, runs_dir):
                log(f"done in {time.time() - start:.0f}s: {run.env_id} {run.exp_name} seed {run.seed}")
                if committed:
                    log(f"committed to {commit(find_finished(run, runs_dir), committed)}")
            else:
                failed.append(run)
                tail = open(path).read()[-1500:]
                log(f"FAILED (exit {proc.returncode}): {run.env_id} {run.exp_name} seed {run.seed}; "
                    f"log {path}:\n{tail}")
    return failed

# --- Command line shared by the runners ----------------------------------------------------------------
# Rough env-steps/s of one run pinned to one core of a 2-core CPU at 16 envs x 64 steps
# (measured with the other core busy; a free machine is somewhat faster). Only for the printed estimate.
CPU_SPS_PER_CORE = {"ppo": 130, "ppo_ewma": 90, "ppg": 30, "ppg_ewma": 28}
TINY = {"envs": ["starpilot"], "seeds": [1], "distribution_mode": "easy", "num_envs": 4, "num_steps": 32,
        "num_minibatches": 2, "total_timesteps": 512, "n_pi": 2, "e_aux": 1, "parallel": 2, "no_cuda": True,
        "committed": None, "records": [], "out_dir": None, "summary_dir": None}  # tiny runs: not in data/ or docs/


def checked(kind, allowed, ok):
    """An argparse type: a `kind` that ok() accepts, else argparse's one line "argument --FLAG: must be {allowed}"."""
    def number(text):
        value = kind(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}")
        return value
    number.__name__ = kind.__name__  # argparse's "invalid int value: 'x'" for what is not a number
    return number


COUNT = checked(int, "at least 1", lambda v: v >= 1)
NATURAL = checked(int, "at least 0", lambda v: v >= 0)
FRACTION = checked(float, "above 0 and at most 1", lambda v: 0 < v <= 1)


def sweep_parser(description, epilog=""):
    """The flags every runner shares; None defaults are filled from the presets by parse_sweep_args."""
    p = argparse.ArgumentParser(description=description, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--envs", nargs="+", choices=PROCGEN_GAMES, metavar="GAME", help="Procgen games (paper: all 16)")
    a("--seeds", nargs="+", type=NATURAL, metavar="N", help="seeds")
    a("--total-timesteps", type=COUNT, help="env steps per run")
    a("--distribution-mode", choices=("easy", "hard"), help="Procgen difficulty (paper: hard)")
    a("--num-envs", type=COUNT, help="parallel envs per run at the default batch size (paper: 256 = 4 workers x 64)")
    a("--num-steps", type=COUNT, help="steps per env per rollout (paper: 256)")
    a("--num-minibatches", type=COUNT, help="minibatches per epoch (paper: 8)")
    a("--parallel", type=COUNT, help="runs trained at the same time")
    a("--cores-per-run", type=COUNT, help="CPU cores each run is pinned to (default: all cores / --parallel)")
    a("--runs-dir", help="where the run folders go (default: runs/<figure>, runs/<figure>_<preset> for a preset, in "
                          "the repository); the figure and summary CSV too, unless --out-dir")
    a("--out-dir", help="where the figure and summary CSV go (default: --runs-dir; --cpu: docs/figures, committed)")
    a("--summary-dir", help="where the summary CSV goes (default: --out-dir; --cpu: data, committed)")
    a("--save-model", action="store_true", default=None,
      help="pass --save-model (the scripts' default): a run that stopped half-way goes on from its checkpoint")
    a("--committed", metavar="DIR", help="copy each finished run's config.json and progress.csv to DIR/<run folder>/, "
                                         "skip runs finished there, and draw the figure from there (and a preset's "
                                         "record folders) alone")
    a("--final-frac", type=FRACTION, default=0.1,
      help="final return = mean over this last fraction of iterations (--cpu tables: of env steps)")
    a("--smooth", type=COUNT, default=5, help="moving-average window (iterations) for the learning curves (a "
                                              "--cpu preset may fix its own, in env steps)")
    a("--extra", default="", help="more flags for every training command, e.g. --extra=--bf16; not part of a run's "
                                  "identity: use another --runs-dir and --committed when changing them")
    a("--quick", action="store_true", help="the CPU-sized preset described below")
    a("--plot-only", action="store_true", help="train nothing: figure and summary from the finished runs")
    a("--dry-run", action="store_true", help="print the commands of the runs still to do, and stop")
    a("--tiny", action="store_true", help=argparse.SUPPRESS)  # tests: seconds-long runs
    a("--no-cuda", action="store_true", default=None, help="pass --no-cuda to the scripts")
    return p


def add_ppg_flags(parser):
    parser.add_argument("--n-pi", type=COUNT, help="PPG policy iterations per phase at batch divisor 1 (paper: 32)")
    parser.add_argument("--e-aux", type=COUNT, help="PPG auxiliary epochs (paper: 6)")


def parse_sweep_args(parser, argv, paper, quick, tiny=None, **presets):
    """Parse, then fill every flag left unset from the tiny, chosen or paper preset (in that order).

    presets: a runner's own presets by flag name (e.g. cpu=CPU for --cpu), chosen like --quick; --tiny shrinks
    whichever is chosen (--quick by default). The runs go to the paper's --runs-dir + _<preset name>."""
    args = parser.parse_args(argv)
    chosen = [name for name in ("quick", *presets) if getattr(args, name)]
    if len(chosen) > 1:
        parser.error(f"argument --{chosen[1]}: not allowed with --{chosen[0]}")
    named = {"quick": quick, **presets}[chosen[0]] if chosen else quick if args.tiny else {}
    preset = {**paper, **named, **({**TINY, **(tiny or {})} if args.tiny else {})}
    for dest, value in preset.items():
        if dest != "runs_dir" and getattr(args, dest, None) is None:
            setattr(args, dest, value)
    if args.runs_dir is None:  # in the repository, from whichever folder the command is typed
        suffix = "_tiny" if args.tiny else f"_{chosen[0]}" if chosen else ""
        args.runs_dir = os.path.join(ROOT, preset["runs_dir"] + suffix)
    args.preset = preset  # what the preset alone asks for, beside what the command line changed
    if args.parallel is None:
        args.parallel = 1
    return args


def base_options(args, script):
    """Script options that come from the shared flags (sizes, difficulty, PPG phase for tiny runs), and the official
    code's choices where it and CleanRL differ (the paper's), or the scripts' defaults where a preset asks for them."""
    options = {"distribution_mode": args.distribution_mode, "num_envs": args.num_envs, "num_steps": args.num_steps,
               "num_minibatches": args.num_minibatches,
               **(DEFAULTS[script] if getattr(args, "defaults", False) else OFFICIAL_CODE)}
    if script.startswith("ppg"):
        for dest in ("n_pi", "e_aux"):
            if getattr(args, dest, None) is not None:
                options[dest] = getattr(args, dest)
    if args.save_model:
        options["save_model"] = True
    if args.no_cuda:
        options["cuda"] = False
    return options


def format_duration(seconds):
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.0f} days"
    return f"{seconds / 3600:.1f} h" if seconds >= 3 * 3600 else f"{seconds / 60:.0f} min"


def format_wall_time(seconds):
    """`5,346 s (89 min)`: the seconds a run logged, and readably where that is over a minute."""
    return f"{seconds:,.0f} s" + (f" ({format_duration(seconds)})" if seconds >= 60 else "")


def run_sweep(args, runs, shown=None):
    """Train the runs (unless --plot-only/--dry-run); returns the loaded finished runs of `shown` (default:
    `runs`), with tags."""
    for run in runs:
        run.extra = shlex.split(args.extra)
    committed, dirs = args.committed, record_dirs(args)
    todo = [run for run in unique_runs(runs) if not any(is_finished(run, d) for d in [args.runs_dir, *dirs])]
    if not args.plot_only:
        refuse_what_a_script_would(todo, args.runs_dir)

    def steps_left(run):  # a run with a checkpoint goes on from it
        resumable = find_resumable(run, args.runs_dir)
        return run.total_timesteps - (last_global_step(resumable) if resumable else 0)
    # the cores this process may use, as core_slots pins the runs to them; one run left runs alone
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    at_once = max(1, min(args.parallel, cores, len(todo)))
    seconds = sum(cpu_seconds(run, getattr(args, "sps_per_core", None), steps_left(run)) for run in todo) / at_once
    print(f"{len(unique_runs(runs))} runs planned, {len(todo)} still to train in {args.runs_dir}"
          + (f" (each copied to {committed} when it finishes)" if committed else "") + "; rough estimate on "
          f"this kind of 2-core CPU: {format_duration(seconds)} at {at_once} in parallel (a GPU is much faster)"
          + (f"; {args.estimate_note}" if getattr(args, "estimate_note", None) else ""), flush=True)
    args.failed = []
    if args.dry_run:
        for run in todo:
            print(shlex.join(launch_command(run, args.runs_dir)))
        return None
    if not args.plot_only:
        args.failed = run_all(runs, args.runs_dir, args.parallel, args.cores_per_run, committed=committed,
                              records=dirs)
    shown = shown or runs
    loaded = select_runs(shown, *(dirs or [args.runs_dir]))  # committed: every finished run has been copied there
    print(f"{len({r['dir'] for r in loaded})}/{len(unique_runs(shown))} runs finished"
          + (f" in {' and '.join(dirs)}" if dirs else "") + (f"; {len(args.failed)} failed" if args.failed else ""),
          flush=True)
    return loaded


def refuse_what_a_script_would(runs, runs_dir):
    """Each run's command parsed by its own script before any run starts, so that a sweep does not stop hours in
    on flags a later run's script refuses (--num-minibatches 7 of 128 steps): argparse's line and exit 2."""
    for run in runs:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                importlib.import_module(run.script).parse_args(command(run, runs_dir)[2:])
        except SystemExit:
            reason = said.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1]
            print(f"{os.path.basename(sys.argv[0])}: error: {run.script}.py refuses {run.env_id} {run.exp_name} "
                  f"seed {run.seed}: {reason}", file=sys.stderr)
            sys.exit(2)


def record_dirs(args):
    """Where finished runs are looked for besides --runs-dir: --committed (where new ones are copied), then the
    preset's other folders of committed runs ("records": e.g. the --cpu presets' runs on a GPU, data/runs/gpu)."""
    return list(dict.fromkeys(d for d in [args.committed, *getattr(args, "records", ())] if d))


def sweep_main(args, runs, tag_names, summary_name, figure_name, make_figure, summarize=None, shown=None):
    """The runners' main(): train, then write the figure into --out-dir (or --runs-dir) and the summary CSV into
    --summary-dir (or the figure's folder).

    The figure and CSV show the finished runs among `shown` (default: `runs`, those trained).
    summarize(loaded, args) gives the CSV's rows (default: analysis.summary_rows by tag_names), which
    make_figure(loaded, rows, args, path) receives. Returns (figure, summary) paths, or None for --dry-run.
    Exits with status 1 if a run failed."""
    loaded = run_sweep(args, runs, shown)
    if loaded is None:
        return None
    rows = summarize(loaded, args) if summarize else analysis.summary_rows(loaded, tag_names, args.final_frac)
    out_dir = args.out_dir or args.runs_dir
    summary, figure = os.path.join(args.summary_dir or out_dir, summary_name), os.path.join(out_dir, figure_name)
    if rows:
        analysis.write_csv(summary, rows)
        make_figure(loaded, rows, args, figure)
        print(f"figure {figure}\nsummary {summary}")
    else:  # nothing written: an empty summary would replace a good one (--summary-dir may be data/)
        hint = " (the same command without --plot-only trains them)" if args.plot_only else ""
        print(f"no finished runs in {args.committed or args.runs_dir}: no summary, no figure{hint}")
    if args.failed:
        sys.exit(f"{len(args.failed)} run(s) failed; see {os.path.join(args.runs_dir, 'logs')}")
    return figure, summary
