#!/usr/bin/env bash
# Every folder README lists every file of its folder: for each README.md the repository tracks,
# each file beside it (not README.md, CMakeLists.txt or a dotfile) must be named in it, a `.cpp` by its own
# name or by its header's (`binding.h` stands for binding.h and binding.cpp). Prints every
# file a README does not name and fails.
# Usage: folder_readmes_test.sh [REPOSITORY]
set -uo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root" || exit 2
command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 ||
  { echo "folder_readmes_test: $root is not a git checkout (the test reads git ls-files)" >&2; exit 2; }

# named README NAME: NAME appears in README as a whole file name (not inside a longer one).
named() {
  local escaped=${2//./\\.}
  grep -qE "(^|[^A-Za-z0-9_./-])$escaped([^A-Za-z0-9_]|\$)" "$1"
}

missing=0
readmes=0
while IFS= read -r readme; do
  readmes=$((readmes + 1))
  dir=$(dirname "$readme")
  while IFS= read -r file; do
    name=$(basename "$file")
    [[ $name == README.md || $name == CMakeLists.txt || $name == .* ]] && continue
    named "$readme" "$name" && continue
    [[ $name == *.cpp ]] && named "$readme" "${name%.cpp}.h" && continue
    echo "$readme does not name $name"
    missing=$((missing + 1))
  done < <(git ls-files -- "$dir" | awk -F/ -v depth="$(awk -F/ '{print NF}' <<<"$readme")" 'NF == depth')
done < <(git ls-files -- '*README.md' 'README.md')
echo "$readmes folder READMEs, $missing file(s) not named"
[[ $readmes -gt 0 && $missing -eq 0 ]]
