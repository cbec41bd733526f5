#!/usr/bin/env bash
# Build the collection artifact, check that development files stay out of it, install it into a
# scratch collections path, and render a module's docs from the installed copy.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/build/dist
rm -rf "$out" "$repo/build/install"
mkdir -p "$out"
cd "$repo"
ansible-galaxy collection build --output-path "$out" --force >/dev/null
tarball=$(ls "$out"/llmfleet-engines-*.tar.gz)
listing=$(tar -tzf "$tarball")
bad=$(printf '%s\n' "$listing" | grep -E '^(tests|bench|\.ci|\.venv|build|requirements|tools|docs/dev|extensions/molecule)/|^(Makefile|pytest.ini|ansible.cfg)$|^changelogs/fragments/.+' || true)
if [ -n "$bad" ]; then
  echo "ERROR: development files in $tarball:"; echo "$bad"; exit 1
fi
# The guides and the generated role pages ship with the collection (docs/dev, the test tooling's, does not).
for must in README.md MANIFEST.json FILES.json meta/runtime.yml docs/*.md docs/roles/*.md; do
  # a here-string, not a pipe: grep -q stops at its first match, and printf, cut off, would fail the pipeline
  grep -qx "$must" <<<"$listing" || { echo "ERROR: $must missing from $tarball"; exit 1; }
done
ANSIBLE_COLLECTIONS_PATH=$repo/build/install ansible-galaxy collection install "$tarball" -p "$repo/build/install" --force >/dev/null
count=0
for module in "$repo"/plugins/modules/*.py; do
  name=$(basename "$module" .py)
  ANSIBLE_COLLECTIONS_PATH=$repo/build/install ansible-doc -t module "llmfleet.engines.$name" >/dev/null
  count=$((count + 1))
done
echo "build: $(basename "$tarball") ($(printf '%s\n' "$listing" | wc -l) entries), installed, $count module docs rendered from the installed copy"
