#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection laid out as ansible-test wants it:
# build/sanity/ansible_collections/llmfleet/engines, a git checkout of the files git tracks
# (or would track) here.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
dest=$repo/build/sanity/ansible_collections/llmfleet/engines

# One run at a time: each rebuilds the copy it tests.
mkdir -p "$repo/build"
exec 9>"$repo/build/sanity.lock"
flock 9

# ansible-test bootstraps pip in its venvs with a script from a host these machines cannot reach;
# it uses a cached copy when there is one (see tools/get_pip_standin.py).
pip_version=$("$venv/bin/python" - <<'PY'
import re, pathlib, ansible_test
src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
print(re.search(r"pip='([0-9.]+)'", src.read_text()).group(1))
PY
)
mkdir -p ~/.ansible/test/cache
cp "$repo/tools/get_pip_standin.py" ~/.ansible/test/cache/"get_pip_${pip_version//./_}.py"

rm -rf "$dest"
mkdir -p "$dest"
(cd "$repo" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$dest")
cd "$dest"
git init -q
git add -A
export PATH="$venv/bin:$PATH"
ansible-test sanity --venv --requirements --python "${SANITY_PYTHON:-3.11}" --color no "$@"
