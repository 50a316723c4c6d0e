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

unset GIT_XET_LAUNCHED_INIT GIT_XET_LAUNCHED_REQUEST # only this launcher's, never inherited
IFS= read -r line || [ -n "$line" ] || exit 0 # no input at all: nothing to serve
case $line in
*'"event":"init"'*) ;;
*)
    export GIT_XET_LAUNCHED_REQUEST="$line"
    exec "$@"
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
