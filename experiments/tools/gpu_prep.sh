#!/usr/bin/env bash
# Prepare, on a machine with a package index, what a bare GPU machine needs to run this project's scripts and tests:
# that machine has Python 3.12, a CUDA build of torch and numpy 2, but no package index and no libGL.
#     experiments/tools/gpu_prep.sh
# It fills the git-ignored .gpu/ of this clone: Python 3.12 wheels, Debian's GL/X11 client libraries (Procgen's
# library links libGL.so.1), and setup.sh (a copy of gpu_setup.sh). Copy the clone with its .gpu/ to the GPU machine
# and start every command there, from the clone's root, with:   source .gpu/setup.sh && ...
# (experiments/tools/gpu_check.sh runs the project's checks that way.)
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root
mkdir -p .gpu/whl .gpu/deb /tmp/amd64/partial
P="--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64
   --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
# Everything in requirements.txt except torch and numpy (the machine's own CUDA torch and numpy are used).
grep -vE '^\s*(#|$|torch|numpy)' requirements.txt > .gpu/requirements-gpu.txt
# numpy 1.26.4 only to resolve procgen-mirror's pin; its wheel is dropped and the machine's numpy 2 is used
# (Procgen talks to numpy through cffi buffers, which numpy 2 serves as well).
pip wheel -q --no-deps -w .gpu/whl gym==0.26.2 >/dev/null   # procgen-mirror's gym: an sdist, pure Python
python3 -m pip download -q $P --find-links .gpu/whl -d .gpu/whl -r .gpu/requirements-gpu.txt numpy==1.26.4 >/dev/null
# Left behind to keep .gpu/ under 64 MiB: numpy (the machine's is used), imageio-ffmpeg (22 MB,
# unused), and matplotlib with its own dependencies (plots are made afterwards, on this machine).
# Pillow, for --capture-video, is already on the GPU machine (torchvision needs it).
(cd .gpu/whl && rm -f numpy-*.whl imageio_ffmpeg-*.whl matplotlib-*.whl fonttools-*.whl kiwisolver-*.whl \
  contourpy-*.whl cycler-*.whl pyparsing-*.whl python_dateutil-*.whl pillow-*.whl \
  pytest-*.whl pluggy-*.whl iniconfig-*.whl packaging-*.whl pygments-*.whl typing_extensions-*.whl filelock-*.whl)
# (pytest and its helpers, packaging, typing_extensions, filelock: the GPU machine has its own, which torch uses)
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
apt-get $o update >/dev/null
(cd .gpu/deb && apt-get $o download libgl1 libglx0 libglvnd0 libglib2.0-0 libx11-6 libxcb1 libxau6 \
  libxdmcp6 libbsd0 libmd0 libpcre2-8-0 libx11-data >/dev/null)
cp experiments/tools/gpu_setup.sh .gpu/setup.sh
echo "prepared .gpu/ ($(du -sh .gpu | cut -f1)): copy it with the clone; there, begin each command with:" \
  "source .gpu/setup.sh &&"
