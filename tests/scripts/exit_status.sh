#!/bin/sh
# Runs its arguments and prints their exit status last, for tests whose verdict is the output and the
# status together (CTest's PASS_REGULAR_EXPRESSION ignores the status).
"$@"
echo "exit status $?"
