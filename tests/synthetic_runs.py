"""Shared by test_experiments.py and test_committed_runs.py: the experiments/ modules, imported as the runners
import them, and run folders written by hand (config.json + progress.csv, as the scripts write them)."""
import csv
import importlib
import json
import os

import conftest  # noqa: F401  (puts experiments/ and experiments/tools/ on sys.path)
import analysis
import figures
import sweep


def load_experiment(name):
    """experiments/<name>.py or experiments/tools/<name>.py, imported under its own name (as they import each
    other: `import sweep`)."""
    return importlib.import_module(name)


def write_run(parent, env_id, exp_name, seed, returns, batch=128, mode="easy", extra=None, config=None,
              seconds_per_iteration=2.0):
    """A run folder as the scripts write it; `returns` holds None where no episode ended. `extra` maps a column to
    its value per iteration (None: empty), replacing a default column of that name (e.g. sps)."""
    run_dir = os.path.join(str(parent), f"{env_id}__{exp_name}__{seed}__{1000 + seed}")
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({"env_id": env_id, "exp_name": exp_name, "seed": seed, "distribution_mode": mode, "num_envs": 4,
                   "num_steps": batch // 4, "batch_divisor": 1, **(config or {})}, f)
    columns = ["iteration", "global_step", "time_s", "sps", "episodic_return", "episodic_length"]
    columns += [c for c in extra or {} if c not in columns]
    with open(os.path.join(run_dir, "progress.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for i, ret in enumerate(returns):
            row = {"iteration": i + 1, "global_step": (i + 1) * batch, "time_s": (i + 1) * seconds_per_iteration,
                   "sps": batch / seconds_per_iteration, "episodic_return": "" if ret is None else ret,
                   "episodic_length": "" if ret is None else 50}
            row.update({k: ("" if v[i] is None else v[i]) for k, v in (extra or {}).items()})
            writer.writerow(row)
    return run_dir


def has(cmd, flag, value):
    """`flag value` appears as adjacent tokens of the command."""
    return any(a == flag and b == value for a, b in zip(cmd, cmd[1:]))
