"""Shared helpers for the figure runners (staleness.py, batch_size.py, ewma_vs_baseline.py) and plot.py.

    sweep     Run (one training run), command(), is_finished(), run_all(): resumable, P runs at a time
    loading   load_runs(): config.json + progress.csv of every run folder under some paths
    analysis  smooth(), curve(), mean_curve(), env_mean_curve(), final_return(), group_runs(), seed_stats()
    Procgen   PROCGEN_RANGES and normalized_return()
    figures   subplots(), plot_band(), plot_curves_by(), plot_final(), save_figure()
    CLI       sweep_parser() / parse_sweep_args(): the flags every runner shares, with its presets;
              run_sweep() / sweep_main(): train, then summary CSV and figure

A run is identified by (env_id, exp_name, seed); each runner encodes the configuration in the
exp_name (e.g. `fig1__ppo__old-recent__stale4`). A run counts as done when a folder
`<runs-dir>/<env>__<exp-name>__<seed>__<time>/` exists whose config.json matches the flags the
sweep would pass and whose progress.csv reaches the requested total_timesteps; done runs are never
started again, so an interrupted sweep is continued by running the same command again.
"""
import argparse
import csv
import dataclasses
import glob
import json
import math
import os
import shlex
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("ppo", "ppo_ewma", "ppg", "ppg_ewma")
PROCGEN_GAMES = ("bigfish", "bossfight", "caveflyer", "chaser", "climber", "coinrun", "dodgeball", "fruitbot",
                 "heist", "jumper", "leaper", "maze", "miner", "ninja", "plunder", "starpilot")

# --- Procgen normalised return -------------------------------------------------------------------------
# Source: K. Cobbe, C. Hesse, J. Hilton, J. Schulman, "Leveraging Procedural Generation to Benchmark
# Reinforcement Learning" (ICML 2020, arXiv:1912.01588), appendix table of normalisation constants
# (R_min, R_max) per game and distribution mode. The normalised return is (R - R_min) / (R_max - R_min);
# Hilton et al. (the batch size-invariance paper) report it on hard mode. The paper itself was not at
# hand when this was written: every value of each column was checked against two independent
# third-party transcriptions of that table (one of them, in code citing arXiv:1912.01588, lists both).
PROCGEN_RANGES = {
    "hard": {
        "coinrun": (5.0, 10.0), "starpilot": (1.5, 35.0), "caveflyer": (2.0, 13.4), "dodgeball": (1.5, 19.0),
        "fruitbot": (-0.5, 27.2), "chaser": (0.5, 14.2), "miner": (1.5, 20.0), "jumper": (1.0, 10.0),
        "leaper": (1.5, 10.0), "maze": (4.0, 10.0), "bigfish": (0.0, 40.0), "heist": (2.0, 10.0),
        "climber": (1.0, 12.6), "plunder": (3.0, 30.0), "ninja": (2.0, 10.0), "bossfight": (0.5, 13.0),
    },
    "easy": {
        "coinrun": (5.0, 10.0), "starpilot": (2.5, 64.0), "caveflyer": (3.5, 12.0), "dodgeball": (1.5, 19.0),
        "fruitbot": (-1.5, 32.4), "chaser": (0.5, 13.0), "miner": (1.5, 13.0), "jumper": (3.0, 10.0),
        "leaper": (3.0, 10.0), "maze": (5.0, 10.0), "bigfish": (1.0, 40.0), "heist": (3.5, 10.0),
        "climber": (2.0, 12.6), "plunder": (4.5, 30.0), "ninja": (3.5, 10.0), "bossfight": (0.5, 13.0),
    },
}


def normalized_return(value, env_id, mode):
    """(R - R_min) / (R_max - R_min) with the Procgen constants of `mode`; nan where there are none."""
    if mode not in PROCGEN_RANGES or env_id not in PROCGEN_RANGES[mode]:
        return np.full(np.shape(value), np.nan) if np.ndim(value) else float("nan")
    low, high = PROCGEN_RANGES[mode][env_id]
    if np.ndim(value):
        return (np.asarray(value, dtype=float) - low) / (high - low)
    return (float(value) - low) / (high - low)


def can_normalize(run):
    return run["config"].get("env_id") in PROCGEN_RANGES.get(run["config"].get("distribution_mode"), {})


# --- One run of a training script ----------------------------------------------------------------------
# Flags whose value in config.json is the one after Section 4's batch-size-invariance adjustments, so
# not the value passed on the command line (num_envs is checked as num_envs * batch_divisor instead).
ADJUSTED = {"learning_rate", "adv_ewma_decay", "beta_prox", "n_pi"}
NOT_CHECKED = {"cuda"}  # the device does not change what a run is


@dataclasses.dataclass
class Run:
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


def find_finished(run, runs_dir):
    """The newest finished folder of `run` in runs_dir, or None."""
    pattern = os.path.join(runs_dir, f"{run.env_id}__{run.exp_name}__{run.seed}__*")
    for run_dir in sorted(glob.glob(pattern), key=os.path.getmtime, reverse=True):
        try:
            with open(os.path.join(run_dir, "config.json")) as f:
                config = json.load(f)
        except (OSError, ValueError):
            continue
        if config_matches(config, run) and last_global_step(run_dir) >= run.total_timesteps:
            return run_dir
    return None


def is_finished(run, runs_dir):
    return find_finished(run, runs_dir) is not None


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


def cpu_seconds(run):
    """Rough single-core seconds that `run` takes on the 2-core dev machine (for ordering and estimates).

    Smaller batches cost more per step (per-call overhead): measured ~1.4x at 16 times fewer envs."""
    divisor = int(run.options.get("batch_divisor", 1))
    return run.total_timesteps / CPU_SPS_PER_CORE[run.script] * (1 + 0.1 * math.log2(divisor))


def run_all(runs, runs_dir, parallel=1, cores_per_run=None, python=None, log=print):
    """Train every run not finished yet, at most `parallel` at a time; returns the runs that failed.

    The longest runs start first. Each run's output goes to <runs_dir>/logs/<env>__<exp-name>__<seed>.log."""
    os.makedirs(os.path.join(runs_dir, "logs"), exist_ok=True)
    pending = []
    for run in sorted(unique_runs(runs), key=cpu_seconds, reverse=True):
        if is_finished(run, runs_dir):
            log(f"skip (finished): {run.env_id} {run.exp_name} seed {run.seed}")
        else:
            pending.append(run)
    slots = core_slots(parallel, cores_per_run)
    free, active, failed, total, started = list(range(parallel)), [], [], len(pending), 0
    while pending or active:
        while pending and free:
            run, slot = pending.pop(0), free.pop(0)
            cores = slots[slot]
            path = os.path.join(runs_dir, "logs", f"{run.env_id}__{run.exp_name}__{run.seed}.log")
            logfile = open(path, "w")
            env = dict(os.environ, **({"OMP_NUM_THREADS": str(len(cores)), "MKL_NUM_THREADS": str(len(cores))}
                                      if cores else {}))
            argv = command(run, runs_dir, python)
            proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=(lambda cores=cores: os.sched_setaffinity(0, cores)) if cores else None)
            started += 1
            log(f"[{started}/{total}] start on cores {cores}: {shlex.join(argv[1:])}")
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
            else:
                failed.append(run)
                tail = open(path).read()[-1500:]
                log(f"FAILED (exit {proc.returncode}): {run.env_id} {run.exp_name} seed {run.seed}; "
                    f"log {path}:\n{tail}")
    return failed


# --- Loading runs --------------------------------------------------------------------------------------
def _number(text):
    if text is None or text == "":
        return float("nan")
    try:
        return float(text)
    except ValueError:
        return float("nan")


def load_run(run_dir):
    """{"dir", "config", "columns", "rows"} with every progress.csv cell as a float (nan when empty)."""
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(run_dir, "progress.csv")) as f:
        reader = csv.DictReader(f)
        rows = [{k: _number(v) for k, v in row.items()} for row in reader]
        columns = list(reader.fieldnames or [])
    return {"dir": run_dir, "config": config, "columns": columns, "rows": rows}


def find_run_dirs(paths):
    """Run folders (with config.json and progress.csv) among `paths` and, at any depth, below them."""
    found = []
    for path in paths:
        for folder, subfolders, files in os.walk(path):
            subfolders.sort()
            if "config.json" in files and "progress.csv" in files:
                found.append(folder)
                subfolders[:] = []
    return sorted(dict.fromkeys(os.path.normpath(p) for p in found))


def load_runs(paths):
    return [load_run(d) for d in find_run_dirs([paths] if isinstance(paths, str) else paths)]


def select_runs(runs, runs_dir):
    """The newest finished folder of each planned Run, loaded, with its tags: a list of loaded runs."""
    selected = []
    for run in runs:
        run_dir = find_finished(run, runs_dir)
        if run_dir:
            loaded = load_run(run_dir)
            loaded["tags"] = dict(run.tags)
            selected.append(loaded)
    return selected


# --- Analysis ------------------------------------------------------------------------------------------
def smooth(values, k):
    """Trailing moving average over the last k finite values (k <= 1: unchanged); nan stays nan."""
    values = np.asarray(values, dtype=float)
    if k is None or k <= 1:
        return values.copy()
    out = np.full_like(values, np.nan)
    finite = np.flatnonzero(np.isfinite(values))
    for n, i in enumerate(finite):
        out[i] = values[finite[max(0, n - k + 1):n + 1]].mean()
    return out


def curve(run, x="global_step", y="episodic_return", smooth_k=1, normalize=False):
    """(xs, ys) of one run over the rows where y has a value, smoothed, optionally normalised."""
    xs = np.array([row.get(x, np.nan) for row in run["rows"]], dtype=float)
    ys = np.array([row.get(y, np.nan) for row in run["rows"]], dtype=float)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], smooth(ys[keep], smooth_k)
    if normalize:
        ys = normalized_return(ys, run["config"].get("env_id"), run["config"].get("distribution_mode"))
    return xs, ys


def mean_curve(curves, points=200):
    """Mean, std (ddof 0), min and max over several (xs, ys) curves, pointwise on a common x grid.

    Curves with identical xs keep them. Otherwise each curve is interpolated linearly onto `points`
    evenly spaced x values spanning all curves, and only counts where it has data (a shorter run
    drops out of the mean past its end). Returns dict(x, mean, std, min, max, count, n) or None."""
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        return None
    first = curves[0][0]
    if all(len(x) == len(first) and np.array_equal(x, first) for x, _ in curves):
        grid, stack = first, np.stack([y for _, y in curves])
    else:
        low, high = min(x[0] for x, _ in curves), max(x[-1] for x, _ in curves)
        grid = np.linspace(low, high, points) if high > low else np.array([low])
        stack = np.stack([np.where((grid >= x[0]) & (grid <= x[-1]), np.interp(grid, x, y), np.nan)
                          for x, y in curves])
    count = np.isfinite(stack).sum(0)
    keep = count > 0
    grid, stack, count = grid[keep], stack[:, keep], count[keep]
    if not len(grid):
        return None
    return {"x": grid, "mean": np.nanmean(stack, 0), "std": np.nanstd(stack, 0), "min": np.nanmin(stack, 0),
            "max": np.nanmax(stack, 0), "count": count, "n": len(curves)}


def env_mean_curve(runs, x="global_step", y="episodic_return", smooth_k=1, normalize=True):
    """The paper's learning curve: for each seed the mean over environments, then mean/std over seeds."""
    by_seed = {}
    for run in runs:
        by_seed.setdefault(run["config"].get("seed"), []).append(curve(run, x, y, smooth_k, normalize))
    per_seed = [mean_curve(curves) for _, curves in sorted(by_seed.items(), key=lambda kv: str(kv[0]))]
    return mean_curve([(c["x"], c["mean"]) for c in per_seed if c is not None])


def final_return(rows, frac=0.1, column="episodic_return"):
    """Mean of `column` over the last `frac` of the iterations (at least one), ignoring empty cells."""
    if not rows:
        return float("nan")
    tail = rows[-max(1, math.ceil(frac * len(rows))):]
    values = [row.get(column, np.nan) for row in tail]
    values = [v for v in values if np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def seed_stats(values):
    """Mean, standard deviation (ddof 0), standard error (ddof 1 / sqrt n; 0 for one value), n."""
    values = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if not len(values):
        return {"mean": float("nan"), "std": float("nan"), "sem": float("nan"), "n": 0}
    sem = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return {"mean": float(values.mean()), "std": float(values.std()), "sem": sem, "n": len(values)}


def dedupe(runs):
    """One run per (env_id, exp_name, seed): the one that got furthest, then the newest."""
    best = {}
    for run in runs:
        c = run["config"]
        key = (c.get("env_id"), c.get("exp_name"), c.get("seed"))
        rank = (run["rows"][-1].get("global_step", 0) if run["rows"] else 0, os.path.getmtime(run["dir"]))
        if key not in best or rank > best[key][0]:
            best[key] = (rank, run)
    return [run for _, run in best.values()]


def group_runs(runs, keys=("exp_name", "env_id")):
    """{(config[k] for k in keys): [runs, one per seed]}, in order of first appearance."""
    groups = {}
    for run in dedupe(runs):
        groups.setdefault(tuple(run["config"].get(k) for k in keys), []).append(run)
    for members in groups.values():
        members.sort(key=lambda r: str(r["config"].get("seed")))
    return groups


def summary_rows(runs, tag_names, frac=0.1):
    """One dict per run: its tags, env, seed, final_return, normalized (nan if no constants), the last
    global_step and time_s (wall-clock seconds of the run), exp_name and run_dir."""
    rows = []
    for run in runs:
        c = run["config"]
        final = final_return(run["rows"], frac)
        last = run["rows"][-1] if run["rows"] else {}
        normalized = normalized_return(final, c.get("env_id"), c.get("distribution_mode"))
        rows.append({**{t: run["tags"].get(t) for t in tag_names}, "env": c.get("env_id"), "seed": c.get("seed"),
                     "final_return": final, "normalized": normalized,
                     "global_step": last.get("global_step"), "time_s": last.get("time_s"),
                     "exp_name": c.get("exp_name"), "run_dir": run["dir"]})
    return rows


def metric_name(rows):
    """'normalized' when every game has normalisation constants, else 'final_return' (raw return: only
    meaningful for one game). A nan final return (no episode ended in the window) stays nan either way."""
    normalizable = all(np.isfinite(r["normalized"]) or not np.isfinite(r["final_return"]) for r in rows)
    return "normalized" if rows and normalizable else "final_return"


def aggregate_final(rows, by, metric=None):
    """{key: seed_stats} where key = tuple(row[b] for b in by): per seed the mean of `metric` over
    environments, then statistics over seeds (the paper's 'averaged over all 16 environments')."""
    metric = metric or metric_name(rows)
    per_seed = {}
    for row in rows:
        per_seed.setdefault(tuple(row[b] for b in by), {}).setdefault(row["seed"], []).append(row[metric])
    return {key: seed_stats([np.mean(v) for v in seeds.values()]) for key, seeds in per_seed.items()}


def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["empty"])
        writer.writeheader()
        writer.writerows(rows)


# --- Figures shared by the runners -------------------------------------------------------------------------
def subplots(n, figure, args):
    """A row of n panels titled `figure` plus the games, difficulty and seeds of the sweep."""
    seeds = f"seed{'s' if len(args.seeds) > 1 else ''} {' '.join(map(str, args.seeds))}"
    title = f"{figure} ({', '.join(args.envs)}; {args.distribution_mode}; {seeds})"
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 4), squeeze=False)
    fig.suptitle(title, fontsize="medium")
    return fig, list(axes[0])


def save_figure(fig, out):
    import matplotlib.pyplot as plt
    for ax in fig.axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="x-small")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_band(ax, stats, label, colour=None, linestyle="-"):
    """A mean curve with a +-1 std band (stats from mean_curve / env_mean_curve); None draws nothing."""
    if stats is None:
        return
    line, = ax.plot(stats["x"], stats["mean"], color=colour, linestyle=linestyle, label=label)
    if stats["n"] > 1:
        ax.fill_between(stats["x"], stats["mean"] - stats["std"], stats["mean"] + stats["std"],
                        color=line.get_color(), alpha=0.15, linewidth=0)


def plot_curves_by(ax, loaded, tag, values, label, smooth_k, normalize, **match):
    """Learning curves (mean over games, then mean +- std over seeds) of the runs whose tags match
    `match`, one per value of tag `tag`, coloured in order along viridis. smooth_k: a window in
    iterations, or a function of the value giving one (Fig. 2 smooths over the same env steps)."""
    import matplotlib.pyplot as plt
    for i, value in enumerate(values):
        members = [r for r in loaded if r["tags"].get(tag) == value
                   and all(r["tags"].get(k) == v for k, v in match.items())]
        k = smooth_k(value) if callable(smooth_k) else smooth_k
        plot_band(ax, env_mean_curve(members, smooth_k=k, normalize=normalize), label(value),
                  plt.get_cmap("viridis")(i / max(1, len(values) - 1)))
    ax.set_xlabel("env steps")
    ax.set_ylabel("normalised return" if normalize else "episodic return")


def plot_final(ax, finals, labels, xlabel, ylabel):
    """One errorbar line per variant through {(variant, x): seed_stats}: mean +- std over seeds."""
    for variant, label in labels.items():
        points = sorted((x, s) for (v, x), s in finals.items() if v == variant)
        if points:
            ax.errorbar([x for x, _ in points], [s["mean"] for _, s in points], yerr=[s["std"] for _, s in points],
                        marker="o", capsize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


def final_label(metric):
    return "final normalised return" if metric == "normalized" else "final return"


# --- Command line shared by the runners ----------------------------------------------------------------
# Rough env-steps/s of one run pinned to one core of the 2-core dev machine at 16 envs x 64 steps
# (measured with the other core busy; a free machine is somewhat faster). Only for the printed estimate.
CPU_SPS_PER_CORE = {"ppo": 130, "ppo_ewma": 90, "ppg": 30, "ppg_ewma": 28}
TINY = {"envs": ["starpilot"], "seeds": [1], "distribution_mode": "easy", "num_envs": 4, "num_steps": 32,
        "num_minibatches": 2, "total_timesteps": 512, "n_pi": 2, "e_aux": 1, "parallel": 2, "no_cuda": True}


def sweep_parser(description, epilog=""):
    """The flags every runner shares; None defaults are filled from the presets by parse_sweep_args."""
    p = argparse.ArgumentParser(description=description, epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--envs", nargs="+", choices=PROCGEN_GAMES, metavar="GAME", help="Procgen games (paper: all 16)")
    a("--seeds", nargs="+", type=int, metavar="N", help="seeds")
    a("--total-timesteps", type=int, help="env steps per run")
    a("--distribution-mode", choices=("easy", "hard"), help="Procgen difficulty (paper: hard)")
    a("--num-envs", type=int, help="parallel envs per run at the default batch size (paper: 256 = 4 workers x 64)")
    a("--num-steps", type=int, help="steps per env per rollout (paper: 256)")
    a("--num-minibatches", type=int, help="minibatches per epoch (paper: 8)")
    a("--parallel", type=int, help="runs trained at the same time")
    a("--cores-per-run", type=int, help="CPU cores each run is pinned to (default: all cores / --parallel)")
    a("--runs-dir", help="where the run folders go; the figure and summary CSV are written there too")
    a("--final-frac", type=float, default=0.1, help="final return = mean over this last fraction of iterations")
    a("--smooth", type=int, default=5, help="moving-average window (iterations) for the learning curves")
    a("--extra", default="", help="more flags for every training command, e.g. \"--bf16\"; not part of a run's "
                                  "identity: use another --runs-dir when changing them")
    a("--quick", action="store_true", help="the CPU-sized preset described above")
    a("--plot-only", action="store_true", help="train nothing: figure and summary from the finished runs")
    a("--dry-run", action="store_true", help="print the commands of the runs still to do, and stop")
    a("--tiny", action="store_true", help=argparse.SUPPRESS)  # tests: seconds-long runs
    a("--no-cuda", action="store_true", default=None, help="pass --no-cuda to the scripts")
    return p


def add_ppg_flags(parser):
    parser.add_argument("--n-pi", type=int, help="PPG policy iterations per phase at batch divisor 1 (paper: 32)")
    parser.add_argument("--e-aux", type=int, help="PPG auxiliary epochs (paper: 6)")


def parse_sweep_args(parser, argv, paper, quick):
    """Parse, then fill every flag left unset from the tiny, quick or paper preset (in that order)."""
    args = parser.parse_args(argv)
    preset = {**paper, **(quick if args.quick or args.tiny else {}), **(TINY if args.tiny else {})}
    for dest, value in preset.items():
        if dest != "runs_dir" and getattr(args, dest, None) is None:
            setattr(args, dest, value)
    if args.runs_dir is None:
        args.runs_dir = preset["runs_dir"] + ("_tiny" if args.tiny else "_quick" if args.quick else "")
    if args.parallel is None:
        args.parallel = 1
    return args


def base_options(args, script):
    """Script options that come from the shared flags (sizes, difficulty, PPG phase for tiny runs)."""
    options = {"distribution_mode": args.distribution_mode, "num_envs": args.num_envs, "num_steps": args.num_steps,
               "num_minibatches": args.num_minibatches,
               "minibatch_by": "env"}  # the paper's minibatches (official code); named so older runs are not reused
    if script.startswith("ppg"):
        for dest in ("n_pi", "e_aux"):
            if getattr(args, dest, None) is not None:
                options[dest] = getattr(args, dest)
    if args.no_cuda:
        options["cuda"] = False
    return options


def format_duration(seconds):
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:,.0f} days"
    return f"{seconds / 3600:.1f} h" if seconds >= 3 * 3600 else f"{seconds / 60:.0f} min"


def run_sweep(args, runs):
    """Train the runs (unless --plot-only/--dry-run); returns the loaded finished runs, with tags."""
    for run in runs:
        run.extra = shlex.split(args.extra)
    todo = [run for run in unique_runs(runs) if not is_finished(run, args.runs_dir)]
    seconds = sum(map(cpu_seconds, todo)) / max(1, min(args.parallel, os.cpu_count() or 1))
    print(f"{len(unique_runs(runs))} runs planned, {len(todo)} still to train in {args.runs_dir}; rough estimate on "
          f"this kind of 2-core CPU: {format_duration(seconds)} at {args.parallel} in parallel (a GPU is much faster)",
          flush=True)
    args.failed = []
    if args.dry_run:
        for run in todo:
            print(shlex.join(command(run, args.runs_dir)))
        return None
    if not args.plot_only:
        args.failed = run_all(runs, args.runs_dir, args.parallel, args.cores_per_run)
    loaded = select_runs(runs, args.runs_dir)
    print(f"{len({r['dir'] for r in loaded})}/{len(unique_runs(runs))} runs finished"
          + (f"; {len(args.failed)} failed" if args.failed else ""), flush=True)
    return loaded


def sweep_main(args, runs, tag_names, summary_name, figure_name, make_figure):
    """The runners' main(): train, then write the summary CSV and the figure into --runs-dir.

    Returns (figure, summary) paths, or None for --dry-run. Exits with status 1 if a run failed."""
    loaded = run_sweep(args, runs)
    if loaded is None:
        return None
    rows = summary_rows(loaded, tag_names, args.final_frac)
    summary, figure = os.path.join(args.runs_dir, summary_name), os.path.join(args.runs_dir, figure_name)
    write_csv(summary, rows)
    if rows:
        make_figure(loaded, rows, args, figure)
        print(f"figure {figure}\nsummary {summary}")
    else:
        print(f"no finished runs in {args.runs_dir}: empty summary {summary}, no figure")
    if args.failed:
        sys.exit(f"{len(args.failed)} run(s) failed; see {os.path.join(args.runs_dir, 'logs')}")
    return figure, summary
