"""`stand_in.py SCRIPT ARGS...` runs SCRIPT.py's main(ARGS) in a process of its own, as `python SCRIPT.py ARGS` does,
for the tests about processes (signals, kills, locks, torchrun's workers). What a test needs is set in the environment:
  STAND_IN_ENV=1    StatelessEnv (below) in place of Procgen, so that a multi-worker run is exactly repeatable
  AT_ROLLOUT=N,DO   as the process begins its Nth rollout, DO: a signal's name (SIGTERM, SIGKILL) sent to itself, or
                    "hold": say so and wait there until its parent has gone (the test kills it, or its torchrun
                    launcher)
So a test knows where a process is when it stops it, whichever of the processes runs faster. As main() ends, a
torchrun worker whose gloo threads still run says so on stderr (GLOO_LEFT): its process group outlived
destroy_process_group, to be torn down with the interpreter, where it can abort the worker. The process imports
SCRIPT.py alone, as python does (conftest imports sweep, and so ppo.py): conftest takes load and StatelessEnv from
here."""
import contextlib
import importlib.util
import os
import signal
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLOO_LEFT = "gloo threads outlive main()"


def load(name, folder=ROOT):
    """Import <folder>/<name>.py (ppo.py etc. by default) as a module named `name`, once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class StatelessEnv:
    """A stand-in for Procgen (the scripts' ProcgenVecEnv) with no state to lose: the same frame every step, one-step
    episodes paying 1 for action 3. A resumed run then sees exactly the data the uninterrupted run sees, so everything
    must match."""
    def __init__(self, env_id, num_envs, distribution_mode, num_levels, start_level, seed):
        self.num_envs, self.first = num_envs, np.ones(num_envs, dtype=bool)
        self.obs = np.full((num_envs, 64, 64, 3), 90, dtype=np.uint8)

    def step(self, actions):
        reward, done = self.reward(np.asarray(actions)), np.ones(self.num_envs, dtype=bool)
        self.obs = self.next_frame()
        return self.obs, reward, done, (reward.astype(np.float64), done.astype(int))  # each episode ends: its return, 1

    def reward(self, actions):
        return (actions == 3).astype(np.float32)

    def next_frame(self):
        return self.obs

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def at_rollout(collect_rollout, n, do):
    """collect_rollout, which does `do` as its nth call begins."""
    calls, parent = [], os.getppid()

    def collect(*args):
        calls.append(1)
        if len(calls) == n and do == "hold":
            print(f"holding as rollout {n} begins", flush=True)  # all before it done: rows, checkpoints
            while os.getppid() == parent:
                time.sleep(0.01)
        elif len(calls) == n:
            os.kill(os.getpid(), getattr(signal, do))
        return collect_rollout(*args)
    return collect


def thread_names():
    """This process's threads, by the names Linux gives them (gloo's are gloo_tcp_loop and pt_gloo_runloop); elsewhere
    none."""
    tasks = "/proc/self/task"
    names = []
    for thread in os.listdir(tasks) if os.path.isdir(tasks) else []:
        with contextlib.suppress(OSError):  # a thread that ended since the listing
            with open(os.path.join(tasks, thread, "comm")) as f:
                names.append(f.read().strip())
    return sorted(names)


if __name__ == "__main__":
    module = load(sys.argv[1])
    if os.environ.get("STAND_IN_ENV"):
        module.ProcgenVecEnv = StatelessEnv
    if os.environ.get("AT_ROLLOUT"):
        n, do = os.environ["AT_ROLLOUT"].split(",")
        module.collect_rollout = at_rollout(module.collect_rollout, int(n), do)
    try:
        module.main(sys.argv[2:])
    finally:  # however main() ends, a group it destroyed has no thread left
        names = thread_names()
        if any("gloo" in name for name in names):
            print(f"{GLOO_LEFT}: {', '.join(names)}", file=sys.stderr, flush=True)
