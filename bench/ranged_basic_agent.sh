#!/bin/sh
# bench/ranged_basic_agent.py as git-lfs starts it: `sh ranged_basic_agent.sh python agent.py ARGS`.
#
# git-lfs starts its 8 agents one after another, each once the one before has answered `init`,
# and most get no object in a clone of a few files. Upstream's agent is a native binary that
# answers in a millisecond; a Python one takes ~100 ms, 8 times in a row. As our agent's
# launcher (git_xet/agent/launch.sh) does, this shell answers `init`, and Python starts only
# for an agent given a request, which it reads from RANGED_FIRST_REQUEST: the baseline pays no
# start-up upstream's design would not.
IFS= read -r line || exit 0
printf '{}\n'
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
    *'"event":"terminate"'* | *'"event": "terminate"'*) exit 0 ;;
    '') ;;
    *)
        export RANGED_FIRST_REQUEST="$line"
        exec "$@"
        ;;
    esac
done
exit 0
