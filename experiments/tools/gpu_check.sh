#!/usr/bin/env bash
# The project on a lent GPU machine (Python, a CUDA build of torch and numpy; no package index, no libGL), in one
# prepared call per check. Prepare here, once, from the clone's root: gpu_prep.sh fills the git-ignored .gpu/ with our
# wheels, Procgen's GL libraries and setup.sh; `prep` adds CleanRL's two scripts from a clone of vwxyzjn/cleanrl and
# their wheels, gym 0.23.1 and tyro, so no CleanRL code is committed:
#     experiments/tools/gpu_prep.sh && experiments/tools/gpu_check.sh prep PATH/TO/cleanrl
# Then on the GPU machine, in a copy of the clone with its .gpu/, each within one command's limit:
#     source .gpu/setup.sh && experiments/tools/gpu_check.sh speed 480  # CUDA tests, the graph, bench_speed.py, CleanRL
#     source .gpu/setup.sh && experiments/tools/gpu_check.sh learn 400  # ppo_ewma.py beside ppg_ewma.py, to SIGTERM
#     source .gpu/setup.sh && experiments/tools/gpu_check.sh ppg 560    # ppo.py's speed beside CleanRL's, then ppg.py's
#                                                                        # learning beside CleanRL's ppg_procgen.py
#     source .gpu/setup.sh && experiments/tools/gpu_check.sh seeds 500  # both again at seeds 2 and 3, four runs at once
#     source .gpu/setup.sh && OURS_ONLY=1 PPG="--init normed --exp-name ppg_init_normed" \
#       experiments/tools/gpu_check.sh seeds 450                        # a probe: ppg.py with other options, seeds 2, 3
#     source .gpu/setup.sh && experiments/tools/gpu_check.sh fig4 540   # Fig. 4, laptop scale: pilots, pick, runs 8 at once
# The number is the seconds the check may take; each step is given what is left. Everything goes to $OUT (default
# /tmp/gpu_check). On a CPU, at tiny sizes, to try it:
#     CUDA=--no-cuda SIZES="--num-envs 8 --num-steps 32" PPG="--n-pi 2" experiments/tools/gpu_check.sh learn 120
#     CUDA=--no-cuda SIZES="--num-envs 8 --num-steps 32" ITER_STEPS=256 experiments/tools/gpu_check.sh speed 300
#     CUDA=--no-cuda SIZES="--num-envs 8 --num-steps 32" PPG="--n-pi 2" STEPS=1024 \
#       experiments/tools/gpu_check.sh ppg 200
#     CUDA=--no-cuda SIZES="--num-envs 8 --num-steps 32" PPG="--n-pi 2" \
#       CLEANRL_SIZES="--num-envs 8 --num-steps 32 --n-iteration 2" STEPS=1024 experiments/tools/gpu_check.sh seeds 120
#     CUDA=--no-cuda FIG4=--tiny FIG4_RUNS=/tmp/fig4_try experiments/tools/gpu_check.sh fig4 120
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
OUT=${OUT:-/tmp/gpu_check}
CUDA=${CUDA:-}     # --no-cuda to try it on a CPU
SIZES=${SIZES:-}   # e.g. --num-envs 8 --num-steps 32 (bench_speed.py and the training scripts take the same flags)
PPG=${PPG:-}       # PPG scripts only, e.g. --n-pi 2
mkdir -p "$OUT"
STEPS=${STEPS:-1048576}  # ppg: the env steps of both PPG runs (two whole phases of 64 x 256 x 32)
ITER_STEPS=${ITER_STEPS:-16384}  # speed: the env steps of one iteration at SIZES (64 x 256)
mode=${1:?usage: gpu_check.sh prep CLEANRL_CLONE | speed SECONDS | learn SECONDS | ppg SECONDS | seeds SECONDS | fig4 SECONDS}

if [ "$mode" = prep ]; then
  mkdir -p .gpu/cleanrl/whl
  for f in ppo_procgen.py ppg_procgen.py; do git -C "${2:?the path of a clone of vwxyzjn/cleanrl}" show \
    HEAD:cleanrl/$f > .gpu/cleanrl/$f; done
  git -C "$2" log -1 --format='CleanRL %h %cs' > .gpu/cleanrl/commit
  git rev-parse --short HEAD > .gpu/commit  # what the machine line names: prepare after the last commit
  pip wheel -q --no-deps -w .gpu/cleanrl/whl gym==0.23.1  # an sdist: built here, pure Python
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux2014_x86_64 --platform any -d .gpu/cleanrl/whl tyro==1.0.17
  rm -f .gpu/cleanrl/whl/typing_extensions-*.whl  # the GPU machine's own serves (torch uses it)
  echo "prepared .gpu/cleanrl: $(ls .gpu/cleanrl/whl | tr '\n' ' ')"
  exit 0
fi

end=$((SECONDS + ${2:-300}))
left() { local s=$((end - SECONDS - ${1:-0})); echo $((s > 1 ? s : 1)); }  # seconds left, less a margin (at least 1)
{ echo "commit $(cat .gpu/commit 2>/dev/null || git rev-parse --short HEAD)"; nvidia-smi -L 2>&1 | head -2
  grep -m1 'model name' /proc/cpuinfo; echo "cores $(nproc)"
  python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)"; } | tee "$OUT/machine.txt"
export BENCH_COMMIT=$(cat .gpu/commit 2>/dev/null || echo unknown)
python3 -m pip install -q --no-index --no-deps --target /tmp/cleanrl-site .gpu/cleanrl/whl/*.whl >/dev/null 2>&1
clean="env PYTHONPATH=/tmp/cleanrl-site:${PYTHONPATH:-} python3 $PWD/.gpu/cleanrl"  # its gym 0.23.1 before ours
bench() { timeout -k 5 "$1" python3 experiments/tools/bench_speed.py $SIZES --extra="$CUDA" "${@:2}"; }
runs=/tmp/gpu_runs; mkdir -p $runs
keep() { for d in $runs/*/; do [ -f $d/config.json ] || continue; mkdir -p "$OUT/$(basename $d)"
  cp $d/config.json $d/progress.csv "$OUT/$(basename $d)/" 2>/dev/null; done; }  # the record, not checkpoints
stop() { kill -0 $1 2>/dev/null && kill -TERM $1 && echo "$(date +%T) SIGTERM to $2 (pid $1)" | tee -a "$OUT/learn.txt"; }
n=$(nproc); half=$((n / 2)); first="0-$((half - 1))"; second="$half-$((n - 1))"; [ $half -lt 2 ] && first=0 second=$((n - 1))

if [ "$mode" = speed ]; then
  # 1. The tests named for CUDA (26; on the CPU 22 of them skip for want of a GPU)
  timeout -k 5 "$(left 200)" python3 -m pytest -q -p no:cacheprovider -k cuda tests 2>&1 | tee "$OUT/tests.log"
  # 2. The rollout's CUDA graph changes no maths: ppo.py's first 3 iterations at seed 1 with it, then with
  #    cuda_graph replaced by the eager forward; their learning columns side by side (TF32's rounding apart)
  rm -rf $runs/graph_on $runs/graph_off
  for graph in on off; do timeout -k 5 "$(left 180)" python3 -c 'import sys, ppo
if sys.argv[1] == "off": ppo.cuda_graph = lambda net, num_envs: net
ppo.main(sys.argv[2:])' $graph --seed 1 --total-timesteps $((3 * ITER_STEPS)) --no-save-model \
    --runs-dir $runs/graph_$graph $SIZES $CUDA 2>&1 | tail -4; done | tee "$OUT/graph.log"
  python3 - $runs/graph_on/*/progress.csv $runs/graph_off/*/progress.csv <<'PY' 2>&1 | tee -a "$OUT/graph.log"
import csv, sys
on, off = (list(csv.DictReader(open(path))) for path in sys.argv[1:3])
for a, b in zip(on, off):  # the columns the learner computes (the time and speed ones are the clock's)
    cols = [k for k in a if a[k] and b[k] and k not in ("time_s", "sps")]
    worst = max(abs(float(a[k]) - float(b[k])) / max(abs(float(b[k])), 1e-8) for k in cols)
    print(f"iteration {a['iteration']}: largest relative difference {worst:.2e} over {len(cols)} columns; sps "
          f"{a['sps']} with the graph, {b['sps']} without")
PY
  # 3. ppo.py beside CleanRL's ppo_procgen.py unmodified (its gym 0.23.1 and tyro before our gym 0.26.2 on the path),
  #    then ppo_ewma.py and ppg.py, then all three in bf16: each bench_speed.py call a table of its own, in order of
  #    importance, each cut at its share of the time, so that a cut loses the least important
  bench "$(left 150)" --scripts ppo --cleanrl "$clean/ppo_procgen.py" --iterations 6 --warmup 2 --repeats 2 2>&1 \
    | tee "$OUT/bench.log"  # the comparison first
  bench "$(left 90)" --scripts ppo_ewma ppg 2>&1 | tee -a "$OUT/bench.log"
  bench "$(left 40)" --scripts ppo ppo_ewma ppg --options " --bf16" 2>&1 | tee -a "$OUT/bench.log"
  # 4. ppo.py's pieces on random data (an env step, a policy forward of 64, eager and graphed, one update)
  timeout -k 5 "$(left 20)" python3 experiments/tools/bench_speed.py --pieces $SIZES $CUDA 2>&1 | tee "$OUT/pieces.log"
  # 5. torch.compile, ppo.py first (each new shape compiles once per process: minutes on a first run), as time allows
  bench "$(left 5)" --scripts ppo ppo_ewma ppg --options " --compile" " --bf16 --compile" 2>&1 | tee "$OUT/bench_compile.log"
  exit 0
fi

if [ "$mode" = learn ]; then
  # ppo_ewma.py and ppg_ewma.py at the defaults, seed 1, side by side on the one GPU, each on half the CPU cores. A
  # SIGTERM ends each cleanly (the iteration, or PPG's aux phase, finishes; a checkpoint is saved); PPG-EWMA gets it
  # first, since its aux phase and a mid-phase checkpoint (up to 6.4 GB of frames) take longest. config.json and
  # progress.csv are copied to $OUT every 5 s, so a cut command still brings them back; checkpoints stay there.
  taskset -c $first python3 ppo_ewma.py --env-id starpilot --seed 1 --runs-dir $runs $SIZES $CUDA \
    > "$OUT/ppo_ewma.log" 2>&1 & ppo=$!
  taskset -c $second python3 ppg_ewma.py --env-id starpilot --seed 1 --runs-dir $runs $SIZES $PPG $CUDA \
    > "$OUT/ppg_ewma.log" 2>&1 & ppg=$!
  while [ "$(left 120)" -gt 1 ] && kill -0 $ppg 2>/dev/null; do sleep 5; keep; done; stop $ppg ppg_ewma.py
  while [ "$(left 45)" -gt 1 ] && kill -0 $ppo 2>/dev/null; do sleep 5; keep; done; stop $ppo ppo_ewma.py
  while [ "$(left 12)" -gt 1 ] && { kill -0 $ppo || kill -0 $ppg; } 2>/dev/null; do sleep 2; done
  stop $ppo ppo_ewma.py; stop $ppg ppg_ewma.py  # still running: a second SIGTERM stops at once (the last checkpoint kept)
  wait; keep
  for d in $runs/*/; do echo "$(basename $d): $(tail -1 $d/progress.csv | cut -d, -f1-2) (iteration, env steps); " \
    "$(ls -la $d | grep checkpoint)"; done | tee -a "$OUT/learn.txt"
  grep -h "Stopped\|error" "$OUT"/*.log | tee -a "$OUT/learn.txt"
  exit 0
fi
if [ "$mode" = ppg ]; then
  # 1. ppo.py's speed beside CleanRL's ppo_procgen.py unmodified, on this card (about 90 s)
  bench "$(left 430)" --scripts ppo --cleanrl "$clean/ppo_procgen.py" 2>&1 | tee "$OUT/bench.log"
  # 2. ppg.py at the defaults beside CleanRL's ppg_procgen.py unmodified, seed 1, STEPS env steps, each on half the
  #    cores: does our PPG learn as CleanRL's does? CleanRL prints an episode's return per line and has no
  #    resume; ppg.py gets SIGTERM near the end (its aux phase, if one is running, finishes first).
  taskset -c $first python3 ppg.py --env-id starpilot --seed 1 --total-timesteps $STEPS --runs-dir $runs $SIZES $PPG \
    $CUDA > "$OUT/ppg.log" 2>&1 & ours=$!
  [ -n "$CUDA" ] && theirs_cuda="--no-cuda"  # tyro's flag
  (cd /tmp && exec taskset -c $second $clean/ppg_procgen.py --env-id starpilot --seed 1 --total-timesteps $STEPS \
    ${theirs_cuda:-} ${CLEANRL_SIZES:-} > "$OUT/cleanrl_ppg.log" 2>&1) & theirs=$!  # it writes /tmp/runs/
  while [ "$(left 30)" -gt 1 ] && { kill -0 $ours || kill -0 $theirs; } 2>/dev/null; do sleep 5; keep; done
  stop $ours ppg.py
  while [ "$(left 10)" -gt 1 ] && { kill -0 $ours || kill -0 $theirs; } 2>/dev/null; do sleep 2; done
  stop $ours ppg.py; stop $theirs ppg_procgen.py
  wait; keep
  cp /tmp/runs/*/events.out.tfevents.* "$OUT/cleanrl_ppg.tfevents" 2>/dev/null  # its aux losses, per phase
  grep -h "Stopped\|error\|Error" "$OUT"/ppg.log | tee -a "$OUT/learn.txt"
  tail -2 "$OUT/cleanrl_ppg.log" | tee -a "$OUT/learn.txt"
  exit 0
fi
if [ "$mode" = seeds ]; then
  # The seed noise of the PPG comparison: ppg.py and CleanRL's ppg_procgen.py, each at its defaults, for
  # each seed in SEEDS, all side by side on the one GPU, each on an equal share of the cores. The returns up to STEPS
  # are the record, so nothing is saved and every run still going at the deadline is killed: a run that has passed
  # STEPS loses only its last aux phase, which no return comes after. Everything comes back in one file, seeds.tgz.
  # OURS_ONLY=1: ppg.py alone (with PPG's options, e.g. --init normed), on twice the cores.
  SEEDS=${SEEDS:-2 3}; a=0; per=$((n / ((${OURS_ONLY:-0} ? 1 : 2) * $(wc -w <<< "$SEEDS")))); [ $per -lt 1 ] && per=1
  [ -n "$CUDA" ] && theirs_cuda="--no-cuda"  # tyro's flag
  for s in $SEEDS; do
    taskset -c $a-$((a + per - 1)) python3 ppg.py --env-id starpilot --seed $s --total-timesteps $STEPS --runs-dir $runs \
      --no-save-model $SIZES $PPG $CUDA > "$OUT/ppg_seed$s.log" 2>&1 &
    a=$(((a + per) % n)); [ "${OURS_ONLY:-0}" = 1 ] && continue
    (cd /tmp && exec taskset -c $a-$((a + per - 1)) $clean/ppg_procgen.py --env-id starpilot --seed $s \
      --total-timesteps $STEPS ${theirs_cuda:-} ${CLEANRL_SIZES:-} > "$OUT/cleanrl_ppg_seed$s.log" 2>&1) &  # to /tmp/runs/
    a=$(((a + per) % n))
  done
  while [ "$(left 20)" -gt 1 ] && [ -n "$(jobs -pr)" ]; do sleep 5; done
  for p in $(jobs -pr); do kill -KILL $p; done; wait; keep
  for d in /tmp/runs/*/; do [ -d "$d" ] || continue  # CleanRL's TensorBoard files: its losses, its aux phases'
    mkdir -p "$OUT/cleanrl_$(basename $d)"; cp $d/events.out.tfevents.* "$OUT/cleanrl_$(basename $d)/"; done
  for d in $runs/*/; do echo "$(basename $d): $(tail -1 $d/progress.csv | cut -d, -f1-2) (iteration, env steps)"; done
  tail -qn1 "$OUT"/cleanrl_ppg_seed*.log 2>/dev/null
  tar czf /tmp/seeds.tgz -C "$OUT" . && find "$OUT" -mindepth 1 ! -name machine.txt -delete && mv /tmp/seeds.tgz "$OUT/"
  exit 0
fi
if [ "$mode" = fig4 ]; then
  # Fig. 4 at laptop scale (experiments/fig4_ewma_vs_baseline.py --cpu, the same runs) on the GPU: the pilots, the pick,
  # then the picked games' runs, eight at a time on the one GPU, an eighth of the cores each (StarPilot's are the
  # README's, in data/runs). Each finished run's config.json and progress.csv goes to FIG4_RUNS (data/runs/gpu) and
  # comes back in fig4.tgz, with the runs' logs and the progress.csv of any run the deadline cut.
  FIG4_RUNS=${FIG4_RUNS:-data/runs/gpu}; mkdir -p "$FIG4_RUNS"
  timeout -k 20 "$(left 30)" python3 experiments/fig4_ewma_vs_baseline.py --cpu --committed "$FIG4_RUNS" \
    --runs-dir $runs/fig4 --parallel 8 --cores-per-run $((n >= 8 ? n / 8 : 1)) --out-dir "$OUT" $CUDA ${FIG4:-} \
    2>&1 | tee "$OUT/fig4.log"
  while pgrep -f "$runs/fig4" >/dev/null && [ "$(left 5)" -gt 1 ]; do sleep 1; done  # cut runs: their checkpoints
  tar czf "$OUT/fig4.tgz" --exclude=checkpoint.pt --exclude=run.lock "$FIG4_RUNS" $runs/fig4 2>/dev/null
  exit 0
fi
echo "gpu_check.sh: unknown mode $mode" >&2; exit 2
