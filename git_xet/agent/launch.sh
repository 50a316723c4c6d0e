#!/bin/sh
# The transfer agent as git-lfs starts it: `sh launch.sh <agent command...>`.
#
# git-lfs starts `lfs.concurrenttransfers` agents (8 by default) for every push, clone or
# fetch, one after another, each only once the one before has answered `init`; then it gives
# objects to as many as it has objects. A Python agent took ~14 ms to answer, so a command
# waited ~115 ms before its first object, and the agents given no object cost a Python
# start-up each for nothing. Here `init` is answered by this shell (~1 ms), and Python starts
# only in an agent that is given a request: one told only `terminate` never starts it.
#
# Python is handed what was read here, in its environment (transfer.py reads and removes it):
#   GIT_XET_LAUNCHED_INIT     the `init` line answered here (absent: nothing was answered)
#   GIT_XET_LAUNCHED_REQUEST  the first line not handled here, exactly as read
# A first line that is not git-lfs's compact `init` is left to Python, which answers or
# refuses it as it always did. A request line can hold an LFS server's authorization header:
# an environment is readable by its own user only, and transfer.py removes it at start.
#
# A download `init` from a git-lfs that prunes (`git lfs prune`, `git lfs fetch --prune`) is
# Python's to answer: it asks the store about what prune would delete (prune_guard.py). On
# Linux this shell tells from /proc with `read` alone (no process started); where there is no
# /proc, every download `init` goes to Python, which tells (a Python start per agent).

# Whether the git-lfs process above may be pruning (0) or surely is not (1). Its argv is read
# with its NUL separators dropped: a loose match, which Python (platform/processes.py) settles.
may_prune() {
    [ -r /proc/self/stat ] || return 0 # no /proc: Python tells
    pid=$PPID
    for _ in 1 2 3 4; do
        # pid 0: a parent outside this pid namespace; 1: init. Neither is git-lfs, and /proc/0
        # does not exist (a shell prints its failed redirection on stderr: kept quiet below).
        [ "$pid" -gt 1 ] 2>/dev/null || return 1
        # (the shell's `read` takes a byte per system call: comm, a short line, before stat)
        { IFS= read -r name <"/proc/$pid/comm"; } 2>/dev/null || return 1
        case $name in
        git-lfs*)
            args=
            { IFS= read -r args <"/proc/$pid/cmdline"; } 2>/dev/null || [ -n "$args" ] || return 1 # (no newline)
            case $args in *prune* | *fetch*-*p*) return 0 ;; esac
            return 1
            ;;
        esac
        { IFS= read -r stat <"/proc/$pid/stat"; } 2>/dev/null || return 1
        set -- ${stat##*\) } # the fields after the name: state, ppid, ...
        pid=$2
    done
    return 1
}

unset GIT_XET_LAUNCHED_INIT GIT_XET_LAUNCHED_REQUEST # only this launcher's, never inherited
IFS= read -r line || [ -n "$line" ] || exit 0 # no input at all: nothing to serve
case $line in
*'"event":"init"'*) ;;
*)
    export GIT_XET_LAUNCHED_REQUEST="$line"
    exec "$@"
    ;;
esac
case $line in
*'"operation":"download"'*)
    if [ -z "${GIT_XET_PRUNE_CHECK-}" ] && may_prune; then
        export GIT_XET_LAUNCHED_REQUEST="$line"
        exec "$@"
    fi
    ;;
esac
printf '{}\n'
init=$line
while IFS= read -r line || [ -n "$line" ]; do # (a last line may lack its newline)
    case $line in
    '{"event":"terminate"}') exit 0 ;;
    '') ;; # blank: skipped, as Python skips it
    *)
        export GIT_XET_LAUNCHED_INIT="$init" GIT_XET_LAUNCHED_REQUEST="$line"
        exec "$@"
        ;;
    esac
done
exit 0
