# Set-up steps, one line each: sourced by the set-up scripts (from the repository root).
#   step WHAT COMMAND...       prints "setup: WHAT (12 s)"; a failure prints the step's log and exits 1
#   try_step WHAT COMMAND...   the same, but a failure ends the line with "failed" and returns 1
# What a step's command prints goes to .venv/setup.log (appended), never to the terminal. A
# command runs where `set -e` does not apply: a function given as one chains its commands with &&.
# setup_begin / setup_end: one line, "setup: everything installed", when no step ran between them.

SETUP_LOG=.venv/setup.log
SETUP_LOG_TAIL=60   # lines of a failed step's output shown on the terminal

_now_us() { echo "${EPOCHREALTIME/./}"; }

_seconds_since() {  # "0.4" below 10 s, whole seconds above
    local us=$(( $(_now_us) - $1 ))
    if ((us < 10000000)); then printf '%d.%d' $((us / 1000000)) $((us / 100000 % 10)); else echo $((us / 1000000)); fi
}

_log_size() { [[ -f "$SETUP_LOG" ]] && stat -c %s "$SETUP_LOG" || echo 0; }

try_step() {
    local what=$1 start offset status
    shift
    mkdir -p "$(dirname "$SETUP_LOG")"
    start=$(_now_us) offset=$(_log_size)
    printf 'setup: %s' "$what"
    printf '\n== %s: %s\n' "$(date '+%F %T')" "$what" >> "$SETUP_LOG"
    "$@" >> "$SETUP_LOG" 2>&1 < /dev/null && status=0 || status=$?
    if ((status == 0)); then
        printf ' (%s s)\n' "$(_seconds_since "$start")"
        return 0
    fi
    printf ' failed (%s s)\n' "$(_seconds_since "$start")"
    SETUP_FAILED_OUTPUT=$(tail -c +"$((offset + 1))" "$SETUP_LOG" | tail -n "$SETUP_LOG_TAIL")
    return 1
}

step() {
    try_step "$@" && return 0
    echo "setup: its last output (all of it in $SETUP_LOG):"
    echo "$SETUP_FAILED_OUTPUT" | sed 's/^/    /'
    exit 1
}

setup_begin() {
    _setup_start=$(_now_us) _setup_log_offset=$(_log_size)
}

setup_end() {
    [[ "$(_log_size)" == "$_setup_log_offset" ]] || return 0
    echo "setup: everything installed (.venv/, $(_seconds_since "$_setup_start") s)"
}
