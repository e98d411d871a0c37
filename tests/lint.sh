#!/bin/sh
# Static checks on the tree: banned functions, layering, O_CLOEXEC on every open,
# file size, shell scripts, cppcheck. Ends with "lint: N passed, N failed".
# tests/lint.sh --graph prints the include graph instead (tests/tools/include-graph.py).
set -u
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = --graph ]; then
    exec python3 tests/tools/include-graph.py graph
fi
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "  ok   $1"; }
bad() { failed=$((failed + 1)); echo "  FAIL $1"; printf '%s\n' "$2" | sed 's/^/       /'; }

src=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build/*')
# Product code: everything but the tests.
prod=$(printf '%s\n' "$src" | grep -v '^tests/')

hits=$(printf '%s\n' "$prod" | xargs grep -nE '\b(sprintf|vsprintf|strcpy|strcat|atoi|atol|atoll|strtok|gets)\s*\(' 2>/dev/null)
[ -z "$hits" ] && ok "no sprintf/strcpy/strcat/atoi/strtok/gets in product code" || bad "banned functions" "$hits"

# Every quoted include of a kernel file names a header that lives in kernels/ itself.
hits=$(git grep -nE '#include *"[^"]*"' -- 'kernels/*' | while IFS= read -r line; do
    header=$(printf '%s\n' "$line" | sed 's/.*#include *"\([^"]*\)".*/\1/')
    [ -f "kernels/$header" ] || printf '%s\n' "$line"
done)
[ -z "$hits" ] && ok "layering: kernels/ includes only kernels/ headers" || bad "layering: kernels/" "$hits"

hits=$(git grep -nE '#include *"(\.\./)?(daemon|cli)/|#include *"(taskpatchd|tpctl|cli|taskpatch)[^"]*\.h"' -- 'common/*')
[ -z "$hits" ] && ok "layering: common/ includes nothing from daemon/ or cli/" || bad "layering: common/" "$hits"

if command -v python3 > /dev/null; then
    # Quoted includes resolved the way the compiler finds them (by name on the include path).
    out=$(python3 tests/tools/include-graph.py layers 2>&1)
    [ $? -eq 0 ] && ok "layering: common/<layer>/ includes only kernels/, its own and earlier layers (common/README.md)" ||
        bad "layering: common/ layers" "$out"
    out=$(python3 tests/tools/include-graph.py cycles 2>&1)
    [ $? -eq 0 ] && ok "no include cycle inside daemon/" || bad "include cycles in daemon/" "$out"
fi

# The update sources know the manager only through taskpatchd-source.h (its SourceHost).
hits=$(git grep -nE '#include *"taskpatchd-manager\.h"' -- \
       'daemon/taskpatchd-fetch.[ch]' 'daemon/taskpatchd-spool.[ch]' 'daemon/taskpatchd-hawkbit.[ch]' \
       'daemon/taskpatchd-download.[ch]' 'daemon/taskpatchd-curl.[ch]' 'daemon/taskpatchd-ddi.[ch]' \
       'daemon/taskpatchd-source.[ch]' 'daemon/taskpatchd-policy.[ch]')
[ -z "$hits" ] && ok "layering: the update sources do not include taskpatchd-manager.h" || bad "layering: update sources" "$hits"

hits=$(printf '%s\n' "$prod" | xargs grep -nE '\b(fprintf|printf|puts|perror|syslog|sd_journal_\w+)\s*\(' -- 2>/dev/null | grep -E '^(common|kernels)/')
[ -z "$hits" ] && ok "common/ and kernels/ never log or print" || bad "printing from library code" "$hits"

hits=$(printf '%s\n' "$prod" | xargs grep -nE '\bopen(at)?\s*\(' 2>/dev/null | grep -v 'O_CLOEXEC' | grep -vE '^\S+:[0-9]+:\s*(/\*|\*)')
[ -z "$hits" ] && ok "every open()/openat() passes O_CLOEXEC" || bad "open without O_CLOEXEC" "$hits"

hits=$(printf '%s\n' "$src" | xargs wc -l | awk '$2 != "total" && $1 > 800 {print $2 " (" $1 " lines)"}')
[ -z "$hits" ] && ok "no source file over 800 lines" || bad "files asking to be split" "$hits"

if command -v shellcheck > /dev/null; then
    out=$(git ls-files '*.sh' .ci/run | xargs shellcheck -S warning 2>&1)
    [ -z "$out" ] && ok "shellcheck (warnings) on every script" || bad "shellcheck" "$out"
fi

if command -v cppcheck > /dev/null; then
    common_inc=$(for d in common/*/; do printf ' -I%s' "${d%/}"; done)
    # memleak: cppcheck does not follow __attribute__((cleanup)), which frees these; ASan/LSan check leaks.
    out=$(cppcheck -q --std=c11 --error-exitcode=1 --enable=warning,portability \
          --inline-suppr --suppress=preprocessorErrorDirective --suppress=memleak -Ikernels $common_inc -Icli -D__x86_64__ -D__GNUC__ \
          kernels common cli daemon 2>&1)
    [ $? -eq 0 ] && ok "cppcheck (warning, portability)" || bad "cppcheck" "$out"
fi

echo "lint: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
