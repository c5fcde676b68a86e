#!/usr/bin/env bash
# make test-newest / make test-oldest: install the newest (or, for each of our direct
# dependencies, the oldest) releases pyproject.toml's ranges allow into a venv of its
# own, print how they differ from requirements.txt, and run the unit and packaging
# layers with them. A lock refresh is then a tested step: `make test-newest` green,
# then `make lock`. The oldest run is what keeps the floors in pyproject.toml true.
#   usage: scripts/test-resolution.sh highest|lowest-direct
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: $0 highest|lowest-direct}
case $mode in highest|lowest-direct) ;; *) echo "$0: mode: highest or lowest-direct" >&2; exit 2;; esac
venv=.venv-$mode
resolved=$venv/resolved.txt
rm -rf "$venv"
python3 -m venv "$venv"
.venv/bin/uv pip compile -q --no-header --python-version 3.11 --resolution "$mode" \
  pyproject.toml --extra test --extra optuna --extra dask -o "$resolved"
echo "== $mode: versions that differ from requirements.txt"
python3 - "$resolved" <<'PY'
import re, sys
def pins(path):
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", open(path).read(), re.M))
lock, got = pins("requirements.txt"), pins(sys.argv[1])
diff = [f"  {n}: {lock.get(n, '-')} -> {v}" for n, v in sorted(got.items()) if lock.get(n) != v]
print("\n".join(diff) or "  none")
PY
"$venv/bin/pip" install -q --no-deps -r "$resolved"
"$venv/bin/pip" install -q --no-deps --no-build-isolation -e .
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit tests/packaging
