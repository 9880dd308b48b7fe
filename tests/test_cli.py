"""Bad arguments: exit code 2, one line on stderr naming the argument and what is allowed, nothing written."""
import os
import subprocess
import sys

import pytest

from conftest import EWMA_SCRIPTS, PPG_SCRIPTS, ROOT, SCRIPTS, load

COMMON_BAD = [
    (["--env-id", "pong"], "--env-id"),
    (["--distribution-mode", "medium"], "--distribution-mode"),
    (["--num-envs", "0"], "--num-envs"),
    (["--num-steps", "-3"], "--num-steps"),
    (["--total-timesteps", "0"], "--total-timesteps"),
    (["--num-minibatches", "7"], "--num-minibatches"),  # does not divide 64 x 256
    (["--learning-rate", "0"], "--learning-rate"),
    (["--gamma", "1.5"], "--gamma"),
    (["--clip-coef", "-0.1"], "--clip-coef"),
    (["--clip-coef", "1"], "--clip-coef"),  # log(1 - eps) needs eps < 1
    (["--kl-penalty", "-1"], "--kl-penalty"),
    (["--adv-ewma-decay", "1"], "--adv-ewma-decay"),
    (["--staleness", "-1"], "--staleness"),
    (["--batch-divisor", "3"], "--batch-divisor"),  # does not divide 64
    (["--batch-divisor", "0"], "--batch-divisor"),
    (["--num-envs", "abc"], "--num-envs"),
]
EWMA_BAD = [(["--beta-prox", "1"], "--beta-prox"), (["--beta-prox", "-0.1"], "--beta-prox"),
            (["--imp-samp-max", "0.5"], "--imp-samp-max"), (["--prox", "behav"], "--prox")]
PPG_BAD = [(["--n-pi", "0"], "--n-pi"), (["--e-aux", "0"], "--e-aux"), (["--beta-clone", "-1"], "--beta-clone")]
CASES = ([(s, argv, name) for s in SCRIPTS for argv, name in COMMON_BAD]
         + [(s, argv, name) for s in EWMA_SCRIPTS for argv, name in EWMA_BAD]
         + [(s, argv, name) for s in PPG_SCRIPTS for argv, name in PPG_BAD]
         + [("ppo", ["--batch-divisor", "4"], "--batch-divisor"),  # PPO's default is 3 epochs: Section 4 needs 1
            ("ppo", ["--n-pi", "4"], "--n-pi"),  # PPG flags are not PPO's
            ("ppo", ["--beta-prox", "0.5"], "--beta-prox"),  # EWMA flags are not the baseline's
            ("ppo", ["--no-adjust", "prox", "--batch-divisor", "4", "--update-epochs", "1"], "--no-adjust")])


@pytest.mark.parametrize("name,argv,arg", CASES, ids=[f"{s}:{' '.join(a)}" for s, a, _ in CASES])
def test_bad_argument_exits_2_with_one_line_naming_it(name, argv, arg, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(name).parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and arg in err, err


def test_bad_argument_from_the_shell_writes_nothing(tmp_path):
    """The real command line: exit 2, no traceback, no run folder."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ppo_ewma.py"), "--num-minibatches", "5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ppo_ewma.py")]
    assert lines == [proc.stderr.strip().splitlines()[-1]] and "--num-minibatches" in lines[0]
    assert "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []


def test_help_documents_every_argument(script, capsys):
    with pytest.raises(SystemExit) as exit_info:
        script.parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for action in script.parse_args([])._get_kwargs():
        assert "--" + action[0].replace("_", "-") in out or action[0] in ("adam_betas", "aux_minibatch_trajs",
                                                                          "aux_learning_rate")
