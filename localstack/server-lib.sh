# shellcheck shell=bash
# What minio.sh and versitygw.sh share: build a pinned server with go
# install, start it on a free loopback port with a fresh data dir, keep
# its state in a file, stop it when a watched process exits. Sourced, not
# run. The script sets, before sourcing:
#
#   SCRIPT         its name, for messages (minio.sh)
#   LABEL          the server's name, for messages (MinIO)
#   COMM           the server's process name (minio): a pid is ours only if it runs this
#   MODULE VERSION the Go package go install builds, and its pinned version
#   BUILD_NOTE     how long the first build takes, for the message
#   START_TIMEOUT  seconds a start may take
#   STATE          the state dir (one per concurrent server)
#   WATCHED        a pid to outlive, or empty
#   DATA_PREFIX    the data dir's name prefix under TMPDIR (durashuffle-minio)
#   SCHEME         http (default) or https, the endpoint's scheme
#
# and defines launch BIN PORT DATA LOG (start the server in the background
# and set pid), healthy ENDPOINT and log_tail LOG (the log's end without
# secrets).

CACHE=${DURASHUFFLE_CACHE:-$HOME/.cache/durashuffle}
STATE_FILE=$STATE/server

die() {
	echo "$SCRIPT: $*" >&2
	exit 1
}

# state_get KEY prints KEY's value from the state file (never sourced, so a
# stray file cannot run code).
state_get() {
	[[ -f $STATE_FILE ]] || return 1
	sed -n "s/^$1=//p" "$STATE_FILE" | head -n 1
}

# is_server PID: alive and still our server, not a recycled pid.
is_server() {
	[[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null && [[ $(ps -o comm= -p "$1" 2>/dev/null) == "$COMM"* ]]
}

cmd_install() {
	local dir=$CACHE/$COMM-$VERSION
	local bin=$dir/$COMM
	if [[ -x $bin ]]; then
		echo "$bin"
		return
	fi
	command -v go >/dev/null || die "go is required to build $LABEL ($MODULE@$VERSION)"
	mkdir -p "$dir"
	# Build into a private dir and rename: concurrent installs (parallel
	# test binaries) each produce the same binary, and none sees half a file.
	local tmp
	tmp=$(mktemp -d "$dir/.install.XXXXXX")
	echo "$SCRIPT: building $MODULE@$VERSION (first run only; $BUILD_NOTE)" >&2
	if ! (cd "$tmp" && GOBIN=$tmp CGO_ENABLED=0 go install "$MODULE@$VERSION") >&2; then
		rm -rf "$tmp"
		die "go install $MODULE@$VERSION failed"
	fi
	mv -f "$tmp/$COMM" "$bin"
	rm -rf "$tmp"
	echo "$bin"
}

port_free() {
	if command -v ss >/dev/null; then
		[[ -z $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
	else
		! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}

pick_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		if port_free "$p"; then
			echo "$p"
			return
		fi
	done
	die "no free loopback port found"
}

# start_server: the running server's endpoint, or a new one's. The
# script has set up the environment the server reads.
start_server() {
	local pid
	if pid=$(state_get pid) && is_server "$pid"; then
		echo "endpoint=$(state_get endpoint)"
		return
	fi
	local bin
	bin=$(cmd_install)
	mkdir -p "$STATE"
	local data log="$STATE/$COMM.log"
	data=$(mktemp -d "${TMPDIR:-/tmp}/$DATA_PREFIX.XXXXXX")

	# A port seen free can be taken before the server binds it: retry a few.
	local attempt port endpoint deadline
	for attempt in 1 2 3 4 5; do
		port=$(pick_port)
		endpoint=${SCHEME:-http}://127.0.0.1:$port
		launch "$bin" "$port" "$data" "$log"
		deadline=$((SECONDS + START_TIMEOUT))
		while ((SECONDS < deadline)); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if healthy "$endpoint"; then
				printf 'pid=%s\nendpoint=%s\ndata=%s\nlog=%s\n' "$pid" "$endpoint" "$data" "$log" >"$STATE_FILE"
				watch "$pid" "$data"
				echo "endpoint=$endpoint"
				return
			fi
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
			rm -rf "$data"
			echo "$SCRIPT: $LABEL not answering after ${START_TIMEOUT}s; log tail:" >&2
			log_tail "$log"
			exit 1
		fi
		wait "$pid" 2>/dev/null || true
		if ! grep -qi "address already in use" "$log"; then
			break
		fi
		echo "$SCRIPT: port taken, retrying (attempt $attempt)" >&2
	done
	rm -rf "$data"
	echo "$SCRIPT: $LABEL exited during start; log tail:" >&2
	log_tail "$log"
	exit 1
}

# watch PID DATA stops the server once WATCHED exits.
watch() {
	[[ -n $WATCHED ]] || return 0
	(
		while kill -0 "$WATCHED" 2>/dev/null && kill -0 "$1" 2>/dev/null; do
			sleep 1
		done
		if kill -0 "$1" 2>/dev/null; then
			stop_pid "$1"
			rm -rf "$2"
			if [[ $(state_get pid) == "$1" ]]; then rm -f "$STATE_FILE"; fi
		fi
	) </dev/null >/dev/null 2>&1 &
	disown
}

stop_pid() {
	is_server "$1" || return 0
	kill "$1" 2>/dev/null || true
	for _ in $(seq 1 100); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null || true
}

cmd_stop() {
	local pid data
	if ! pid=$(state_get pid); then
		echo "$SCRIPT: not running" >&2
		return
	fi
	data=$(state_get data)
	stop_pid "$pid"
	# Only ever delete a data dir this script created.
	if [[ $data == */$DATA_PREFIX.* ]]; then
		rm -rf "$data"
	fi
	rm -f "$STATE_FILE"
}

cmd_endpoint() {
	local pid
	if pid=$(state_get pid) && is_server "$pid"; then
		state_get endpoint
	else
		die "not running"
	fi
}

# dispatch COMMAND runs install, start, stop or endpoint.
dispatch() {
	case ${1:-} in
	install) cmd_install ;;
	start) cmd_start ;;
	stop) cmd_stop ;;
	endpoint) cmd_endpoint ;;
	*)
		echo "usage: $0 install|start|stop|endpoint" >&2
		exit 2
		;;
	esac
}
