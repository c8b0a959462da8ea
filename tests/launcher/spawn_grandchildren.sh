#!/bin/sh
# A worker that leaves processes behind, for "no orphans" (test_launch.cpp): a child in its own process
# group (plain background job) and one in a session of its own (setsid), each writing its pid to DIR (written
# whole, then renamed: the test reads a file as soon as it exists).
#   spawn_grandchildren.sh DIR wait|exit
dir=$1
sleep 1000 &
echo $! > "$dir/.child.$LOCAL_RANK" && mv "$dir/.child.$LOCAL_RANK" "$dir/child.$LOCAL_RANK"
setsid sleep 1000 &
echo $! > "$dir/.session_child.$LOCAL_RANK" && mv "$dir/.session_child.$LOCAL_RANK" "$dir/session_child.$LOCAL_RANK"
[ "$2" = exit ] && exit 0
sleep 1000
