#!/usr/bin/env bash
# Build the project's unitree_hg interface package (interfaces/unitree_hg) into a
# cache workspace and hook it into the active Python virtual environment, so that
# `from unitree_hg.msg import LowCmd` works with nothing but the venv activated.
#
# Usage: scripts/build_unitree_hg.sh [WORKSPACE]
#   WORKSPACE defaults to ${BCG_ROS_CACHE:-$HOME/.cache/bcg_ros}/unitree_hg_ws/<key>,
#   one per (checkout, venv) pair: CMake caches name their source directory, so
#   two checkouts must never share a build tree.
#   BCG_ROS_FORCE_BUILD=1 rebuilds even when the install is up to date.
#
# What it leaves behind:
#   WORKSPACE/install/unitree_hg   the colcon install (libraries carry a RUNPATH)
#   WORKSPACE/env.sh               exports for those who prefer sourcing
#   <venv site-packages>/bcg_ros_unitree_hg.pth   puts the install on sys.path
#   <venv>/lib/libunitree_hg__*.so symlinks: the ROS type support dispatcher
#                                  dlopen()s these by bare name, so they must be
#                                  on the same search path as every other ROS
#                                  message library of the venv.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg_dir="$(cd "${here}/../interfaces/unitree_hg" && pwd)"
py_key="$(printf '%s|%s' "${pkg_dir}" "${VIRTUAL_ENV:-}" | cksum | cut -d' ' -f1)"
ws="${1:-${BCG_ROS_CACHE:-${HOME}/.cache/bcg_ros}/unitree_hg_ws/${py_key}}"

log() { printf '[build_unitree_hg] %s\n' "$*"; }
die() { printf '[build_unitree_hg] error: %s\n' "$*" >&2; exit 1; }

[[ -n "${VIRTUAL_ENV:-}" ]] || die "activate the project's venv first (. .venv/bin/activate)"
py="${VIRTUAL_ENV}/bin/python"
[[ -x "${py}" ]] || die "no python at ${py}"

# A unitree_hg that is importable and was not built by this script (in any
# workspace: each one carries a .bcg_ros_unitree_hg_ws marker at its root) is the
# real one from a unitree_ros2 install: use it and build nothing.
existing="$("${py}" - <<'EOF' 2>/dev/null || true
import os
try:
    import unitree_hg.msg
    unitree_hg.msg.LowCmd()
except Exception:
    raise SystemExit
path = os.path.realpath(os.path.dirname(unitree_hg.__file__))
root = path.rpartition(os.sep + 'install' + os.sep + 'unitree_hg' + os.sep)[0]
if not (root and os.path.isfile(os.path.join(root, '.bcg_ros_unitree_hg_ws'))):
    print(path)
EOF
)"
if [[ -n "${existing}" ]]; then
    log "unitree_hg is already provided by ${existing}; nothing to do."
    exit 0
fi
mkdir -p "${ws}"
ws="$(cd "${ws}" && pwd -P)"
touch "${ws}/.bcg_ros_unitree_hg_ws"

install_prefix="${ws}/install/unitree_hg"
site_rel="lib/python$("${py}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages"
venv_site="$("${py}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
stamp="${ws}/.built_for_venv"
stamp_id="${VIRTUAL_ENV}|${pkg_dir}"

# The build tools that the ROS runtime wheels do not pull in by themselves; each
# is a CMake package under <venv>/share and comes from the ros-<name> wheel.
build_deps=(ament_cmake ament_cmake_core ament_cmake_include_directories
            ament_cmake_ros_core rosidl_default_generators rosidl_core_generators)
missing=()
for dep in "${build_deps[@]}"; do
    [[ -d "${VIRTUAL_ENV}/share/${dep}/cmake" ]] || missing+=("ros-${dep//_/-}")
done
if ((${#missing[@]})); then
    log "installing missing build tools: ${missing[*]}"
    "${py}" -m pip install --quiet "${missing[@]}"
fi
for tool in colcon cmake c++; do
    command -v "${tool}" >/dev/null || die "${tool} not found (colcon: pip; cmake, c++: apt)"
done

needs_build=1
if [[ -z "${BCG_ROS_FORCE_BUILD:-}" && -f "${stamp}" \
      && "$(cat "${stamp}")" == "${stamp_id}" \
      && -d "${install_prefix}/${site_rel}/unitree_hg" ]]; then
    # Up to date when nothing that defines the package changed since the stamp.
    newer="$(find "${pkg_dir}" -newer "${stamp}" -type f \
             \( -name '*.msg' -o -name CMakeLists.txt -o -name package.xml \) | head -n 1)"
    [[ -z "${newer}" ]] && needs_build=0
fi

if ((needs_build)); then
    log "building ${pkg_dir} into ${ws} (about 30-40 s)"
    rm -f "${stamp}"
    # A build tree made for another source directory or venv cannot be reused
    # (CMake refuses a cache generated from a different source).
    cache="${ws}/build/unitree_hg/CMakeCache.txt"
    if [[ -f "${cache}" ]] && ! grep -qF "CMAKE_HOME_DIRECTORY:INTERNAL=${pkg_dir}" "${cache}"; then
        log "discarding a build tree made for another checkout"
        rm -rf "${ws}/build" "${ws}/install" "${ws}/log"
    fi
    start=${SECONDS}
    # RUNPATH lets the Python extension find the package's own libraries and the
    # venv's ROS libraries without LD_LIBRARY_PATH.
    (cd "${ws}" && CMAKE_PREFIX_PATH="${VIRTUAL_ENV}" AMENT_PREFIX_PATH="${VIRTUAL_ENV}" \
        colcon build --base-paths "${pkg_dir}" --event-handlers console_cohesion- \
        --cmake-args -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release \
        "-DPython3_EXECUTABLE=${py}" \
        "-DCMAKE_INSTALL_RPATH=${install_prefix}/lib;${VIRTUAL_ENV}/lib" \
        -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON) \
        || die "colcon build failed; see ${ws}/log/latest_build"
    printf '%s\n' "${stamp_id}" > "${stamp}"
    log "built in $((SECONDS - start)) s"
else
    log "install in ${ws} is up to date"
fi

# Hook the install into the venv (cheap, so done on every run).
printf '%s\n' "${install_prefix}/${site_rel}" > "${venv_site}/bcg_ros_unitree_hg.pth"
for lib in "${install_prefix}"/lib/libunitree_hg__*.so; do
    ln -sfn "${lib}" "${VIRTUAL_ENV}/lib/$(basename "${lib}")"
done

cat > "${ws}/env.sh" <<EOF
# Source this to use the unitree_hg build in ${ws} without the venv hooks.
export PYTHONPATH="${install_prefix}/${site_rel}\${PYTHONPATH:+:\${PYTHONPATH}}"
export LD_LIBRARY_PATH="${install_prefix}/lib:${VIRTUAL_ENV}/lib\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}"
export AMENT_PREFIX_PATH="${install_prefix}:${VIRTUAL_ENV}\${AMENT_PREFIX_PATH:+:\${AMENT_PREFIX_PATH}}"
EOF

# Check in a fresh interpreter, as a user would run it.
"${py}" -c 'from unitree_hg.msg import LowCmd; assert len(LowCmd().motor_cmd) == 35' \
    || die "unitree_hg was built but does not import from the venv"
log "ok: unitree_hg.msg.LowCmd imports in ${VIRTUAL_ENV} (env.sh: ${ws}/env.sh)"
