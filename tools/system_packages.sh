#!/bin/sh
# The Debian packages da_lab needs from the system, installed by `make install` / `make test`
# (never by `make lab`: the lessons do not need them). Chromium: PNG/SVG export
# (`da-lab export --out`) draws the diagrams in it, and the browser tests drive it through
# Playwright; neither may download a browser of its own. fonts-dejavu-core: its text.
#
#   tools/system_packages.sh PACKAGE...
#
# As root: apt-get update, then apt-get install. Another apt or dpkg holding its lock (an
# unattended upgrade, a second make) is waited for, up to APT_LOCK_WAIT seconds (default 600):
# apt-get install waits by itself (-o DPkg::Lock::Timeout), apt-get update's lists lock has no
# timeout option, so it is retried every APT_LOCK_POLL seconds. Each wait is said in one line,
# and a failure says what to do; make stops there, before anything else is installed.
# Not root: the command to run, and exit 1. (APT_GET and DA_LAB_UID let the tests stand in for
# apt-get and root: tests/test_system_packages.py.)
set -u
WAIT=${APT_LOCK_WAIT:-600}
POLL=${APT_LOCK_POLL:-5}
APT=${APT_GET:-apt-get}
PKGS="$*"
export DEBIAN_FRONTEND=noninteractive

echo "da_lab needs Debian's $PKGS: Chromium draws the diagrams for PNG/SVG export and runs" \
     "the browser tests (Playwright drives it; neither downloads a browser of its own)."
if [ "${DA_LAB_UID:-$(id -u)}" != 0 ]; then
    echo "Install it yourself, then run make again:  sudo apt-get install $PKGS" >&2
    exit 1
fi
echo "Installing it with apt-get (you are root); if another apt or dpkg holds the package" \
     "lock, waiting up to $WAIT s for it (APT_LOCK_WAIT)."

# "$@", retried while the output says another process holds an apt/dpkg lock
patient() {
    start=$(date +%s)
    while :; do
        out=$("$@" 2>&1)
        rc=$?
        [ "$rc" = 0 ] && return 0
        case "$out" in
            *"Could not get lock"* | *"Unable to lock"* | *"Unable to acquire the dpkg"*) ;;
            *) printf '%s\n' "$out" >&2; return "$rc" ;;
        esac
        waited=$(( $(date +%s) - start ))
        if [ "$waited" -ge "$WAIT" ]; then
            printf '%s\n' "$out" | grep -i lock | tail -n 2 >&2
            echo "Gave up after $WAIT s: another apt or dpkg still holds the lock (above)." >&2
            return "$rc"
        fi
        echo "another apt or dpkg holds the lock; waited $waited s of $WAIT s ..."
        sleep "$POLL"
    done
}

if ! patient "$APT" -o DPkg::Lock::Timeout="$WAIT" update -qq \
   || ! patient "$APT" -o DPkg::Lock::Timeout="$WAIT" install -y -qq $PKGS; then
    echo "make stopped before installing anything else: run it again once the other" \
         "package manager has finished (or install first: apt-get install $PKGS)." >&2
    exit 1
fi
echo "installed: $PKGS"
