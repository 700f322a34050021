#!/usr/bin/env bash
# End to end: three kiln-servers as three hosts, each in a network namespace
# of its own with its own address (10.77.9.1-3), linked pairwise by veth
# links that this test creates and removes. fashion_mnist trains
# data-parallel over the three (--servers); then a second run loses one
# host mid-training (its server killed) and must fail at once, naming it,
# while the other two keep serving and train again as a group of two.
# Needs root (network namespaces); skips otherwise.
# Usage: group_netns_test.sh BIN_DIR
set -Eeuo pipefail
shopt -s inherit_errexit
bin=$(cd "$1" && pwd)
prefix="kg$$"
work=$(mktemp -d)
pids=()
made=()
step() { echo "[group_netns_test] $*"; }
fail() { echo "[group_netns_test] FAIL: $*" >&2; exit 1; }
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  # Deleting a namespace removes the veth ends in it.
  for ns in "${made[@]}"; do ip netns del "$ns" 2> /dev/null || true; done
  if [[ -n "${KEEP_LOGS:-}" ]]; then cp -r "$work" /tmp/netns_logs; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "[group_netns_test] FAIL: line $LINENO exited with $?" >&2' ERR

if [[ $(id -u) != 0 ]] || ! ip netns add "$prefix-probe" 2> /dev/null; then
  echo "[group_netns_test] SKIP: network namespaces need root and ip(8)"
  exit 77
fi
ip netns del "$prefix-probe"

step "three hosts: namespaces $prefix-0..2, addresses 10.77.9.1-3, veth links between each pair"
link() {
  local a=$1 b=$2
  ip link add "v$prefix$a$b" netns "$prefix-$a" type veth peer name "v$prefix$b$a" netns "$prefix-$b" &&
    ip -n "$prefix-$a" link set "v$prefix$a$b" up &&
    ip -n "$prefix-$b" link set "v$prefix$b$a" up &&
    ip -n "$prefix-$a" route add "10.77.9.$((b + 1))/32" dev "v$prefix$a$b" &&
    ip -n "$prefix-$b" route add "10.77.9.$((a + 1))/32" dev "v$prefix$b$a"
}
topology() {
  local i
  for i in 0 1 2; do
    ip netns add "$prefix-$i" || return 1
    made+=("$prefix-$i")
    ip -n "$prefix-$i" link set lo up || return 1
    ip -n "$prefix-$i" addr add "10.77.9.$((i + 1))/32" dev lo || return 1
  done
  link 0 1 && link 0 2 && link 1 2
}
# A machine that has namespaces but not veth links (a container without
# the module) cannot run this test either.
if ! topology; then
  echo "[group_netns_test] SKIP: could not make the namespaces and veth links"
  exit 77
fi

start_server() {
  local i=$1
  # Listening on an address other machines reach needs --insecure without
  # TLS; the namespaces are this test's own.
  ip netns exec "$prefix-$i" "$bin/kiln-server" --listen="10.77.9.$((i + 1)):7000" \
    --devices=cpu:1 --insecure --group_peers=10.77.9.1,10.77.9.2,10.77.9.3 \
    --log_level=warn > "$work/server$i.log" 2>&1 &
  pids+=($!)
  server_pid[$i]=$!
  for _ in $(seq 100); do
    grep -q "listening on" "$work/server$i.log" && return 0
    sleep 0.1
  done
  cat "$work/server$i.log" >&2
  fail "kiln-server in $prefix-$i did not start"
}
declare -a server_pid
for i in 0 1 2; do start_server "$i"; done
servers=10.77.9.1:7000,10.77.9.2:7000,10.77.9.3:7000

step "data-parallel training over the three hosts (from the first host's namespace)"
ip netns exec "$prefix-0" "$bin/fashion_mnist" --servers="$servers" --device=cpu --replicas=3 \
  --model=mlp --epochs=1 --train_limit=1920 --test_limit=600 --batch_size=96 \
  --eval_batch_size=120 --log_every=10 --report=false > "$work/train.log" 2>&1 ||
  { cat "$work/train.log" >&2; fail "training over three hosts failed"; }
grep -q "and 2 more replicas" "$work/train.log" || fail "not three replicas: $(head -3 "$work/train.log")"
accuracy=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$work/train.log" | tail -1)
[[ -n "$accuracy" ]] || fail "no test accuracy in: $(tail -3 "$work/train.log")"
python3 -c "import sys; sys.exit(0 if float('$accuracy') > 0.6 else 1)" ||
  fail "test accuracy $accuracy after one pass over 1920 images"
step "trained: test accuracy $accuracy"

step "a host lost mid-training: the run fails at once, naming it"
ip netns exec "$prefix-0" "$bin/fashion_mnist" --servers="$servers" --device=cpu --replicas=3 \
  --model=mlp --epochs=20 --train_limit=1920 --test_limit=120 --batch_size=96 \
  --eval_batch_size=120 --log_every=5 --report=false > "$work/lost.log" 2>&1 &
client=$!
pids+=("$client")
for _ in $(seq 300); do
  grep -q "step" "$work/lost.log" && break
  sleep 0.1
done
grep -q "step" "$work/lost.log" || { cat "$work/lost.log" >&2; fail "the second run did not start"; }
killed=$(date +%s)
kill -9 "${server_pid[2]}"
status=0
wait "$client" || status=$?
took=$(($(date +%s) - killed))
[[ $status != 0 ]] || fail "the run went on without host 2"
# Lost in an execution, both survivors name the host and its replica; lost
# in another call (a transfer), that call names it.
named=$(grep -o "member 2 (10.77.9.3:7000, replicas 2 to 2) does not answer" "$work/lost.log" | wc -l || true)
if grep -q "^fashion_mnist: group " "$work/lost.log"; then
  ((named == 2)) || { cat "$work/lost.log" >&2; fail "the error names host 2 $named times, not twice"; }
else
  grep -q "^fashion_mnist: .*host2 (10.77.9.3:7000)" "$work/lost.log" ||
    { cat "$work/lost.log" >&2; fail "the error does not name host 2"; }
fi
# A dead host's connections close at once, so the run fails well within
# the group's timeout (30 s): at most one call waits the client's reconnect
# timeout (10 s) for the host, and the calls after it fail or skip it at
# once.
((took < 25)) || { cat "$work/lost.log" "$work"/server*.log >&2; fail "the run took ${took}s to fail"; }
step "failed after ${took}s: $(grep -m1 '^fashion_mnist: ' "$work/lost.log" | cut -c1-240)"

step "the two survivors train as a group of two without a restart"
ip netns exec "$prefix-0" "$bin/fashion_mnist" --servers=10.77.9.1:7000,10.77.9.2:7000 \
  --device=cpu --replicas=2 --model=mlp --epochs=1 --train_limit=960 --test_limit=120 \
  --batch_size=96 --eval_batch_size=120 --log_every=10 --report=false > "$work/two.log" 2>&1 ||
  { cat "$work/two.log" >&2; fail "training over the two survivors failed"; }
grep -q "test accuracy" "$work/two.log" || fail "no result from the survivors"
step "PASS"
