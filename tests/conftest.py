"""Shared test helpers: load the four scripts as modules, run them on tiny configs (on the CPU, or CUDA where asked)."""
import csv
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from stand_in import ROOT, StatelessEnv, load  # noqa: F401  (the helpers a worker needs, without sweep's imports)

EXPERIMENTS = os.path.join(ROOT, "experiments")
sys.path[:0] = [EXPERIMENTS, os.path.join(EXPERIMENTS, "tools")]  # experiments/' modules, as they import each other
from sweep import SCRIPTS  # noqa: E402  (ppo, ppo_ewma, ppg, ppg_ewma)

EWMA_SCRIPTS = ("ppo_ewma", "ppg_ewma")
PPG_SCRIPTS = ("ppg", "ppg_ewma")
# A run of a second or less: 4 envs x 4 steps (BATCH env steps an iteration), 2 minibatches of 8, one policy epoch
# (PPG's default; PPO's is 3); PPG phases of 2 iterations. Tests give --total-timesteps in iterations: str(3 * BATCH)
# is 3 iterations.
BATCH = 16
TINY = ["--num-envs", "4", "--num-steps", "4", "--num-minibatches", "2", "--no-cuda"]
TINY_PPO = ["--update-epochs", "1"]
TINY_PPG = ["--n-pi", "2", "--e-aux", "1"]
# Tests that touch a device run on the CPU, and on the GPU too where there is one: the same suite checks a GPU machine.
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=GPU)]
# progress.csv columns computed from the learner alone (time_s, sps and the *_time_s columns are wall-clock)
LEARNING_COLUMNS = ["iteration", "global_step", "episodic_return", "episodic_length", "policy_loss", "value_loss",
                    "entropy", "approx_kl", "clipfrac", "adv_mean", "adv_std", "imp_samp_capfrac"]


THREADS = min(2, len(os.sched_getaffinity(0)))  # 2 at most, one a core of this process's CPU set, as the scripts count


@pytest.fixture(autouse=True)
def same_threads():
    """Every test starts on THREADS threads, whether or not a test before it ran main(), which takes one a core
    (setup): a test whose numbers hold only at the thread counts they were measured at pins main() to them too."""
    torch.set_num_threads(THREADS)


def tiny_argv(name, *extra, device="cpu"):
    argv = TINY + (TINY_PPG if name in PPG_SCRIPTS else TINY_PPO) + list(extra)
    return argv if str(device) == "cpu" else [a for a in argv if a != "--no-cuda"] + ["--cuda"]


def run_tiny(name, tmp_path, *extra, iterations=2, device="cpu"):
    """Run `name`'s main() in-process on the tiny config (on `device`); return (run_dir, progress rows)."""
    module = load(name)
    steps = BATCH * iterations
    argv = tiny_argv(name, "--runs-dir", str(tmp_path), "--total-timesteps", str(steps), *extra, device=device)
    run_dir = module.main(argv)
    return run_dir, read_progress(run_dir)


def read_progress(run_dir):
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


def run_dirs(parent):
    return glob.glob(os.path.join(str(parent), "*"))


def learning_columns(rows):
    return [{c: r[c] for c in LEARNING_COLUMNS} for r in rows]


class EchoEnv(StatelessEnv):
    """A stand-in for Procgen that a working agent masters in seconds: each frame shows a white square in one of four
    corners, and the one-step episode pays 1 for the action with that corner's number (0-3), 0 for the other 14
    actions: a random policy earns 1/15 on average, a learned one nearly 1."""
    def __init__(self, env_id, num_envs, distribution_mode, num_levels, start_level, seed):
        super().__init__(env_id, num_envs, distribution_mode, num_levels, start_level, seed)
        self.rng = np.random.default_rng(seed)
        self.obs = self.next_frame()

    def reward(self, actions):
        return (actions == self.shown).astype(np.float32)

    def next_frame(self):
        self.shown = self.rng.integers(0, 4, self.num_envs)
        frame = np.zeros((self.num_envs, 64, 64, 3), dtype=np.uint8)
        for i, corner in enumerate(self.shown):
            frame[i, 32 * (corner // 2):32 * (corner // 2) + 32, 32 * (corner % 2):32 * (corner % 2) + 32] = 255
        return frame


class RecordingSGD(torch.optim.SGD):
    """Plain SGD that keeps, at every step, a copy of the parameters before it and of their gradients (None where a
    parameter got none), so a test can compare the gradient a script computed with one computed by hand."""
    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.before, self.grads = [], []

    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"]]
        self.before.append([p.detach().clone() for p in params])
        self.grads.append([None if p.grad is None else p.grad.detach().clone() for p in params])
        return super().step(closure)


def update_extra(module, agent):
    """The arguments that follow `args` in module.update: the EWMA of the policy's network in the EWMA scripts."""
    if not hasattr(module, "EWMA"):
        return ()
    return (module.EWMA(agent.policy if hasattr(agent, "policy") else agent, module.parse_args([]).beta_prox),)


def assert_same_state(a, b, path="checkpoint"):
    """Two checkpoints (nested dicts, lists and tensors) hold exactly the same values."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


@pytest.fixture
def bad_argument(capsys, monkeypatch, tmp_path):
    """bad_argument(name, argv, flag): `name`'s main(argv), run in an empty folder, must exit with code 2 and one
    line on stderr that names `flag`, with no traceback and nothing written anywhere. Returns that line."""
    def check(name, argv, flag):
        folder = tmp_path / "cwd"
        folder.mkdir(exist_ok=True)
        before = sorted(os.listdir(tmp_path)), sorted(os.listdir(folder))
        monkeypatch.chdir(folder)
        monkeypatch.setattr(load(name), "setup", lambda args: pytest.fail(f"{argv} was not refused"))  # no training
        with pytest.raises(SystemExit) as exit_info:
            load(name).main(list(argv))
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, (exit_info.value.code, err)
        assert err.count("\n") == 1 and err.startswith(f"{name}.py: error: ") and flag in err, err
        assert "Traceback" not in err
        assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(folder))) == before, "something was written"
        return err
    return check


# The environment of two runs side by side: their threads sleep while they wait, not spin against each other's
# (with OpenMP's default a pair took up to three times as long). Not a core each: that would change their maths.
BESIDE = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")


def started(script, argv, at_rollout=None, env=None, **popen):
    """`python SCRIPT.py ARGV` in a process of its own (by tests/stand_in.py), its console read line by line; with
    at_rollout "N,DO" it does DO as its Nth rollout begins (stand_in.py), so a test knows where it stops."""
    env = dict(env or os.environ, **({"AT_ROLLOUT": at_rollout} if at_rollout else {}))
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "stand_in.py"), script, *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def copy_run(run_dir, parent):
    """A copy of the run folder `run_dir` in `parent`, for a test that changes or resumes a shared run."""
    return shutil.copytree(run_dir, os.path.join(str(parent), os.path.basename(run_dir)))


# Finished tiny runs that many tests read (each a second or two of training, made once per session): a test that
# changes one, or resumes it, works on a copy_run.
@pytest.fixture(scope="session")
def finished_ppo(tmp_path_factory):
    """ppo.py, 2 iterations, a checkpoint after each."""
    return load("ppo").main(tiny_argv("ppo", "--runs-dir", str(tmp_path_factory.mktemp("ppo")), "--total-timesteps",
                                      str(2 * BATCH), "--save-interval", "1"))


@pytest.fixture(scope="session")
def finished_ppo_ewma(tmp_path_factory):
    """ppo_ewma.py, 2 iterations, checkpointed at its end."""
    return load("ppo_ewma").main(tiny_argv("ppo_ewma", "--runs-dir", str(tmp_path_factory.mktemp("ppo_ewma")),
                                           "--total-timesteps", str(2 * BATCH)))


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture(params=SCRIPTS)
def script(request):
    return load(request.param)


@pytest.fixture(params=EWMA_SCRIPTS)
def ewma_script(request):
    return load(request.param)


@pytest.fixture(params=PPG_SCRIPTS)
def ppg_script(request):
    return load(request.param)
