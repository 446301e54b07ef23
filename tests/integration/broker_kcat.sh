#!/usr/bin/env bash
# cnx-broker against kcat, an independent Kafka client: the first line of
# stdout is a bootstrap list kcat can use; every cnx topic exists with the
# requested partitions (default stages and a custom --stages list); a
# message produced with kcat to cnx.events comes back, key and value, from
# kcat; bad arguments exit 2 with one line; SIGTERM stops the broker with
# exit 0 within a few seconds. The broker is always killed on exit.
set -uo pipefail

BIN=${CNX_BIN:?CNX_BIN must name the directory of the built tools}
BROKER="$BIN/cnx-broker"
tmp=$(mktemp -d)
pid=""
passed=0
failed=0

cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

check() {
    local what=$1
    shift
    if "$@"; then
        echo "ok: $what"
        passed=$((passed + 1))
    else
        echo "FAILED: $what" >&2
        failed=$((failed + 1))
    fi
}

command -v kcat >/dev/null || {
    echo "broker_kcat.sh: kcat is not installed" >&2
    exit 1
}

# Start a broker with the given arguments; sets pid and bootstrap.
start_broker() {
    local i
    : >"$tmp/out"
    "$BROKER" "$@" >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    bootstrap=""
    for i in $(seq 1 100); do
        bootstrap=$(head -n 1 "$tmp/out")
        [ -n "$bootstrap" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "cnx-broker printed no bootstrap list: $(cat "$tmp/err")" >&2
    return 1
}

# Signal the broker (TERM or INT); it must exit 0 within 5 s.
stop_broker() {
    local i rc
    kill -"$1" "$pid" || return 1
    for i in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "cnx-broker still running 5 s after SIG$1" >&2
        return 1
    fi
    wait "$pid"
    rc=$?
    pid=""
    [ "$rc" -eq 0 ] || { echo "cnx-broker exited $rc" >&2; return 1; }
}

# topic_has NAME PARTITIONS: in the last metadata listing.
topic_has() {
    grep -q "topic \"$1\" with $2 partitions" "$tmp/meta" ||
        { echo "topic $1 with $2 partitions missing" >&2; return 1; }
}

all_topics_listed() {
    local stages=$1 parts=$2 s t ok=0
    for t in cnx.requests cnx.events cnx.lineage cnx.dlq; do
        topic_has "$t" "$parts" || ok=1
    done
    for s in ${stages//,/ }; do
        topic_has "cnx.tasks.$s" "$parts" || ok=1
        topic_has "cnx.tasks.$s.urgent" "$parts" || ok=1
    done
    return $ok
}

round_trip() {
    printf 'task-1:{"event":"succeeded"}\n' |
        kcat -b "$bootstrap" -P -t cnx.events -K : -p 0 || return 1
    kcat -b "$bootstrap" -C -t cnx.events -p 0 -o beginning -c 1 -e \
        -f '%k|%s\n' >"$tmp/consumed" 2>"$tmp/kcat.err" || return 1
    [ "$(cat "$tmp/consumed")" = 'task-1|{"event":"succeeded"}' ] ||
        { echo "consumed: $(cat "$tmp/consumed")" >&2; return 1; }
}

first_line_is_bootstrap() {
    [[ "$bootstrap" =~ ^127\.0\.0\.1:[0-9]+(,127\.0\.0\.1:[0-9]+)*$ ]] ||
        { echo "first line: $bootstrap" >&2; return 1; }
}

usage_fails() {
    local rc
    "$BROKER" "$@" >"$tmp/uout" 2>"$tmp/uerr"
    rc=$?
    [ "$rc" -eq 2 ] || { echo "$*: exit $rc, want 2" >&2; return 1; }
    [ "$(wc -l <"$tmp/uerr")" -eq 1 ] ||
        { echo "$*: stderr: $(cat "$tmp/uerr")" >&2; return 1; }
}

# Default cluster: one broker, four partitions, the default stages.
if start_broker; then
    check "first stdout line is a bootstrap list" first_line_is_bootstrap
    kcat -b "$bootstrap" -L -m 5 >"$tmp/meta" 2>"$tmp/kcat.err"
    check "kcat -L lists every cnx topic with 4 partitions" \
        all_topics_listed downsample,montage,segment,synapses,mesh 4
    check "kcat produces to cnx.events and consumes it back" round_trip
    check "SIGTERM: exit 0 within 5 s" stop_broker TERM
else
    check "cnx-broker starts" false
fi

# Three brokers, custom stages and partitions.
if start_broker --brokers 3 --partitions 2 --stages=align,proof-read; then
    kcat -b "$bootstrap" -L -m 5 >"$tmp/meta" 2>"$tmp/kcat.err"
    check "three brokers listed" grep -q "3 brokers:" "$tmp/meta"
    check "custom stages and partitions" all_topics_listed align,proof-read 2
    check "no default stage topics with --stages" \
        test "$(grep -c 'cnx.tasks.segment' "$tmp/meta")" -eq 0
    check "SIGINT: exit 0 within 5 s" stop_broker INT
else
    check "cnx-broker --brokers 3 starts" false
fi

help_works() {
    "$BROKER" --help >"$tmp/help" && grep -q "^usage: cnx-broker" "$tmp/help"
}

check "--help exits 0 with the usage" help_works
check "--brokers 0 is a usage error" usage_fails --brokers 0
check "--partitions x is a usage error" usage_fails --partitions x
check "--stages with a bad name is a usage error" usage_fails --stages a,B
check "unknown argument is a usage error" usage_fails --bogus

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
