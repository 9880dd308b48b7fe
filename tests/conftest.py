"""Shared test helpers: load the four scripts as modules and run them on tiny configs, on the CPU."""
import csv
import glob
import importlib.util
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("ppo", "ppo_ewma", "ppg", "ppg_ewma")
EWMA_SCRIPTS = ("ppo_ewma", "ppg_ewma")
PPG_SCRIPTS = ("ppg", "ppg_ewma")
# A run of a few seconds: 4 envs x 32 steps, 2 minibatches of 64; PPG phases of 2 iterations.
TINY = ["--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2", "--no-cuda"]
TINY_PPG = ["--n-pi", "2", "--e-aux", "1"]

torch.set_num_threads(min(2, os.cpu_count() or 1))


def load(name, folder=ROOT):
    """Import <folder>/<name>.py (ppo.py etc. by default) as a module named `name`, once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def tiny_argv(name, *extra):
    return TINY + (TINY_PPG if name in PPG_SCRIPTS else []) + list(extra)


def run_tiny(name, tmp_path, *extra, iterations=2):
    """Run `name`'s main() in-process on the tiny config; return (run_dir, progress rows)."""
    module = load(name)
    steps = 4 * 32 * iterations
    run_dir = module.main(tiny_argv(name, "--runs-dir", str(tmp_path), "--total-timesteps", str(steps), *extra))
    return run_dir, read_progress(run_dir)


def read_progress(run_dir):
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


def run_dirs(parent):
    return glob.glob(os.path.join(str(parent), "*"))


@pytest.fixture(params=SCRIPTS)
def script(request):
    return load(request.param)


@pytest.fixture(params=EWMA_SCRIPTS)
def ewma_script(request):
    return load(request.param)


@pytest.fixture(params=PPG_SCRIPTS)
def ppg_script(request):
    return load(request.param)
