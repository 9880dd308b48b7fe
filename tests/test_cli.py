"""Bad input, as a new user types it: exit code 2, one line on stderr naming the argument and what is allowed,
no traceback, nothing written (the `bad_argument` helper in conftest.py checks all of it)."""
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import EWMA_SCRIPTS, PPG_SCRIPTS, ROOT, SCRIPTS, load, tiny_argv

COMMON_BAD = [
    (["--env-id", "pong"], "--env-id"),
    (["--distribution-mode", "medium"], "--distribution-mode"),
    (["--num-envs", "0"], "--num-envs"),
    (["--num-envs", "abc"], "--num-envs"),
    (["--num-steps", "-3"], "--num-steps"),
    (["--total-timesteps", "0"], "--total-timesteps"),
    (["--num-minibatches", "7"], "--num-minibatches"),  # does not divide 64 envs
    (["--num-minibatches", "7", "--minibatch-by", "step"], "--num-minibatches"),  # nor 64 x 256 steps
    (["--minibatch-by", "time"], "--minibatch-by"),
    (["--learning-rate", "0"], "--learning-rate"),
    (["--learning-rate", "-1e-3"], "--learning-rate"),  # a negative number: its range, not "expected one argument"
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--gamma", "1.5"], "--gamma"),
    (["--gamma", "inf"], "--gamma"),
    (["--gae-lambda", "-inf"], "--gae-lambda"),
    (["--clip-coef", "-0.1"], "--clip-coef"),
    (["--clip-coef", "1"], "--clip-coef"),  # log(1 - eps) needs eps < 1
    (["--kl-penalty", "-1"], "--kl-penalty"),
    (["--ent-coef", "nan"], "--ent-coef"),
    (["--adv-ewma-decay", "1"], "--adv-ewma-decay"),
    (["--imp-samp-max", "0.5"], "--imp-samp-max"),  # 0 (no cap) or at least 1
    (["--imp-samp-max", "inf"], "--imp-samp-max"),  # no cap is 0
    (["--staleness", "-1"], "--staleness"),
    (["--staleness", "1526"], "--staleness"),  # the default run has 1526 iterations: nothing would be trained
    (["--batch-divisor", "3"], "--batch-divisor"),  # does not divide 64
    (["--batch-divisor", "0"], "--batch-divisor"),
    (["--adam-beta-adjust"], "--adam-beta-adjust"),  # does nothing without --batch-divisor
    (["--seed", "-1"], "--seed"),
    (["--seed", "3000000000"], "--seed"),  # Procgen's seeds are 32-bit
    (["--start-level", "2147483648"], "--start-level"),
    (["--start-level", "2000000000", "--num-levels", "200000000"], "--start-level"),
    (["--exp-name", "../escape"], "--exp-name"),  # never a folder outside --runs-dir
    (["--exp-name", "a/b"], "--exp-name"),
    (["--exp-name", ""], "--exp-name"),
    (["--exp-name", "x" * 101], "--exp-name"),  # a folder name must stay below the file system's 255 bytes
    (["--save-interval", "5"], "--save-interval"),  # does nothing without --save-model
    (["--video-interval", "5"], "--video-interval"),
    (["--eval-interval", "5"], "--eval-interval"),
    (["--no-adjust", "lr"], "--no-adjust"),
]
EWMA_BAD = [(["--beta-prox", "1"], "--beta-prox"), (["--beta-prox", "-0.1"], "--beta-prox"), (["--prox", "behav"], "--prox"),
            (["--prox", "recent", "--beta-prox", "0.5"], "--beta-prox")]  # the EWMA is not used with prox = recent
PPG_BAD = [(["--n-pi", "0"], "--n-pi"), (["--e-aux", "0"], "--e-aux"), (["--beta-clone", "-1"], "--beta-clone"),
           (["--batch-divisor", "4", "--e-pi", "2"], "--batch-divisor")]  # Section 4 needs one policy epoch
CASES = ([(s, argv, flag) for s in SCRIPTS for argv, flag in COMMON_BAD]
         + [(s, argv, flag) for s in EWMA_SCRIPTS for argv, flag in EWMA_BAD]
         + [(s, argv, flag) for s in PPG_SCRIPTS for argv, flag in PPG_BAD]
         + [("ppo", ["--batch-divisor", "4"], "--batch-divisor"),  # PPO's default is 3 epochs: Section 4 needs 1
            ("ppo", ["--n-pi", "4"], "--n-pi"),  # PPG flags are not PPO's
            ("ppo", ["--beta-prox", "0.5"], "--beta-prox"),  # EWMA flags are not the baseline's
            ("ppo", ["--no-adjust", "prox", "--batch-divisor", "4", "--update-epochs", "1"], "--no-adjust")])


@pytest.mark.parametrize("name,argv,flag", CASES, ids=[f"{s}:{' '.join(a)}" for s, a, _ in CASES])
def test_bad_argument(name, argv, flag, bad_argument):
    bad_argument(name, argv, flag)


def test_a_runs_dir_that_is_a_file_or_below_one(tmp_path, bad_argument):
    (tmp_path / "a_file").write_text("")
    for runs_dir in (tmp_path / "a_file", tmp_path / "a_file" / "runs"):
        assert "not a folder" in bad_argument("ppo", ["--runs-dir", str(runs_dir)], "--runs-dir")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 2-iteration ppo_ewma run with a checkpoint."""
    parent = tmp_path_factory.mktemp("finished")
    return load("ppo_ewma").main(tiny_argv("ppo_ewma", "--runs-dir", str(parent), "--total-timesteps", "256",
                                           "--save-model"))


def folder_digest(folder):
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        digest.update(name.encode() + open(os.path.join(folder, name), "rb").read())
    return digest.hexdigest()


RESUME_BAD = [  # (script, argv with RUN for the run folder, flag, words the message must contain)
    ("ppo_ewma", ["--resume", "RUN"], "--resume", "is finished (2 of 2 iterations)"),
    ("ppo_ewma", ["--resume", "RUN", "--total-timesteps", "200"], "--total-timesteps", "can only be extended"),
    ("ppo_ewma", ["--resume", "RUN", "--total-timesteps", "512", "--gamma", "0.9"], "--gamma", "has 0.999"),
    ("ppo_ewma", ["--resume", "RUN", "--evaluate", "RUN"], "--evaluate", "not allowed with --resume"),
    ("ppo", ["--resume", "RUN", "--total-timesteps", "512"], "--resume", "made by ppo_ewma.py, not ppo.py"),
    ("ppg", ["--evaluate", "RUN"], "--evaluate", "made by ppo_ewma.py, not ppg.py"),
    ("ppo_ewma", ["--resume", "RUN/nowhere"], "--resume", "No such file"),
    ("ppo_ewma", ["--evaluate", "RUN", "--eval-episodes", "0"], "--eval-episodes", "needs at least 1 episode"),
    ("ppo_ewma", ["--resume", "RUN", "--total-timesteps", "512", "--bf16"], "--bf16", "has False, got True"),
]


@pytest.mark.parametrize("name,argv,flag,words", RESUME_BAD, ids=[f"{s}:{' '.join(a)}" for s, a, _, _ in RESUME_BAD])
def test_bad_resume_or_evaluate(name, argv, flag, words, finished_run, bad_argument):
    before = folder_digest(finished_run)
    err = bad_argument(name, [finished_run if a == "RUN" else a.replace("RUN", finished_run) for a in argv], flag)
    assert words in err, err
    assert folder_digest(finished_run) == before  # config.json, progress.csv and checkpoint untouched


def test_a_missing_or_corrupt_config_json(finished_run, tmp_path, bad_argument):
    import shutil
    run_dir = shutil.copytree(finished_run, tmp_path / "copy")
    os.remove(run_dir / "config.json")
    assert "No such file" in bad_argument("ppo_ewma", ["--resume", str(run_dir)], "--resume")
    (run_dir / "config.json").write_text('{"env_id": "starpi')
    assert "cannot read" in bad_argument("ppo_ewma", ["--evaluate", str(run_dir)], "--evaluate")
    config = json.load(open(os.path.join(finished_run, "config.json")))
    del config["script"], config["minibatch_by"]  # a run of an older version: it cannot be continued exactly
    (run_dir / "config.json").write_text(json.dumps(config))
    assert "has no minibatch_by" in bad_argument("ppo_ewma", ["--resume", str(run_dir)], "--resume")


def test_bad_argument_from_the_shell_writes_nothing(tmp_path):
    """The real command line: exit 2, exactly one line on stderr (no traceback, no notice), no run folder."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ppo_ewma.py"), "--learning-rate", "-1e-3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "ppo_ewma.py: error: argument --learning-rate: must be in (0, inf), got -1e-3\n"
    assert os.listdir(tmp_path) == []


def test_help_explains_every_flag_and_shows_its_default(script, capsys):
    """--help is documentation: every flag has a help text (the formatter appends "(default: ...)" only to those)."""
    with pytest.raises(SystemExit) as exit_info:
        script.parse_args(["--help"])
    assert exit_info.value.code == 0
    entries = re.split(r"\n  (?=-)", capsys.readouterr().out.split("options:")[1])  # "--flag METAVAR  help..."
    helped = {entry.split()[0].rstrip(",") for entry in entries if "(default:" in " ".join(entry.split())}
    flags = {"--" + dest.replace("_", "-") for dest in vars(script.parse_args([]))}
    flags -= {"--adam-betas", "--aux-minibatch-trajs", "--aux-learning-rate"}  # set by Section 4's adjustments
    assert flags <= helped, sorted(flags - helped)


def test_a_runs_dir_with_a_tilde_is_the_home_folder(tmp_path, monkeypatch):
    """`--runs-dir=~/runs` reaches the script with its `~` (the shell expands only a word that starts with it)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    run_dir = load("ppo").main(tiny_argv("ppo", "--runs-dir=~/runs", "--total-timesteps", "128"))
    assert os.path.dirname(run_dir) == str(tmp_path / "home" / "runs")
    assert sorted(os.listdir(tmp_path)) == ["home"]  # no folder named ~


def test_resume_takes_the_saved_config_and_only_safe_changes(finished_run, tmp_path):
    """The saved config.json is the parser's defaults: a resume needs no flag but --resume, repeats of the run's
    values are accepted, and the flags that cannot change the run's maths may change (here --micro-batch-size)."""
    import shutil
    ppo_ewma = load("ppo_ewma")
    run_dir = str(shutil.copytree(finished_run, tmp_path / "copy"))
    args = ppo_ewma.parse_args(["--resume", run_dir, "--total-timesteps", "512", "--num-envs", "4", "--gamma",
                                "0.999", "--micro-batch-size", "16"])
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert args.num_envs == config["num_envs"] == 4 and args.learning_rate == config["learning_rate"]
    assert args.total_timesteps == 512 and args.micro_batch_size == 16 and args.resume == run_dir
