#!/usr/bin/env bash
# Build the project's interface packages (interfaces/*: unitree_hg, tf2_msgs) into a
# cache workspace and hook them into the active Python virtual environment, so that
# `from unitree_hg.msg import LowCmd` and `from tf2_msgs.msg import TFMessage` work
# with nothing but the venv activated.
#
# Usage: scripts/build_interfaces.sh [--also PKG_DIR]... [WORKSPACE]
#   --also PKG_DIR builds one more interface package from its source folder (one with
#   a package.xml), beside interfaces/*; install.sh --ros-sources passes the ones a
#   ROS 2 source tree holds (composition_interfaces, which launch_ros imports).
#   WORKSPACE defaults to ${BCG_ROS_CACHE:-$HOME/.cache/bcg_ros}/interfaces_ws/<key>,
#   one per (checkout, venv) pair: CMake caches name their source directory, so
#   two checkouts must never share a build tree.
#   BCG_ROS_FORCE_BUILD=1 rebuilds even when the install is up to date.
#
# A package that is importable and was not built by this script (a system ROS 2
# with tf2_msgs, a sourced unitree_ros2) is used as it is and not built.
#
# What it leaves behind:
#   WORKSPACE/install/<pkg>        the colcon installs (libraries carry a RUNPATH)
#   WORKSPACE/env.sh               exports for those who prefer sourcing
#   <venv site-packages>/bcg_ros_interfaces.pth   puts the installs on sys.path, and
#                                  puts them and the venv (where bcg_ros and the ROS
#                                  wheels register) on AMENT_PREFIX_PATH, so that the
#                                  ament index (`ros2 interface show`, launch's
#                                  package lookups) finds them in every venv process
#   <venv>/lib/lib<pkg>__*.so      symlinks: the ROS type support dispatcher
#                                  dlopen()s these by bare name, so they must be
#                                  on the same search path as every other ROS
#                                  message library of the venv.
#   <venv>/share/*/cmake/*.cmake   the ROS wheels' exported CMake files name the
#                                  wheel builder's Python (/opt/python/cp3XX-...);
#                                  those paths are pointed at the venv's Python,
#                                  so packages that depend on them (tf2_msgs on
#                                  geometry_msgs) configure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ifaces="$(cd "${here}/../interfaces" && pwd)"
sources=("${ifaces}"/*/)   # one folder per interface package
while [[ "${1:-}" == --also ]]; do
    [[ -f "${2:-}/package.xml" ]] || { echo "build_interfaces.sh: --also ${2:-}: no package.xml there" >&2; exit 2; }
    sources+=("$(cd "$2" && pwd)/")
    shift 2
done
key="$(printf '%s|%s' "${ifaces}" "${VIRTUAL_ENV:-}" | cksum | cut -d' ' -f1)"
ws="${1:-${BCG_ROS_CACHE:-${HOME}/.cache/bcg_ros}/interfaces_ws/${key}}"
marker=.bcg_ros_interfaces_ws

log() { printf '[build_interfaces] %s\n' "$*"; }
die() { printf '[build_interfaces] error: %s\n' "$*" >&2; exit 1; }

[[ -n "${VIRTUAL_ENV:-}" ]] || die "activate the project's venv first (. .venv/bin/activate)"
py="${VIRTUAL_ENV}/bin/python"
[[ -x "${py}" ]] || die "no python at ${py}"

# provided PKG KIND TYPE: print where PKG comes from when it imports (PKG.KIND.TYPE()
# works, KIND msg or srv)
# and is not one of this script's builds (each workspace carries the marker at its
# root; .bcg_ros_unitree_hg_ws is the marker of the older unitree_hg-only builds).
provided() {
    "${py}" - "$1" "$2" "$3" "${marker}" <<'PY' 2>/dev/null || true
import importlib
import os
import sys
pkg, kind, probe, marker = sys.argv[1:5]
try:
    cls = getattr(importlib.import_module(pkg + '.' + kind), probe)
    (cls.Request if kind == 'srv' else cls)()
except Exception:
    raise SystemExit
path = os.path.realpath(os.path.dirname(importlib.import_module(pkg).__file__))
root = path.rpartition(os.sep + 'install' + os.sep + pkg + os.sep)[0]
if not (root and any(os.path.isfile(os.path.join(root, m))
                     for m in (marker, '.bcg_ros_unitree_hg_ws'))):
    print(path)
PY
}

shopt -s nullglob
pkgs=()        # the packages to build here, by name
declare -A src  # their source folders
probes=()      # one message (or service) of each, to check that it imports
for dir in "${sources[@]}"; do
    [[ -f "${dir}package.xml" ]] || continue
    pkg="$(basename "${dir}")"
    defs=("${dir}"msg/*.msg "${dir}"srv/*.srv)
    first="${defs[0]}"
    [[ -f "${first}" ]] || die "${dir}: no msg/*.msg or srv/*.srv"
    kind="${first##*.}"
    probe="$(basename "${first}" ".${kind}")"
    existing="$(provided "${pkg}" "${kind}" "${probe}")"
    if [[ -n "${existing}" ]]; then
        log "${pkg} is already provided by ${existing}; not building it."
        continue
    fi
    pkgs+=("${pkg}")
    src["${pkg}"]="${dir%/}"
    probes+=("${pkg}.${kind}.${probe}")
done
if ((${#pkgs[@]} == 0)); then
    log "every interface package is already provided; nothing to do."
    exit 0
fi

mkdir -p "${ws}"
ws="$(cd "${ws}" && pwd -P)"
touch "${ws}/${marker}"

site_rel="lib/python$("${py}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages"
venv_site="$("${py}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
stamp="${ws}/.built_for_venv"
stamp_id="${VIRTUAL_ENV}|${ifaces}|${pkgs[*]}"

# The build tools that the ROS runtime wheels do not pull in by themselves; each
# is a CMake package under <prefix>/share and comes from the ros-<name> wheel.
prefixes="${VIRTUAL_ENV}${AMENT_PREFIX_PATH:+:${AMENT_PREFIX_PATH}}"
build_deps=(ament_cmake ament_cmake_core ament_cmake_include_directories
            ament_cmake_ros_core rosidl_default_generators rosidl_core_generators)
missing=()
for dep in "${build_deps[@]}"; do
    found=0
    IFS=: read -ra dirs <<< "${prefixes}"
    for prefix in "${dirs[@]}"; do
        [[ -d "${prefix}/share/${dep}/cmake" ]] && { found=1; break; }
    done
    ((found)) || missing+=("ros-${dep//_/-}")
done
if ((${#missing[@]})); then
    log "installing missing build tools: ${missing[*]}"
    "${py}" -m pip install --quiet "${missing[@]}"
fi
for tool in colcon cmake c++; do
    command -v "${tool}" >/dev/null || die "${tool} not found (colcon: pip; cmake, c++: apt)"
done

# The wheels were built in a manylinux image whose Python lives in /opt/python; their
# exported *.cmake files name its include folders, which CMake requires to exist.
# Point them at this venv's Python (idempotent: the old paths are gone afterwards).
"${py}" - "${VIRTUAL_ENV}/share" <<'PY'
import glob
import os
import re
import sys
import sysconfig
include = sysconfig.get_paths()['include']
site = sysconfig.get_paths()['platlib']
patterns = [(re.compile(r'/opt/python/cp\d+-cp\d+/include/python[0-9.]+'), include),
            (re.compile(r'/opt/python/cp\d+-cp\d+/lib/python[0-9.]+/site-packages'), site)]
fixed = 0
for path in glob.glob(os.path.join(sys.argv[1], '*', 'cmake', '*.cmake')):
    with open(path) as f:
        text = f.read()
    if '/opt/python/' not in text:
        continue
    new = text
    for pattern, repl in patterns:
        new = pattern.sub(lambda m: m.group(0) if os.path.isdir(m.group(0)) else repl, new)
    if new != text:
        with open(path, 'w') as f:
            f.write(new)
        fixed += 1
if fixed:
    print(f'[build_interfaces] pointed {fixed} exported CMake files at {include}')
PY

needs_build=1
if [[ -z "${BCG_ROS_FORCE_BUILD:-}" && -f "${stamp}" && "$(cat "${stamp}")" == "${stamp_id}" ]]; then
    needs_build=0
    for pkg in "${pkgs[@]}"; do
        [[ -d "${ws}/install/${pkg}/${site_rel}/${pkg}" ]] || needs_build=1
        # Up to date when nothing that defines the package changed since the stamp.
        newer="$(find "${src[${pkg}]}" -newer "${stamp}" -type f \( -name '*.msg' \
                 -o -name '*.srv' -o -name CMakeLists.txt -o -name package.xml \) | head -n 1)"
        [[ -z "${newer}" ]] || needs_build=1
    done
fi

if ((needs_build)); then
    log "building ${pkgs[*]} into ${ws} (about 30-40 s each)"
    rm -f "${stamp}"
    base_paths=()
    rpath="${VIRTUAL_ENV}/lib"
    for pkg in "${pkgs[@]}"; do
        # A build tree made for another source directory cannot be reused (CMake
        # refuses a cache generated from a different source).
        cache="${ws}/build/${pkg}/CMakeCache.txt"
        if [[ -f "${cache}" ]] && ! grep -qF "CMAKE_HOME_DIRECTORY:INTERNAL=${src[${pkg}]}" "${cache}"; then
            log "discarding a build tree made for another checkout"
            rm -rf "${ws}/build" "${ws}/install" "${ws}/log"
        fi
        base_paths+=("${src[${pkg}]}")
        rpath="${ws}/install/${pkg}/lib;${rpath}"
    done
    start=${SECONDS}
    # RUNPATH lets the Python extensions find the packages' own libraries and the
    # venv's ROS libraries without LD_LIBRARY_PATH.
    (cd "${ws}" && CMAKE_PREFIX_PATH="${VIRTUAL_ENV}${CMAKE_PREFIX_PATH:+:${CMAKE_PREFIX_PATH}}" \
        AMENT_PREFIX_PATH="${prefixes}" \
        colcon build --base-paths "${base_paths[@]}" --event-handlers console_cohesion- \
        --cmake-args -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Release \
        "-DPython3_EXECUTABLE=${py}" "-DCMAKE_INSTALL_RPATH=${rpath}" \
        -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON) \
        || die "colcon build failed; see ${ws}/log/latest_build"
    printf '%s\n' "${stamp_id}" > "${stamp}"
    log "built in $((SECONDS - start)) s"
else
    log "install in ${ws} is up to date"
fi

# Hook the installs into the venv (cheap, so done on every run). The older
# unitree_hg-only hook is replaced by this one.
rm -f "${venv_site}/bcg_ros_unitree_hg.pth"
: > "${venv_site}/bcg_ros_interfaces.pth"
python_path="" lib_path="" ament_path=""
for pkg in "${pkgs[@]}"; do
    prefix="${ws}/install/${pkg}"
    printf '%s\n' "${prefix}/${site_rel}" >> "${venv_site}/bcg_ros_interfaces.pth"
    for lib in "${prefix}"/lib/lib"${pkg}"__*.so; do
        ln -sfn "${lib}" "${VIRTUAL_ENV}/lib/$(basename "${lib}")"
    done
    python_path="${python_path}${prefix}/${site_rel}:"
    lib_path="${lib_path}${prefix}/lib:"
    ament_path="${ament_path}${prefix}:"
done
# AMENT_PREFIX_PATH as a sourced setup.bash would set it, for every Python of the venv:
# prefixes already on it (a sourced workspace) come first and win, the venv's after.
printf "import os; p = os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) + '%s'.split(':'); os.environ['AMENT_PREFIX_PATH'] = os.pathsep.join(dict.fromkeys(d for d in p if d))\n" \
    "${ament_path}${VIRTUAL_ENV}" >> "${venv_site}/bcg_ros_interfaces.pth"

cat > "${ws}/env.sh" <<ENV
# Source this to use the interface builds in ${ws} without the venv hooks.
export PYTHONPATH="${python_path%:}\${PYTHONPATH:+:\${PYTHONPATH}}"
export LD_LIBRARY_PATH="${lib_path}${VIRTUAL_ENV}/lib\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}"
export AMENT_PREFIX_PATH="${ament_path}${VIRTUAL_ENV}\${AMENT_PREFIX_PATH:+:\${AMENT_PREFIX_PATH}}"
ENV

# Check in a fresh interpreter, as a user would run it.
for probe in "${probes[@]}"; do
    "${py}" -c "import importlib; m, _, c = '${probe}'.rpartition('.'); t = getattr(importlib.import_module(m), c); (t.Request if m.endswith('.srv') else t)()" \
        || die "${probe%%.*} was built but does not import from the venv"
done
"${py}" -c 'from tf2_msgs.msg import TFMessage; from unitree_hg.msg import LowCmd; assert len(LowCmd().motor_cmd) == 35; TFMessage()' \
    || die "unitree_hg or tf2_msgs does not import from the venv"
log "ok: ${pkgs[*]} import in ${VIRTUAL_ENV} (env.sh: ${ws}/env.sh)"
