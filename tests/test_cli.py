"""Bad input, as a new user types it: exit code 2, one line on stderr naming the argument and what is allowed,
no traceback, nothing written (the `bad_argument` helper in conftest.py checks all of it)."""
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import BATCH, EWMA_SCRIPTS, PPG_SCRIPTS, ROOT, load, tiny_argv

# The checks of the appendix, the same code in all four scripts: each case runs on one script.
COMMON_BAD = [
    (["--env-id", "pong"], "--env-id"),
    (["--num-envs", "0"], "--num-envs"),
    (["--num-envs", "abc"], "--num-envs"),
    (["--num-steps", "-3"], "--num-steps"),
    (["--total-timesteps", str(0 * BATCH)], "--total-timesteps"),
    (["--num-minibatches", "7"], "--num-minibatches"),  # divides neither the 64 envs nor 64 x k
    (["--num-minibatches", "7", "--minibatch-by", "step"], "--num-minibatches"),  # nor the 64 x 256 steps
    (["--num-minibatches", "128", "--num-steps", "3"], "--num-minibatches"),  # 2 time chunks of 3 steps
    (["--learning-rate", "-1e-3"], "--learning-rate"),  # argparse: "expected one argument", still one line
    (["--learning-rate", "nan"], "--learning-rate"),
    (["--adam-eps", "inf"], "--adam-eps"),
    (["--gamma", "1.5"], "--gamma"),
    (["--gae-lambda", "-0.5"], "--gae-lambda"),
    (["--clip-coef", "1"], "--clip-coef"),  # log(1 - eps) needs eps < 1
    (["--norm-reward-gamma", "1"], "--norm-reward-gamma"),
    (["--kl-penalty", "-1"], "--kl-penalty"),
    (["--ent-coef", "nan"], "--ent-coef"),
    (["--adv-ewma-decay", "1"], "--adv-ewma-decay"),
    (["--imp-samp-max", "inf"], "--imp-samp-max"),  # no cap is 0
    (["--num-levels", "-2"], "--num-levels"),
    (["--staleness", "-1"], "--staleness"),
    (["--batch-divisor", "3"], "--num-envs"),  # 64 envs cannot be divided by 3
    (["--batch-divisor", "0"], "--batch-divisor"),
    (["--seed", "-1"], "--seed"),
    (["--micro-batch-size", "-1"], "--micro-batch-size"),
    (["--resume", ""], "--resume"),  # as `--resume "$RUN"` types it when RUN is unset: no new run
    (["--evaluate", ""], "--evaluate"),
    (["--runs-dir", ""], "--runs-dir"),
]
CASES = ([("ppo_ewma", argv, flag) for argv, flag in COMMON_BAD]
         + [(s, ["--batch-divisor", "4", "--update-epochs", "2"], "--update-epochs") for s in ("ppo", "ppo_ewma")]
         + [(s, ["--batch-divisor", "4", "--e-pi", "2"], "--e-pi") for s in PPG_SCRIPTS]  # Section 4: one epoch
         + [(s, ["--beta-prox", "1"], "--beta-prox") for s in EWMA_SCRIPTS]
         + [(s, ["--prox", "behav"], "--prox") for s in EWMA_SCRIPTS]
         + [(s, argv, flag) for s in PPG_SCRIPTS for argv, flag in [(["--n-pi", "0"], "--n-pi"),
                                                                    (["--e-aux", "0"], "--e-aux"),
                                                                    (["--beta-clone", "-1"], "--beta-clone")]]
         + [("ppo", ["--n-pi", "4"], "--n-pi"),  # PPG's flags are not PPO's
            ("ppo", ["--beta-prox", "0.5"], "--beta-prox"),  # the EWMA's are not the baseline's
            ("ppo", ["--no-adjust", "prox"], "--no-adjust")])


@pytest.mark.parametrize("name,argv,flag", CASES, ids=[f"{s}:{' '.join(a)}" for s, a, _ in CASES])
def test_bad_argument(name, argv, flag, bad_argument):
    bad_argument(name, argv, flag)


def folder_digest(folder):
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        digest.update(name.encode() + open(os.path.join(folder, name), "rb").read())
    return digest.hexdigest()


RESUME_BAD = [  # (script, argv with RUN for the run folder, flag, words the message must contain)
    # --resume keeps the run's configuration: a flag that is not one a resume may change is refused, even with the
    # run's own value, and so is a flag typed in part
    ("ppo_ewma", ["--resume", "RUN", "--total-timesteps", str(4 * BATCH), "--gamma", "0.9"], "--gamma",
     "--resume keeps the run's configuration"),
    ("ppo_ewma", ["--resume", "RUN", "--gamma", "0.999"], "--gamma", "only --total-timesteps, --cuda"),
    ("ppo_ewma", ["--resume", "RUN", "--total-time", str(4 * BATCH)], "--total-time", "unrecognized arguments"),
    ("ppo", ["--resume", "RUN", "--total-timesteps", str(4 * BATCH)], "--resume",
     "is a run of ppo_ewma.py, not of this ppo.py as it is today (its config.json has no old_policy)"),
    ("ppg", ["--evaluate", "RUN"], "--evaluate", "is a run of ppo_ewma.py, not of this ppg.py as it is today (its"),
    ("ppo_ewma", ["--resume", "RUN/nowhere"], "--resume", "no checkpoint.pt in"),
    ("ppo_ewma", ["--resume", "RUN", "--total-timesteps", str(4 * BATCH), "--bf16"], "--bf16",
     "--resume keeps the run's configuration"),
    # a resume checks the flags it may change as a new run does, and never shortens the run
    ("ppo_ewma", ["--resume", "RUN", "--save-interval", "0"], "--save-interval", "must be at least 1"),
    ("ppo_ewma", ["--resume", "RUN", "--eval-interval", "0"], "--eval-interval", "must be at least 1"),
    ("ppo_ewma", ["--resume", "RUN", "--eval-episodes", "-1"], "--eval-episodes", "must be at least 0"),
    ("ppo_ewma", ["--resume", "RUN", "--total-timesteps", str(BATCH)], "--total-timesteps",
     f"never shortens the run, which has {2 * BATCH}"),
]


@pytest.mark.parametrize("name,argv,flag,words", RESUME_BAD, ids=[f"{s}:{' '.join(a)}" for s, a, _, _ in RESUME_BAD])
def test_bad_resume_or_evaluate(name, argv, flag, words, finished_ppo_ewma, bad_argument):
    run, before = finished_ppo_ewma, folder_digest(finished_ppo_ewma)
    err = bad_argument(name, [run if a == "RUN" else a.replace("RUN", run) for a in argv], flag)
    assert words in err, err
    assert folder_digest(run) == before  # config.json, progress.csv and checkpoint untouched


def test_a_run_of_an_older_version_is_refused(finished_ppo_ewma, tmp_path, bad_argument):
    """A config.json without a flag of today's script: today's default might not be what the run used."""
    import shutil
    run_dir = shutil.copytree(finished_ppo_ewma, tmp_path / "copy")
    config = json.load(open(os.path.join(finished_ppo_ewma, "config.json")))
    del config["minibatch_by"]
    (run_dir / "config.json").write_text(json.dumps(config))
    message = bad_argument("ppo_ewma", ["--resume", str(run_dir)], "--resume")
    assert "is a run of ppo_ewma.py, not of this ppo_ewma.py as it is today (its config.json has no minibatch_by)" \
        in message


@pytest.mark.parametrize("edit", ["cut", "list"])
def test_a_damaged_config_json_is_refused_in_one_line(edit, finished_ppo_ewma, tmp_path, bad_argument):
    """config.json cut short or not a dict: one line."""
    import shutil
    run_dir = shutil.copytree(finished_ppo_ewma, tmp_path / "copy")
    text = (run_dir / "config.json").read_text()
    (run_dir / "config.json").write_text({"cut": text[:len(text) // 2], "list": "[1, 2]"}[edit])
    assert "cannot read" in bad_argument("ppo_ewma", ["--resume", str(run_dir)], "--resume")


def test_bad_argument_from_the_shell_writes_nothing(tmp_path):
    """The real command line: exit 2, exactly one line on stderr (no traceback, no notice), no run folder."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ppo_ewma.py"), "--learning-rate", "nan"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "ppo_ewma.py: error: argument --learning-rate: must be at least 0 and finite, got nan\n"
    assert os.listdir(tmp_path) == []


def test_help_explains_every_flag_and_shows_its_default(script, capsys):
    """--help is documentation: every flag has a help text (the formatter appends "(default: ...)" only to those)."""
    with pytest.raises(SystemExit) as exit_info:
        script.parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert ", ".join(script.PROCGEN_GAMES) in " ".join(out.split())  # the games, before a misspelled one is refused
    entries = re.split(r"\n  (?=-)", out.split("options:")[1])  # "--flag METAVAR  help..."
    helped = {entry.split()[0].rstrip(",") for entry in entries if "(default:" in " ".join(entry.split())}
    flags = {"--" + dest.replace("_", "-") for dest in vars(script.parse_args([]))}
    flags -= {"--adam-betas", "--aux-minibatch-trajs", "--aux-learning-rate"}  # set by Section 4's adjustments
    assert flags <= helped, sorted(flags - helped)


def test_a_runs_dir_with_a_tilde_is_the_home_folder(tmp_path, monkeypatch):
    """`--runs-dir=~/runs` reaches the script with its `~` (the shell expands only a word that starts with it)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    run_dir = load("ppo").main(tiny_argv("ppo", "--runs-dir=~/runs", "--total-timesteps", str(BATCH)))
    assert os.path.dirname(run_dir) == str(tmp_path / "home" / "runs")
    assert sorted(os.listdir(tmp_path)) == ["home"]  # no folder named ~


def test_resume_takes_the_saved_config_and_only_safe_changes(finished_ppo_ewma, tmp_path):
    """The saved config.json is the parser's defaults: a resume needs no flag but --resume, and the flags that
    cannot change the run's maths may change (here --micro-batch-size, --no-cuda)."""
    import shutil
    ppo_ewma = load("ppo_ewma")
    run_dir = str(shutil.copytree(finished_ppo_ewma, tmp_path / "copy"))
    args = ppo_ewma.parse_args(["--resume", run_dir, "--total-timesteps", str(4 * BATCH), "--micro-batch-size", "16",
                                "--no-cuda"])
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert args.num_envs == config["num_envs"] == 4 and args.learning_rate == config["learning_rate"]
    assert args.total_timesteps == 4 * BATCH and args.micro_batch_size == 16 and args.resume == run_dir
    # a run made with --compile and --capture-video resumes without them (a machine where compiling fails)
    json.dump(config | {"compile": True, "capture_video": True}, open(os.path.join(run_dir, "config.json"), "w"))
    assert vars(ppo_ewma.parse_args(["--resume", run_dir]))["compile"] is True
    args = ppo_ewma.parse_args(["--resume", run_dir, "--no-compile", "--no-capture-video"])
    assert (args.compile, args.capture_video) == (False, False)
