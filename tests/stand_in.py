"""`stand_in.py SCRIPT ARGS...` runs SCRIPT.py's main(ARGS) in a process of its own, as `python SCRIPT.py ARGS` does,
for the tests about processes (signals, kills, locks, torchrun's workers). What a test needs is set in the environment:
  STAND_IN_ENV=1    conftest's stand-in environment in place of Procgen, so that a multi-worker run is exactly
                    repeatable
  AT_ROLLOUT=N,DO   as the process begins its Nth rollout, DO: a signal's name (SIGTERM, SIGKILL) sent to itself, or
                    "hold": say so and wait there until its parent has gone (the test kills it, or its torchrun
                    launcher)
So a test knows where a process is when it stops it, whichever of the processes runs faster."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import StatelessEnv, load  # noqa: E402


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


if __name__ == "__main__":
    module = load(sys.argv[1])
    if os.environ.get("STAND_IN_ENV"):
        module.ProcgenVecEnv = StatelessEnv
    if os.environ.get("AT_ROLLOUT"):
        n, do = os.environ["AT_ROLLOUT"].split(",")
        module.collect_rollout = at_rollout(module.collect_rollout, int(n), do)
    module.main(sys.argv[2:])
