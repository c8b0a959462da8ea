# meshrun's quick exit (docs/multi-node.md#quick-exit), armed by meshrun's sitecustomize in the worker meshrun
# spawned (a fresh interpreter or a standby).
#
# A worker that dies of an uncaught exception while its job can still restart (the agent sets
# MESHRUN_QUICK_EXIT=1 then) is about to be replaced, and every survivor of a lost peer dies that way. What
# Python does after the traceback costs 0.5-1 s with torch and a process group (bench: module teardown and
# C++ static destructors), and the restart waits for it. So once the exit's own steps have run as they
# always do (non-daemon threads joined, every atexit function called, this one last), the files the script
# left open are flushed and closed as the teardown would have, the standard streams flushed, and the process
# ends with the same exit code, 1. A clean exit, sys.exit(n), KeyboardInterrupt and the job's last attempt
# keep Python's own teardown.
import _io
import atexit
import gc
import os
import sys
import threading

_armed = False
_uncaught = None  # the exception that ended the main module, as the interpreter reported it


def arm():
    """Registers the exit step; called before anything else registers one, so that it runs last."""
    global _armed
    if _armed or not _spawned_by_agent():
        return
    _armed = True
    atexit.register(_exit_quickly)
    sys.addaudithook(_audit)


def note_uncaught(error):
    """The standby's runner reports the script's uncaught exception here (it prints it itself)."""
    global _uncaught
    _uncaught = error


def _spawned_by_agent():
    return os.environ.get("MESHRUN_AGENT_PID", "") == str(os.getppid())


def _audit(event, args):
    # "sys.excepthook" is raised by the interpreter's own report of an uncaught exception, and by a C
    # extension that reports an error with PyErr_Print and carries on: only the first has no Python caller.
    if event != "sys.excepthook" or sys._getframe(0).f_back is not None:
        return
    if threading.current_thread() is threading.main_thread():
        note_uncaught(args[2])


def _exit_quickly():
    error = _uncaught
    if error is None or isinstance(error, KeyboardInterrupt):  # Python then dies of SIGINT: left to it
        return
    if getattr(sys, "last_value", None) is not error:  # the interpreter sets it as it reports the error
        return
    # The agent's say for this attempt; and not in a fork of the worker, which inherits this hook.
    if os.environ.get("MESHRUN_QUICK_EXIT") != "1" or not _spawned_by_agent():
        return
    _close_open_files()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(1)


def _close_open_files():
    # The teardown closes each file object it frees, a wrapper before what it wraps (a TextIOWrapper before
    # its buffer, a GzipFile before its file, which writes its trailer): here, each file that no other open
    # file holds, until none is left. The standard streams stay open, as they do in the teardown.
    standard = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    # type(), not isinstance(): nothing of the script's (a __class__ property) runs for each object.
    files = [f for f in gc.get_objects() if issubclass(type(f), _io._IOBase) and id(f) not in standard]
    files = [f for f in files if not _closed(f)]
    while files:
        held = _held_by_others(files)
        outermost = [f for f in files if id(f) not in held] or files  # a cycle: close them all
        for f in outermost:
            try:
                f.close()
            except Exception:
                pass
        done = {id(f) for f in outermost}
        files = [f for f in files if id(f) not in done and not _closed(f)]


def _closed(f):
    try:
        return bool(f.closed)
    except Exception:
        return True


def _held_by_others(files):
    ids = {id(f) for f in files}
    held = set()
    for f in files:
        for ref in gc.get_referents(f):
            inner = ref.values() if type(ref) is dict else (ref,)  # a Python class's attributes: its __dict__
            held.update(id(r) for r in inner if id(r) in ids and r is not f)
    return held
