# Shell functions the set-up scripts share (scripts/ensure-*.sh, scripts/setup.sh). Source it after setting
# `tag` to the script's name:   tag=ensure-docker; . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# a progress or error line on stderr, prefixed with the script's tag (stdout is the script's answer)
say() { echo "[${tag:-swerl}] $*" >&2; }

# installs the Debian packages given (apt-get, as root); nothing when none is given
apt_install() {
  [ "$#" -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ]; then say "need root to install $* (apt-get)"; return 1; fi
  say "installing $*"
  local t0; t0=$(date +%s)
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
  say "installed $* in $(( $(date +%s) - t0 )) s"
}

# the first 16 hex digits of the sha256 of stdin: the cache keys of built artifacts
short_hash() { sha256sum | cut -c1-16; }

# seconds since the epoch second given
since() { echo "$(( $(date +%s) - $1 ))"; }
