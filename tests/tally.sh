# shellcheck shell=sh
# Sourced by the suite runners: add the "LABEL: N passed, N failed" line that ends a
# runner's output to $passed and $failed (set both before sourcing). A runner that ends
# without one (a crash, a build failure) counts as one failure: nothing is lost silently.

# tally OUTPUT
tally() {
    _line=$(printf '%s\n' "$1" | grep -E '^([A-Za-z0-9/_.-]+: )?[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    _p=$(echo "$_line" | sed -n 's/^\(.*: \)\{0,1\}\([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    _f=$(echo "$_line" | sed -n 's/^\(.*: \)\{0,1\}\([0-9]*\) passed, \([0-9]*\) failed$/\3/p')
    if [ -z "$_p" ]; then
        echo "  (no result line: counted as 1 failure)"
        _p=0 _f=1
    fi
    passed=$((passed + _p))
    failed=$((failed + _f))
}
