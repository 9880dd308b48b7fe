"""What finished runs say: their folders loaded, reduced to learning curves and final returns.

    Procgen   PROCGEN_RANGES and normalized_return(): the normalised return, with its source
    loading   load_runs(): config.json + progress.csv of every run folder under some paths; started()
    curves    smooth(), smooth_over_steps(), curve(), mean_curve(), env_mean_curve() (the paper's: mean over
              games, then over seeds)
    env steps in_steps(), last_steps(), step_windows(), column_mean(), run_diagnostics(): a run's rows
              and statistics by windows of env steps, so runs with different batch sizes compare alike
    finals    final_return(), seed_stats(), group_runs(), summary_rows(), metric_name(), aggregate_final(),
              write_csv(), markdown_table()
    paired    t_cdf(), t_quantile(), paired_test(): PPO-EWMA minus PPO seed by seed, the mean, its 95% interval, the
              sign test

A loaded run is a dict {"dir", "config", "columns", "rows"}, every progress.csv cell a float; the figure
runners' runs also carry "tags" (see sweep.select_runs). Used by plot.py, figures.py, sweep.py and the runners.
"""
import csv
import json
import math
import os

import numpy as np

# --- Procgen normalised return -------------------------------------------------------------------------
# Source: K. Cobbe, C. Hesse, J. Hilton, J. Schulman, "Leveraging Procedural Generation to Benchmark
# Reinforcement Learning" (ICML 2020, arXiv:1912.01588), appendix table of normalisation constants
# (R_min, R_max) per game and distribution mode. The normalised return is (R - R_min) / (R_max - R_min);
# Hilton et al. (the batch size-invariance paper) report it on hard mode. Every value of each column
# is checked against two independent third-party transcriptions of that table (one of them, in code
# citing arXiv:1912.01588, lists both), not against the paper itself.
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


# --- CleanRL's ppo_procgen.py on StarPilot (easy), for comparison ---------------------------------------------------
# The mean episodic return per 100k env steps from 0 to 1M of CleanRL's ppo_procgen.py, unmodified (64 envs x 256
# steps, 3 epochs x 8 minibatches, Adam 5e-4), seeds 1 and 2, run on a GPU: only these means were kept, not the runs'
# logs. CleanRL logs the first environment to finish on each step.
CLEANRL_STARPILOT_1M = {
    "CleanRL seed 1 (GPU)": [1.83, 2.62, 3.06, 3.49, 4.06, 4.48, 5.32, 6.04, 7.43, 8.16],
    "CleanRL seed 2 (GPU)": [1.82, 2.57, 2.97, 3.22, 3.45, 4.67, 5.55, 6.98, 7.56, 9.01],
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


def started(run_dir):
    """A key under which later-started runs sort later: the Unix time ending the folder's name (the scripts name it
    so), then its mtime. The same in every checkout, where the mtimes are the checkout's."""
    suffix = os.path.basename(os.path.normpath(run_dir)).rsplit("__", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0, os.path.getmtime(run_dir)


# Committed runs resumed from a checkpoint that did not hold the games' state, and the first iteration after each such
# resume (from the runs' logs): its episodes started afresh on new levels (shorter, lower returns), so window means and
# curves leave it out. The scripts' checkpoints hold every game's state (ProcgenVecEnv.state_dict): a run resumed from
# one goes on in the same episodes, row for row the run that never stopped, and needs no entry here.
RESUMED = {"starpilot__ppo__1__1795462513": (61,), "starpilot__ppo_ewma__1__1795462513": (41,),
           "starpilot__ablation__ppo__official__2__1795602317": (31,),
           "starpilot__ablation__ppo__init__2__1795622034": (41,),
           "starpilot__ppo_ewma__1__1795635128": (26,),  # stopped (SIGTERM) after iteration 25, resumed
           "starpilot__ablation__ppo__mb+vf+init__5__1795658514": (14,),  # SIGTERM after iteration 13, resumed
           # the Fig. 2 runs resumed after a restart (found from their logs and rows)
           "starpilot__fig2__ppo_ewma__div4__1__1795523607": (81,),
           "starpilot__fig2__ppo_ewma__div16__no-lr__1__1795523605": (331,),
           "starpilot__fig2__ppo_ewma__div16__no-prox__1__1795523607": (321,)}


def without_resumed(run):
    """The run without the first iteration after each resume listed in RESUMED (one from a checkpoint without the
    games' state, whose episodes started afresh), for window means and curves."""
    skip = RESUMED.get(os.path.basename(os.path.normpath(run["dir"])), ())
    return {**run, "rows": [row for row in run["rows"] if row["iteration"] not in skip]}


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


def smooth_over_steps(steps, values, window):
    """Trailing mean of the finite values whose env step lies in (step - window, step] (window None or 0:
    unchanged); nan stays nan. A window in env steps, not iterations, averages the same amount of experience
    at every batch size: 100,000 steps are 7 iterations of 16,384 steps and 98 of 1,024."""
    steps, values = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if not window:
        return values.copy()
    out = np.full_like(values, np.nan)
    finite = np.isfinite(values)
    for i in np.flatnonzero(finite):
        inside = finite & (steps > steps[i] - window) & (steps <= steps[i])
        out[i] = values[inside].mean()
    return out


def curve(run, x="global_step", y="episodic_return", smooth_k=1, normalize=False, smooth_steps=None):
    """(xs, ys) of one run over the rows where y has a value, smoothed over smooth_k iterations or, if given,
    over smooth_steps env steps (whatever x is), optionally normalised."""
    xs, steps, ys = (np.array([row.get(c, np.nan) for row in run["rows"]], dtype=float) for c in (x, "global_step", y))
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], (smooth_over_steps(steps[keep], ys[keep], smooth_steps) if smooth_steps
                        else smooth(ys[keep], smooth_k))
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


def env_mean_curve(runs, x="global_step", y="episodic_return", smooth_k=1, normalize=True, smooth_steps=None):
    """The paper's learning curve: for each seed the mean over environments, then mean/std over seeds."""
    by_seed = {}
    for run in runs:
        by_seed.setdefault(run["config"].get("seed"), []).append(curve(run, x, y, smooth_k, normalize, smooth_steps))
    per_seed = [mean_curve(curves) for _, curves in sorted(by_seed.items(), key=lambda kv: str(kv[0]))]
    return mean_curve([(c["x"], c["mean"]) for c in per_seed if c is not None])


# --- Windows of env steps ------------------------------------------------------------------------------
# An iteration is num_envs x num_steps env steps, so "the last 10% of iterations" or "5 iterations" mean
# different amounts of experience at different batch sizes. These select rows by global_step instead.
def in_steps(rows, low, high):
    """The rows whose global_step lies in (low, high]: the iterations that ended within those env steps."""
    return [row for row in rows if low < row.get("global_step", np.nan) <= high]


def last_steps(rows, frac, end=None):
    """The rows of the last `frac` of `end` env steps (default: the run's last row's), e.g. (900k, 1M]."""
    if not rows:
        return []
    end = rows[-1]["global_step"] if end is None else end
    return in_steps(rows, (1 - frac) * end, end)


def step_windows(rows, width):
    """[(low, high, rows in (low, high])] for consecutive windows of `width` env steps from 0 to past the
    last row (a last iteration that overshoots the run's total_timesteps gets a window of its own)."""
    if not rows:
        return []
    count = math.ceil(rows[-1]["global_step"] / width)
    return [(k * width, (k + 1) * width, in_steps(rows, k * width, (k + 1) * width)) for k in range(count)]


def window_return(run, low, high):
    """The mean episodic return of the run's iterations that ended in (low, high] env steps, the first iteration after
    a resume left out (without_resumed): e.g. (900k, 1M], a run's last tenth."""
    return column_mean(in_steps(without_resumed(run)["rows"], low, high), "episodic_return")


def column_mean(rows, column):
    """Mean of `column` over the rows where it has a value; nan if none (or no such column)."""
    values = [row.get(column, np.nan) for row in rows]
    values = [v for v in values if np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def column_sem(rows, column):
    """Standard error (ddof 1 / sqrt n) of the mean of `column` over the rows where it has a value; nan below 2."""
    values = [row.get(column, np.nan) for row in rows]
    values = [v for v in values if np.isfinite(v)]
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")


def column_swing(rows, column, width):
    """The largest max / min of `column` within one window of `width` env steps (step_windows): how far an
    estimate moves in a short time. Used on adv_std, the advantage normalisation's estimate, which the paper
    finds hurts only once it oscillates by a factor of about 10 (App. F.2, Fig. 13). nan without values."""
    swings = []
    for _, _, window in step_windows(rows, width):
        values = [v for v in (row.get(column, np.nan) for row in window) if np.isfinite(v) and v > 0]
        if values:
            swings.append(max(values) / min(values))
    return max(swings) if swings else float("nan")


def run_diagnostics(run, frac=0.1, first_steps=100_000, end=None):
    """What a run's progress.csv says beyond its curve: mean clipfrac and approx_kl over the run and over the
    last `frac` of `end` env steps (last_steps: default, the run's own), the return over its first `first_steps`
    env steps and over that last `frac` (with the standard error of that mean over those iterations' returns: how
    much the number would move with other episodes of the same policy, not with another seed; nan for one
    iteration), the largest swing of adv_std within `first_steps` env steps (column_swing), the env steps,
    wall-clock seconds (last time_s) and env steps per second (steps / seconds, and the median of the
    per-iteration sps column)."""
    rows = run["rows"]
    tail, last = last_steps(rows, frac, end), rows[-1] if rows else {}
    steps, seconds = last.get("global_step", float("nan")), last.get("time_s", float("nan"))
    sps = [row.get("sps", np.nan) for row in rows]
    sps = [v for v in sps if np.isfinite(v)]
    return {"clipfrac": column_mean(rows, "clipfrac"), "clipfrac_last": column_mean(tail, "clipfrac"),
            "approx_kl": column_mean(rows, "approx_kl"), "approx_kl_last": column_mean(tail, "approx_kl"),
            "return_first": column_mean(in_steps(rows, 0, first_steps), "episodic_return"),
            "return_last": column_mean(tail, "episodic_return"), "return_last_sem": column_sem(tail, "episodic_return"),
            "adv_std_swing": column_swing(rows, "adv_std", first_steps), "global_step": steps, "time_s": seconds,
            "sps_mean": steps / seconds if seconds > 0 else float("nan"),
            "sps_median": float(np.median(sps)) if sps else float("nan")}


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


# --- Paired differences: Student's t and the sign test, in the standard library's maths ------------------------------
def t_cdf(x, df):
    """P(T <= x) for Student's t with df degrees of freedom. With t = sqrt(df) tan(u) the density becomes
    c cos(u)^(df - 1), c = Gamma((df + 1) / 2) / (sqrt(pi) Gamma(df / 2)), integrated here by Simpson's rule over
    u from 0 to atan(x / sqrt(df)): a smooth integrand on a finite range (df = 1 gives the Cauchy's
    1/2 + atan(x)/pi)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)
    end, n = math.atan(x / math.sqrt(df)), 1000
    f = [math.cos(end * i / n) ** (df - 1) for i in range(n + 1)]
    return 0.5 + c * end / (3 * n) * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))


def t_quantile(p, df):
    """The x with t_cdf(x, df) = p (0.5 < p < 1), by bisection: t_quantile(0.975, df) bounds a 95% interval."""
    low, high = 0.0, 1e4
    for _ in range(100):
        middle = (low + high) / 2
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def paired_test(differences):
    """The mean of paired differences, its standard error (ddof 1), its two-sided 95% interval (Student's t, n - 1
    degrees of freedom; none for one pair) and the verdict it gives: "ahead" if the interval lies above 0, "behind" if
    below, "level" if it holds 0; and the sign test: how many differences are positive among the non-zero ones, and
    the two-sided binomial p-value of that count against 1/2."""
    d = np.asarray(differences, dtype=float)
    n, mean = len(d), float(d.mean())
    sem = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    half = t_quantile(0.975, n - 1) * sem if n > 1 else float("nan")
    verdict = "ahead" if mean - half > 0 else "behind" if mean + half < 0 else "level"
    signed = int(np.count_nonzero(d))
    positive = int((d > 0).sum())
    tail = sum(math.comb(signed, k) for k in range(max(positive, signed - positive), signed + 1)) / 2 ** signed
    return {"n": n, "mean": mean, "sem": sem, "low": mean - half, "high": mean + half,
            "verdict": verdict if n > 1 else "level", "positive": positive, "signed": signed,
            "sign_p": min(1.0, 2 * tail)}


def dedupe(runs):
    """One run per (env_id, distribution_mode, exp_name, seed): the one that got furthest, then the newest."""
    best = {}
    for run in runs:
        c = run["config"]
        key = (c.get("env_id"), c.get("distribution_mode"), c.get("exp_name"), c.get("seed"))
        rank = (run["rows"][-1].get("global_step", 0) if run["rows"] else 0, started(run["dir"]))
        if key not in best or rank > best[key][0]:
            best[key] = (rank, run)
    return [run for _, run in best.values()]


def group_runs(runs, keys=("exp_name", "env_id", "distribution_mode")):
    """{(config[k] for k in keys): [runs, one per seed (dedupe)]}, in order of first appearance."""
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


def markdown_table(header, rows):
    """A GitHub Markdown table: `header` a list of column titles, `rows` lists of cells (already text)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def cell(value, fmt="{:.2f}"):
    return "-" if value != value else fmt.format(value)  # nan: no episode ended there


def steps_text(steps):
    return f"{steps / 1e6:g}M" if steps >= 1e6 else f"{steps / 1e3:g}k" if steps else "0"


def window_returns(runs, width):
    """[(low, high, [mean return of each run's iterations ending in (low, high]])], up to the longest run."""
    per_run = [step_windows(run["rows"], width) for run in runs]
    count = max(map(len, per_run), default=0)
    return [(k * width, (k + 1) * width,
             [column_mean(windows[k][2], "episodic_return") if k < len(windows) else float("nan")
              for windows in per_run]) for k in range(count)]


def episode_windows(path, width):
    """The mean return per window of `width` env steps of a log with a row per episode (global_step,
    episodic_return), e.g. CleanRL's printed episodes (data/cleanrl/): the windows of window_table."""
    with open(path) as f:
        rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return [column_mean(window, "episodic_return") for _, _, window in step_windows(rows, width)]


def cleanrl_references(control, width=100_000):
    """CleanRL's mean return per window on StarPilot: its two GPU runs (CLEANRL_STARPILOT_1M, 100k windows only),
    then each run of its script on this machine in the folder `control` (seed<N>_episodes.csv)."""
    logs = sorted(f for f in os.listdir(control) if f.endswith("_episodes.csv")) if os.path.isdir(control) else []
    return {**(CLEANRL_STARPILOT_1M if width == 100_000 else {}), **{f"CleanRL seed {f[4:-13]} (this CPU)":
            episode_windows(os.path.join(control, f), width) for f in logs}}


def window_table(runs, labels, width, references=None):
    """Markdown: the mean episodic return per window of `width` env steps, a row per window, a column per run; then
    a column per reference ({label: [the mean of each window]}, e.g. CLEANRL_STARPILOT_1M), blank past its end."""
    references = references or {}
    return markdown_table(["env steps", *labels, *references],
                          [[f"({steps_text(low)}, {steps_text(high)}]", *map(cell, means),
                            *[cell(v[k]) if k < len(v) else "" for v in references.values()]]
                           for k, (low, high, means) in enumerate(window_returns(runs, width))])


def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["empty"])
        writer.writeheader()
        writer.writerows(rows)
