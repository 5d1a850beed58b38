#!/usr/bin/env bash
# Runs go test verbosely into a log and prints a short account: every
# test that ran against MinIO, every failure, and each package's result.
# A skipped test fails the run: no test may pass by not running.
# Usage: scripts/gotest.sh [go test flags and packages]
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/durashuffle-test.XXXXXX")
trap 'rm -f "$log"' EXIT
go test -v "$@" >"$log" 2>&1
rc=$?
grep -E '^\s*--- (PASS|FAIL|SKIP): .*/minio' "$log" | sed -E 's/^\s+/  /; s/ \(.*//' | sort -u
echo "MinIO-backed tests passed: $(grep -cE '^\s*--- PASS: .*/minio' "$log")"
if grep -qE '^\s*--- SKIP' "$log"; then
	echo "skipped tests (not allowed):"
	grep -E '^\s*--- SKIP' "$log"
	rc=1
fi
if [ "$rc" != 0 ]; then
	echo "---- failures ----"
	grep -nE '^\s*--- FAIL|^FAIL|panic:' "$log" | head -50
	echo "---- full log tail ----"
	tail -n 300 "$log"
fi
grep -E '^(ok|FAIL|\?)\s' "$log"
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
echo "tests: $passed passed, $failed failed"
exit "$rc"
