# What the measuring scripts share; each sources it:
#   . "$(dirname "$0")/lib.sh"

# A port free now on loopback, below the range the kernel gives clients'
# ports from: a client reconnecting to a Redis that is down could otherwise
# be given that port, connect to itself and keep Redis from restarting on it.
free_port() {
    python3 -c '
import random, socket
while True:
    p = random.randrange(20000, 32768)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()' 2>/dev/null || shuf -i 20000-32767 -n 1
}

# A redis-server of its own on port $1, on loopback, without persistence;
# its pid in $redis_pid, answering when this returns (or 1 after 30 s).
# Words after the port up to `--` are a command it runs under
# (`taskset -c 1`, `valgrind --tool=callgrind ...`); after `--`, more
# options of redis-server's own.
start_redis() {
    local port=$1 wrap=()
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do wrap+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    "${wrap[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' \
        --appendonly no "$@" >/dev/null 2>&1 &
    redis_pid=$!
    for _ in $(seq 300); do
        redis-cli -p "$port" PING >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "redis-server on port $port did not answer within 30 s" >&2
    return 1
}

# A command as root (directly when already root).
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Install Debian package $2 when command $1 is missing.
need() {
    command -v "$1" >/dev/null && return
    echo "installing $2" >&2
    as_root apt-get install -y -q "$2" >/dev/null ||
        { as_root apt-get update -q >/dev/null && as_root apt-get install -y -q "$2" >/dev/null; }
}

# Where cargo builds (relative to the checkout, where each script runs):
# CARGO_TARGET_DIR when set, so that nothing lands in the checkout then.
target=${CARGO_TARGET_DIR:-target}
