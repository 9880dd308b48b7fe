# Sourced on the GPU machine from the repository root as .gpu/setup.sh, where experiments/tools/gpu_prep.sh copies it:
# installs the wheels of .gpu/ beside the machine's own torch and numpy, and puts the GL/X11 libraries of .gpu/ on the
# library path.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-site .gpu/whl/*.whl >/dev/null 2>&1 \
  || { echo "setup.sh: wheel install failed" >&2; return 1; }
mkdir -p /tmp/gpu-gl && for f in .gpu/deb/*.deb; do dpkg -x "$f" /tmp/gpu-gl; done
export PYTHONPATH=/tmp/gpu-site${PYTHONPATH:+:$PYTHONPATH}
gl=/tmp/gpu-gl/usr/lib/x86_64-linux-gnu:/tmp/gpu-gl/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$gl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
# The check makes a Procgen environment: that is when Procgen's library (and libGL) is loaded.
python3 -c "import torch, procgen; procgen.ProcgenGym3Env(num=1, env_name='coinrun').observe()
print('gpu setup: torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'procgen env ok')" 2>&1 \
  | grep -v -i 'gym has been\|upgrade to gymnasium\|import gym\|migration guide'
