#!/bin/sh
# Cargo runs this in front of every rustc call (see .cargo/config.toml). Before the first
# compilation on a machine that lacks libclang (which RocksDB's bindgen step needs), it
# installs it once through scripts/bootstrap.sh, so `cargo test` and `cargo run` work on a
# fresh Debian/Ubuntu machine with nothing installed by hand. Afterwards it costs one
# file test per call. TENURE_NO_BOOTSTRAP=1: check and report only, install nothing.
dir=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
# The stamp names the detection's version: a stamp written by an older, wrong detection
# (v1 took libclang-cpp for libclang) does not skip the check.
stamp="${TMPDIR:-/tmp}/tenure-bootstrap-v2.ok"
if [ -z "${TENURE_NO_BOOTSTRAP:-}" ] && [ ! -e "$stamp" ]; then
    (
        flock 9 2>/dev/null || true
        if [ ! -e "$stamp" ]; then
            if "$dir/bootstrap.sh" 1>&2; then
                : > "$stamp"
            else
                echo "tenure: bootstrap failed; see the message above" >&2
                exit 1
            fi
        fi
    ) 9>"${TMPDIR:-/tmp}/tenure-bootstrap.lock" || exit 1
fi
exec "$@"
