# What the measuring scripts share; each sources it:
#   . "$(dirname "$0")/lib.sh"

# A port free now on loopback (python3's own choice; else a guess).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
        shuf -i 20000-40000 -n 1
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
