"""torchrun target for tests: `stand_in.py SCRIPT ARGS...` runs SCRIPT.py's main(ARGS) with the stand-in
environment of conftest.py in place of Procgen, so that a multi-worker run is exactly repeatable."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import StatelessEnv, load  # noqa: E402

if __name__ == "__main__":
    module = load(sys.argv[1])
    module.ProcgenVecEnv = StatelessEnv
    module.main(sys.argv[2:])
