"""data/runs/: every committed run is complete and is still what today's script would run with the same command
line, and the figure commands draw from the committed runs; the learning-curve command (experiments/
learning_curve.py) on synthetic run folders, its tables checked by hand."""
import contextlib
import csv
import io
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest

from conftest import ROOT, load
from synthetic_runs import analysis, figures, has, load_experiment, sweep, write_run

COMMITTED = sweep.COMMITTED
learning_curve = load_experiment("learning_curve")
batch_size = load_experiment("fig2_batch_size")
ablation = load_experiment("cleanrl_ablation")
staleness = load_experiment("fig1_staleness")
ewma_vs_ppo = load_experiment("fig4_ewma_vs_baseline")

# The flags that say which run it is, given on its command line whatever their value.
IDENTITY = ("env_id", "seed", "exp_name", "total_timesteps", "num_envs", "batch_divisor", "update_epochs", "no_adjust")
# Keys that may differ between two launches of the same run: where and how it ran, not what it trained.
PER_LAUNCH = ("runs_dir",  # the launching machine's folder
              "save_model",  # checkpoints or not
              "resume", "evaluate",  # a resumed run records the folder it went on from
              "cuda",  # the GPU where there is one: the algorithm is the same
              "micro_batch_size")  # set at start for the device; micro-batches add up to the same gradient
# Keys only config.json has: worked out at start from the others, or describing the machine and packages.
DERIVED = ("device", "versions", "world_size", "script", "batch_size", "minibatch_size", "num_iterations",
           "global_batch_size")


GPU_RUNS = os.path.join(COMMITTED, "gpu")  # runs on a lent GPU, stopped by SIGTERM when its time was up (issue 55)
CUT_RUNS = os.path.join(COMMITTED, "cut")  # CPU runs stopped for good before their end (a session's end, issue 50)


def committed_folders(parent=COMMITTED):
    """Every folder in data/runs but gpu/ and cut/ (each must be a complete run; there may be none yet)."""
    found = [os.path.join(parent, d) for d in os.listdir(parent) if d not in ("gpu", "cut")] \
        if os.path.isdir(parent) else []
    return sorted(d for d in found if os.path.isdir(d))


def cpu_plans():
    """{(env, exp_name, seed): sweep.Job} of what `fig2_batch_size.py --cpu`, `fig1_staleness.py --cpu` and
    `cleanrl_ablation.py` train (`fig4_ewma_vs_baseline.py --cpu`'s runs have their scripts' own names)."""
    runs = (batch_size.shown_runs(batch_size.parse_args(["--cpu"])) + ablation.plan(sorted(ablation.STAGES))
            + staleness.build_runs(staleness.parse_args(["--cpu"])))
    return {run.key: run for run in runs}


def command_line(config, plans):
    """The flags of the run in `config`: those that identify it and, for a figure runner's run, the options that
    runner passes (sizes, difficulty, --save-model, ...). Everything else is left to today's defaults."""
    options = {key: config[key] for key in IDENTITY if key in config}
    options["num_envs"] = config["num_envs"] * config.get("batch_divisor", 1)  # recorded after Section 4's division
    if config["exp_name"] != config["script"][:-3]:  # not the script's own name: a figure runner's run
        planned = plans.get((config["env_id"], config["exp_name"], config["seed"]))
        if planned is None:  # a run made by hand: its documented line, with its own identity (seed, length...)
            documented = documented_command(config)
            return None if documented is None else documented + sweep.option_tokens(options)
        options.update(planned.options)  # what the runner passes, in place of the recorded values
    return sweep.option_tokens(options)


def documented_command(config):
    """A run made by hand: the flags of its `python SCRIPT ... --exp-name NAME` line in docs/results.md, or None."""
    results = open(os.path.join(ROOT, "docs", "results.md")).read()
    pattern = rf"^python {re.escape(config['script'])} (.*--exp-name {re.escape(config['exp_name'])}(?: .*)?)$"
    found = re.findall(pattern, results, re.M)
    return shlex.split(found[0].split("#")[0]) if found else None


def problems(run_dir, plans, capsys):
    """What is wrong with one committed run folder (empty: nothing)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = {**sweep.ADDED, **json.load(f)}
        with open(os.path.join(run_dir, "progress.csv")) as f:
            rows = list(csv.DictReader(f))
        last = int(float(rows[-1]["global_step"])) if rows else 0
    except (OSError, ValueError, KeyError) as e:
        return [f"cannot read config.json and progress.csv: {e}"]
    found = []
    if last < config.get("total_timesteps", float("inf")):
        found.append(f"progress.csv reaches {last} of total_timesteps {config.get('total_timesteps')}")
    argv = command_line(config, plans)
    if argv is None:
        return found + [f"exp_name {config['exp_name']!r} is neither its script's name, nor a run of "
                        "a --cpu preset's or cleanrl_ablation.py's, nor in a command in docs/results.md: "
                        "which command made it?"]
    return found + differences(config, argv, capsys)


# The defaults before issue 36 (the official code's choices), and PPG's before issue 50 (CleanRL's, with PPO's weights)
EARLIER_DEFAULTS = (sweep.OFFICIAL_CODE, sweep.CLEANRL)


def differences(config, argv, capsys):
    """How config.json differs from what today's script records for the command line argv; nothing for a script's
    own run (its own --exp-name) that is what the script recorded at one of EARLIER_DEFAULTS."""
    differ, own = recorded_differences(config, argv, capsys), config["exp_name"] == config["script"][:-3]
    if own and differ and any(not recorded_differences(config, argv + sweep.option_tokens(former), capsys)
                              for former in EARLIER_DEFAULTS):
        return []
    return differ


def recorded_differences(config, argv, capsys):
    """How config.json differs from what today's script records for the command line argv."""
    try:
        today = vars(load(config["script"][:-3]).parse_args(argv))
    except SystemExit:
        return [f"today's {config['script']} refuses {' '.join(argv)}: {capsys.readouterr().err.strip()}"]
    today = {k: list(v) if isinstance(v, tuple) else v for k, v in today.items()}  # JSON has lists for tuples
    found = []
    for key in sorted((set(config) | set(today)) - set(PER_LAUNCH + DERIVED)):
        if key not in today:
            found.append(f"{key}: in config.json, not a flag of today's {config['script']}")
        elif key not in config:
            found.append(f"{key}: a flag of today's {config['script']}, not in config.json")
        elif config[key] != today[key]:
            found.append(f"{key}: config.json has {config[key]!r}, today's {config['script']} {' '.join(argv)} "
                         f"gives {today[key]!r}")
    return found


# --- Every committed run -------------------------------------------------------------------------------
def test_every_committed_run_is_complete_and_what_todays_script_would_run(capsys):
    plans = cpu_plans()
    report, keys = {}, {}
    for run_dir in committed_folders():
        found = problems(run_dir, plans, capsys)
        if not found:
            config = {**sweep.ADDED, **json.load(open(os.path.join(run_dir, "config.json")))}
            key = (config["env_id"], config["exp_name"], config["seed"], config["total_timesteps"],
                   *map(config.get, sweep.OFFICIAL_CODE))
            if key in keys:  # the figures would show one of them only (a default run before and after issue 36: both)
                found.append(f"the same run as {os.path.basename(keys[key])}")
            keys[key] = run_dir
        if found:
            report[os.path.basename(run_dir)] = found
    assert not report, "\n".join(f"{name}:\n  " + "\n  ".join(found) for name, found in report.items()) + (
        "\nA default changed or a flag was added on purpose? The exemption lists say which keys may differ, and why: "
        "PER_LAUNCH and DERIVED at the top of tests/test_committed_runs.py, ADDED in experiments/sweep.py.")


def test_every_gpu_or_cut_run_is_todays_script_with_every_row_up_to_its_stop(capsys):
    """data/runs/gpu: runs on a lent GPU, most stopped before their total_timesteps; data/runs/cut: CPU runs stopped
    for good before theirs. Each ran on its folder's device, is what today's script runs with its name and seed (a
    probe's own options from its command in docs/results.md), and has a row for every iteration from 1 to its stop."""
    for run_dir in committed_folders(GPU_RUNS) + committed_folders(CUT_RUNS):
        config = json.load(open(os.path.join(run_dir, "config.json")))
        rows = list(csv.DictReader(open(os.path.join(run_dir, "progress.csv"))))
        assert config["device"].startswith("cuda") == run_dir.startswith(GPU_RUNS), run_dir
        argv = command_line(config, {})  # no figure runner trains here: the script's own name, or a documented probe
        assert argv is not None, f"{run_dir}: no `python {config['script']} ... --exp-name` line in docs/results.md"
        assert differences(config, argv, capsys) == [], run_dir
        assert [int(r["iteration"]) for r in rows] == list(range(1, len(rows) + 1)) and len(rows) > 1, run_dir
        assert int(rows[-1]["global_step"]) == len(rows) * config["global_batch_size"], run_dir


def recorded(script, argv, **changes):
    """config.json as `script` writes it for the command line argv (after a JSON round trip), with `changes`."""
    args = vars(load(script).parse_args(argv))
    derived = {"micro_batch_size": 32, "batch_size": 1, "minibatch_size": 1, "num_iterations": 1, "device": "cpu",
               "world_size": 1, "global_batch_size": 1, "script": f"{script}.py", "versions": {"torch": "x"}}
    config = json.loads(json.dumps({**args, **derived}))
    for key, value in changes.items():
        if value is None:
            del config[key]
        else:
            config[key] = value
    return config


def write_committed(parent, config, steps):
    run_dir = os.path.join(str(parent), f"{config['env_id']}__{config['exp_name']}__{config['seed']}__1")
    os.makedirs(run_dir)
    json.dump(config, open(os.path.join(run_dir, "config.json"), "w"))
    with open(os.path.join(run_dir, "progress.csv"), "w") as f:
        f.write("iteration,global_step,episodic_return\n" + "".join(f"{i + 1},{s},1.0\n" for i, s in enumerate(steps)))
    return run_dir


def test_the_check_fails_when_a_default_changes(tmp_path, capsys):
    # a 1M run of ppo.py and a fig2 --cpu ablation as the scripts record them today: nothing to report
    plans = cpu_plans()
    plain = ["--env-id", "starpilot", "--seed", "1", "--total-timesteps", "1000000", "--save-model"]
    ablation = plans[("starpilot", "fig2__ppo_ewma__div16__no-prox", 1)]
    fig2_argv = sweep.command(ablation, "runs")[2:]

    def check(script, argv, steps=(1_000_000,), **changes):
        folder = write_committed(tmp_path / str(len(os.listdir(tmp_path))), recorded(script, argv, **changes), steps)
        return problems(folder, plans, capsys)
    assert check("ppo", plain) == [] and check("ppo_ewma", fig2_argv) == []
    assert check("ppo", plain, cuda=True, runs_dir="elsewhere", resume="runs/x", micro_batch_size=0) == []
    assert check("ppo", plain, **sweep.OFFICIAL_CODE) == []  # a default run from before issue 36 changed the defaults
    assert check("ppo", plain, **{**sweep.OFFICIAL_CODE, "adam_eps": 1e-6})[0].startswith("adam_eps")  # not both
    assert check("ppg_ewma", plain, init="pytorch") == []  # PPG's weights before issue 50: CleanRL PPO's
    assert check("ppg", plain, init="pytorch", adam_eps=1e-8)[0].startswith("adam_eps")  # with no other change
    # the same runs after a default changed, a flag was added or removed, or the run stopped early
    assert check("ppo", plain, gamma=0.99)[0].startswith("gamma: config.json has 0.99, today's ppo.py")
    assert check("ppo_ewma", fig2_argv, beta_prox=0.5)[0].startswith("beta_prox: config.json has 0.5")
    assert check("ppo_ewma", fig2_argv, adam_betas=[0.9, 0.99])[0].startswith("adam_betas")
    assert check("ppo", plain, ent_coef=None) == ["ent_coef: a flag of today's ppo.py, not in config.json"]
    assert check("ppo", plain, old_flag=1) == ["old_flag: in config.json, not a flag of today's ppo.py"]
    assert check("ppo", plain, steps=(16_384, 32_768)) == ["progress.csv reaches 32768 of total_timesteps 1000000"]
    # a figure runner's run that the runner does not plan, and one today's script refuses
    assert "which command made it" in check("ppo_ewma", fig2_argv, exp_name="fig2__ppo_ewma__div2")[0]
    assert "refuses" in check("ppo_ewma", plain, update_epochs=2, batch_divisor=4)[0]
    # a run made by hand: the command results.md prints for its --exp-name is what it must match
    by_hand = plain[:-1] + ["--bf16", "--exp-name", "ppo_bf16"]
    assert check("ppo", by_hand) == []
    assert check("ppo", by_hand, bf16=False)[0].startswith("bf16: config.json has False, today's ppo.py")
    assert "which command made it" in check("ppo", by_hand, exp_name="ppo_by_hand_nowhere")[0]


# --- The figure commands on the committed runs ---------------------------------------------------------
def markdown_tables(text):
    """Each Markdown table in `text`: its run of lines starting with '|', joined."""
    tables, lines = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            tables, lines = tables + ["\n".join(lines)], []
    return tables


@pytest.fixture(scope="module")
def documented(tmp_path_factory):
    """Every `python experiments/...` command in docs/results.md that draws and prints from data/runs (not one that
    trains), run once, its files in a folder of its own: command line -> (runner, what main returned, its console)."""
    results = open(os.path.join(ROOT, "docs", "results.md")).read()
    commands = re.findall(r"^python (experiments/(?:tools/)?(?:learning_curve|cleanrl_ablation|fig[124]_\w+)\.py"
                          r"(?:[^\n]*\\\n)*[^\n]*)", results, re.M)
    out = {}
    for command in commands:
        argv = shlex.split(command.replace("\\\n", " ").split("#")[0])
        command = shlex.join(argv)
        if {"--train", "--stage"} & set(argv) or ("--cpu" in argv and "--plot-only" not in argv):
            continue
        argv = [os.path.join(ROOT, a) if a.startswith(("data/", "docs/")) else a for a in argv[1:]]
        argv = [a for i, a in enumerate(argv) if "-o" not in argv[i - 1:i + 1]]  # no -o FILE: ours in tmp
        runner = {"learning_curve": learning_curve, "cleanrl_ablation": ablation, "fig1_staleness": staleness,
                  "fig2_batch_size": batch_size, "fig4_ewma_vs_baseline": ewma_vs_ppo,
                  }[os.path.basename(command.split()[0])[:-3]]
        tmp = tmp_path_factory.mktemp("documented")
        in_tmp = ["--runs-dir", str(tmp), "--out-dir", str(tmp), "--summary-dir", str(tmp)]
        in_tmp = {learning_curve: ["-o", str(tmp / "figure.png")], ablation: []}.get(runner, in_tmp)
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            made = runner.main(argv + in_tmp)
        out[command] = (runner, made, printed.getvalue())
    return out


def test_figure_commands_draw_the_committed_runs(documented):
    """The documented figure commands (run once for this test and the next) draw every committed run."""
    made, printed = documented["experiments/tools/learning_curve.py"][1:]  # the README's runs at 1M env steps
    assert os.path.getsize(made) > 0
    runs = learning_curve.default_runs(COMMITTED, 1_000_000)
    assert runs and all(label in printed for label in learning_curve.run_labels(runs))
    assert ("| CleanRL PPO seed 1 (GPU) | CleanRL PPO seed 2 (GPU) | CleanRL PPO seed 1 (this CPU) | "
            "CleanRL PPG seed 1 (GPU) |") in printed
    for prefix, runner in (("fig2", batch_size), ("fig1", staleness)):  # --cpu --plot-only: the runs committed so far
        runs = [d for d in committed_folders() if os.path.basename(d).split("__")[1:2] == [prefix]]
        [(figure, summary)] = [made for r, made, _ in documented.values() if r is runner]
        assert os.path.getsize(figure) > 0
        # fig1's K = 0 is the README's ppo.py runs, but for the value-clip control's
        drawn = {row["run"] for row in csv.DictReader(open(summary)) if row["run"].split("__")[1] == prefix}
        assert drawn == set(map(os.path.basename, runs)), prefix


def test_the_tables_in_the_docs_are_what_their_commands_print_from_the_committed_data(documented):
    """Every such command prints tables that results.md shows verbatim; and the README's speed and Fig. 1 tables
    are among them."""
    results = open(os.path.join(ROOT, "docs", "results.md")).read()
    printed = []
    for command, (_, _, out) in documented.items():
        tables = markdown_tables(out)
        missing = [t.splitlines()[0] for t in tables if t not in results]
        assert tables and not missing, f"python {command}: printed, not in docs/results.md: {missing}"
        printed += tables
    assert len(printed) >= 12
    readme = open(os.path.join(ROOT, "README.md")).read()
    for header in ("| run | env steps | wall time |", "| objective | K = 0 |"):
        shown = [t for t in markdown_tables(readme) if t.startswith(header)]
        assert shown and all(t in printed for t in shown), f"README.md's {header}: not what the commands print"


def test_the_readme_runs_name_todays_defaults():
    for script, named in sweep.DEFAULTS.items():
        defaults = vars(load(script).parse_args([]))
        assert {k: defaults[k] for k in named} == named, script
    # ppo.py's are the ablation's runs with all four groups switched: the same options, so today's defaults
    all_four = [r for r in ablation.plan(sorted(ablation.STAGES)) if r.tags["groups"] == "+".join(ablation.GROUPS)]
    readme = [r for r in sweep.readme_runs(1_000_000) if r.script == "ppo"]
    assert [(r.exp_name, r.seed, r.options) for r in readme] == [(r.exp_name, r.seed, r.options) for r in all_four]


# --- learning_curve.py on synthetic runs ---------------------------------------------------------------
def test_learning_curve_tables_and_figure_by_hand(tmp_path, capsys, monkeypatch):
    runs = tmp_path / "docs_runs"
    # ppo: 10 iterations of 30,000 steps, 3 s each; ppo_ewma: 6 of 50,000, 5 s each; both 300,000 steps
    today = {"total_timesteps": 300_000, "save_model": True, **sweep.DEFAULTS["ppo"]}
    ppo = sweep.README_EXP_NAMES["ppo"]  # the ablation's name: its runs with all four groups are the README's
    write_run(runs, "starpilot", ppo, 1, [1, 2, 3, 4, 5, 6, None, 8, 9, 10], batch=30_000, seconds_per_iteration=3,
              config={"script": "ppo.py", **today}, extra={"sps": [10, 20, 30, 40, 50, 60, 70, 80, 90, 5]})
    write_run(runs, "starpilot", "ppo_ewma", 1, [2, 4, 6, 8, 10, 12], batch=50_000, seconds_per_iteration=5,
              config={"script": "ppo_ewma.py", **today})
    # not taken by default: a figure runner's run, a run of another length, one at other defaults, another game
    write_run(runs, "starpilot", "fig2__ppo_ewma__div1", 1, [0] * 6, batch=50_000,
              config={"script": "ppo_ewma.py", **today})
    write_run(runs / "longer", "starpilot", ppo, 1, [0] * 12, batch=50_000,
              config={"script": "ppo.py", **today, "total_timesteps": 600_000})
    write_run(runs, "starpilot", ppo, 2, [0] * 6, batch=50_000, config={"script": "ppo.py", **today, "adam_eps": 1})
    write_run(runs / "other_game", "bigfish", ppo, 2, [0] * 6, batch=50_000, config={"script": "ppo.py", **today})
    monkeypatch.setattr(sweep, "COMMITTED", str(runs))
    drawn, save = {}, figures.save_figure

    def record(fig, out):
        drawn.update(title=fig._suptitle.get_text(), ylabel=fig.axes[0].get_ylabel(),
                     lines={line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()})
        save(fig, out)
    monkeypatch.setattr(figures, "save_figure", record)
    out = str(tmp_path / "figures" / "learning.png")
    assert learning_curve.main(["--total-timesteps", "300000", "-o", out, "--smooth-steps", "60000"]) == out
    printed = capsys.readouterr().out
    assert os.path.getsize(out) > 0 and "Mean episodic return per 100,000 env steps\n" in printed  # none resumed
    # return per 100k env steps: the iterations ending in (0, 100k], (100k, 200k], (200k, 300k]
    # ppo: 1 2 3 | 4 5 6 | (none) 8 9 10;  ppo_ewma: 2 4 | 6 8 | 10 12
    assert ("| env steps | ppo seed 1 | ppo_ewma seed 1 |\n|---|---|---|\n| (0, 100k] | 2.00 | 3.00 |\n"
            "| (100k, 200k] | 5.00 | 7.00 |\n| (200k, 300k] | 9.00 | 11.00 |\n") in printed
    # wall time = last time_s; env steps / wall time; median of the sps column
    assert "| ppo seed 1 | 300,000 | 30 s | 10000 | 45 |" in printed
    assert "| ppo_ewma seed 1 | 300,000 | 30 s | 10000 | 10000 |" in printed
    assert "one game, one seed" in drawn["title"] and "60,000 env steps" in drawn["ylabel"]
    # smoothed over the iterations ending in the last 60,000 env steps: 2 iterations of either size here
    assert drawn["lines"]["ppo_ewma"] == pytest.approx([2, 3, 5, 7, 9, 11])
    assert drawn["lines"]["ppo"] == pytest.approx([1, 1.5, 2.5, 3.5, 4.5, 5.5, 8, 8.5, 9.5])
    # run folders on the command line: every run there, whatever made it, of one game (a curve averages a script's
    # runs); a shared label becomes the folder name
    with pytest.raises(SystemExit) as exit_info:
        learning_curve.main([str(runs), "-o", out])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "runs of one game and mode at a time, got bigfish (easy), starpilot (easy)" in err
    shutil.rmtree(runs / "other_game")
    learning_curve.main([str(runs), "-o", out])
    header = capsys.readouterr().out.split("\n")[2]
    assert header.count("|") == 7 and f"starpilot__{ppo}__1__1001" in header and "fig2__ppo_ewma__div1" in header
    # without -o, run folders draw curves.png here, never the README's committed figure
    monkeypatch.chdir(tmp_path)
    assert learning_curve.main([str(runs)]) == "curves.png" and os.path.getsize(tmp_path / "curves.png") > 0
    for flag in ("--window", "--smooth-steps"):
        with pytest.raises(SystemExit) as exit_info:
            learning_curve.main([str(runs), flag, "0"])
        assert exit_info.value.code == 2 and f"argument {flag}: must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        learning_curve.main([str(tmp_path / "figures"), "-o", out])
    assert exit_info.value.code == 2 and "no runs" in capsys.readouterr().err
    # --reference: an episode log's window means beside the runs (one episode of 4 and one of 6 in (0, 100k])
    log = tmp_path / "ppg_procgen_seed1_gpu_episodes.csv"
    log.write_text("global_step,episodic_return\n1000,4.0\n99000,6.0\n150000,1.0\n")
    learning_curve.main([str(runs), "-o", out, "--reference", str(log)])
    lines = capsys.readouterr().out.split("\n")
    assert lines[2].endswith("| CleanRL ppg_procgen_seed1_gpu |") and lines[4].endswith("| 5.00 |")
    assert lines[5].endswith("| 1.00 |")
    with pytest.raises(SystemExit) as exit_info:
        learning_curve.main([str(runs), "-o", out, "--reference", str(tmp_path / "missing.csv")])
    assert exit_info.value.code == 2 and "not a file" in capsys.readouterr().err
    # a bf16 run is its own column and curve (other numerics), as a GPU run is
    write_run(tmp_path / "bf16", "starpilot", "ppo_bf16", 1, [1, 2], batch=50_000, config={"script": "ppo.py",
                                                                                          "bf16": True})
    learning_curve.main([str(tmp_path / "bf16"), "-o", out])
    assert "| env steps | ppo (bf16) seed 1 |\n" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # --train trains the README's runs, not folders given
        learning_curve.main(["--train", str(runs), "-o", out])
    assert exit_info.value.code == 2 and "give no RUN_DIR" in capsys.readouterr().err
    # --train: the README's runs, at today's defaults named on their command lines, committed to data/runs
    trained = []
    monkeypatch.setattr(sweep, "run_all", lambda runs, runs_dir, committed: trained.append((runs, committed)) or [])
    learning_curve.main(["--train", "--total-timesteps", "300000", "-o", out])
    (planned, committed), = trained
    assert committed == str(runs) and [(r.script, r.seed) for r in planned] == [
        ("ppo", 1), ("ppo", 2), ("ppo_ewma", 1), ("ppo_ewma", 2), ("ppg", 1), ("ppg_ewma", 1)]
    assert [has(sweep.command(r, "x"), "--init", "normed") for r in planned] == [False] * 4 + [True] * 2

def test_learning_curve_shows_ppgs_aux_phases_and_cleanrls_ppg(tmp_path, capsys, monkeypatch):
    # a PPG run of 4 iterations, N_pi 2: its aux columns filled in the rows of iterations 2 and 4 only
    aux = {"aux_kl": [None, 0.00012345, None, 0.0111], "aux_value_loss": [None, 0.1394, None, 0.159],
           "aux_true_value_loss": [None, 0.1316, None, 0.1403], "aux_time_s": [None, 110.4, None, 5346]}
    run = write_run(tmp_path / "runs", "starpilot", "ppg", 1, [1, 2, 3, 4], batch=50_000, extra=aux,
                    config={"script": "ppg.py"})
    learning_curve.main([run, "-o", str(tmp_path / "curve.png")])
    assert ("| run | aux phase after iteration | KL to pi_old | aux value loss | true value loss | time |\n"
            "|---|---|---|---|---|---|\n| ppg seed 1 | 2 | 0.00012 | 0.139 | 0.132 | 110 s (2 min) |\n"
            "| ppg seed 1 | 4 | 0.01110 | 0.159 | 0.140 | 5,346 s (89 min) |\n") in capsys.readouterr().out
    learning_curve.main([write_run(tmp_path, "starpilot", "ppo", 1, [1], config={"script": "ppo.py"}),
                         "-o", str(tmp_path / "curve.png")])
    assert "aux" not in capsys.readouterr().out  # no PPG run: no aux table
    # CleanRL's PPG beside the README's runs: each episode log in data/cleanrl/ppg, named by seed and machine
    control = tmp_path / "ppg"
    control.mkdir()
    (control / "ppg_procgen_seed1_gpu_episodes.csv").write_text("global_step,episodic_return\n1000,4\n99000,6\n"
                                                                "1000500,2\n")
    (control / "ppg_procgen_seed2_cpu_episodes.csv").write_text("global_step,episodic_return\n5000,1\n1048576,3\n")
    (control / "ppg_procgen_seed3_gpu_episodes.csv").write_text("global_step,episodic_return\n5000,1\n999999,3\n")
    (control / "ppg_procgen_seed1_gpu_iterations.csv").write_text("global_step,aux_kl_loss\n1000,0.1\n")
    monkeypatch.setattr(learning_curve, "CLEANRL_PPG", str(control))
    got = learning_curve.cleanrl_ppg(100_000)  # seed 3 stopped short of 1M: left out (docs/results.md has those)
    assert list(got) == ["CleanRL PPG seed 1 (GPU)", "CleanRL PPG seed 2 (this CPU)"]
    assert [got[label][::10] for label in got] == [[5.0, 2.0], [1.0, 3.0]]  # (0, 100k] and (1M, 1.1M]


def test_learning_curve_leaves_out_the_first_iteration_after_a_resume(tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path, "starpilot", "ppo", 1, [1, 2, 9, 4, 5, 6], batch=50_000, config={"script": "ppo.py"})
    monkeypatch.setattr(analysis, "RESUMED", {os.path.basename(run): (3,)})  # resumed from iteration 2's checkpoint
    learning_curve.main([run, "-o", str(tmp_path / "curve.png"), "--smooth-steps", "50000"])
    out = capsys.readouterr().out
    assert "| (0, 100k] | 1.50 |\n| (100k, 200k] | 4.00 |\n| (200k, 300k] | 5.50 |" in out
    assert "per 100,000 env steps (the first iteration after a resume left out)" in out


def test_git_keeps_a_committed_runs_files_and_leaves_out_its_checkpoint():
    """data/runs/<run>/config.json and progress.csv can be committed; a checkpoint copied there by mistake cannot."""
    run = os.path.join(os.path.relpath(sweep.COMMITTED, ROOT), "starpilot__ppo__1__1")
    paths = [os.path.join(run, name) for name in ("config.json", "progress.csv", sweep.CHECKPOINT)]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert ignored == [paths[2]]
