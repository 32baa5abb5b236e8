# shellcheck shell=bash
# Loopback port helpers (bash), sourced by e2e/testdata/lib.sh for the e2e
# and bench scripts.

# port_open PORT succeeds when something accepts TCP connections on
# 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints a loopback port nothing listens on, between 10000 and the
# start of the kernel's ephemeral range (whose ports outgoing connections may
# hold). It fails after 100 tries.
free_port() {
	local i p lo=10000 hi=32767 eph
	read -r eph _ 2>/dev/null </proc/sys/net/ipv4/ip_local_port_range || eph=32768
	((eph - 1 - lo >= 1000)) && hi=$((eph - 1))
	for ((i = 0; i < 100; i++)); do
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
		if ! port_open "$p"; then
			echo "$p"
			return 0
		fi
	done
	echo "no free loopback port found" >&2
	return 1
}

# port_wait PORT SECONDS [PID] waits up to SECONDS for something to accept
# TCP connections on 127.0.0.1:PORT; it fails when the time runs out, or as
# soon as the process PID, if given, has exited.
port_wait() {
	local deadline=$((SECONDS + $2))
	until port_open "$1"; do
		[ -z "${3:-}" ] || kill -0 "$3" 2>/dev/null || return 1
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}
