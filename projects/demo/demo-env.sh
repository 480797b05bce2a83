# Sourced by the demo scripts beside it (after their `set -euo pipefail`, with their arguments):
#   HERE  this folder, projects/demo, as an absolute path
#   KVWB  the kvwb to run: the script's first argument, else build/kvwb
#   WORK  the scratch folder: $KVWB_DEMO_WORK, else build/demo-work
# Each script reads its other arguments itself (their defaults differ from script to script).
# shellcheck shell=bash disable=SC2034
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KVWB="${1:-$HERE/../../build/kvwb}"
WORK="${KVWB_DEMO_WORK:-$HERE/../../build/demo-work}"
