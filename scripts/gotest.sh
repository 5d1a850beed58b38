#!/usr/bin/env bash
# Runs go test verbosely into a log and prints a short account: every
# test that ran against a real server (MinIO, versitygw, the MinIO
# cluster), every failure, and each package's result.
# A skipped test fails the run: no test may pass by not running.
# Usage: scripts/gotest.sh [go test flags and packages]
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/durashuffle-test.XXXXXX")
trap 'rm -f "$log"' EXIT
go test -v "$@" >"$log" 2>&1
rc=$?
# Subtests named after a real server (testenv.Backends), and the suites
# that run on their own servers (TestMinIO, TestVersityGW, TestCluster*).
real='(/|Test)(minio|versitygw|MinIO|VersityGW)([/ ]|$)|TestCluster'
grep -E "^\s*--- (PASS|FAIL|SKIP): " "$log" | grep -E "$real" | sed -E 's/^\s+/  /; s/ \(.*//' | sort -u
echo "MinIO-backed tests passed: $(grep -E '^\s*--- PASS: ' "$log" | grep -cE '(/|Test)(minio|MinIO)([/ ]|$)')"
echo "versitygw-backed tests passed: $(grep -E '^\s*--- PASS: ' "$log" | grep -cE '(/|Test)(versitygw|VersityGW)([/ ]|$)')"
echo "MinIO-cluster tests passed: $(grep -cE '^\s*--- PASS: TestCluster' "$log")"
if grep -qE '^\s*--- SKIP' "$log"; then
	echo "skipped tests (not allowed):"
	grep -E '^\s*--- SKIP' "$log"
	rc=1
fi
if [ "$rc" != 0 ]; then
	echo "---- output of the failed tests ----"
	# go test -v tags output with "=== RUN/CONT Name"; keep each test's
	# lines and print those of the tests that failed, and any panic.
	awk '
		/^=== (RUN|CONT|PAUSE|NAME) / { cur = $3; next }
		/^[[:space:]]*--- FAIL: / { failed[$3] = 1 }
		/^panic:|^FAIL[[:space:]]/ { print; next }
		{ if (cur != "") out[cur] = out[cur] $0 "\n" }
		END { for (t in failed) if (t in out) printf "== %s\n%s", t, out[t] }
	' "$log" | head -n 400
	# Parallel tests print their output after their "--- FAIL" line, out
	# of the "=== RUN" sections above: show what follows each failure too.
	# (POSIX classes: mawk has no \s.)
	grep -E -A30 '^[[:space:]]*--- FAIL' "$log" | head -n 400
fi
grep -E '^(ok|FAIL|\?)\s' "$log"
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
echo "tests: $passed passed, $failed failed"
exit "$rc"
