# meshrun's quick exit (docs/multi-node.md#quick-exit), armed by meshrun's sitecustomize in the worker meshrun
# spawned (a fresh interpreter or a standby).
#
# When a peer is lost, the survivors' next collective fails within milliseconds and each survivor dies of that
# error; while the job can still restart (the agent sets MESHRUN_QUICK_EXIT=1 then) it is about to be replaced.
# What Python does after the traceback costs 0.5-1 s with torch and a process group (module teardown), and the
# restart waits for it. So for that worker alone, once the exit's own steps have run as they always do
# (non-daemon threads joined, every atexit function called, this one last), the files the script left open are
# flushed and closed as the teardown would have, the standard streams flushed, and the process ends through
# libc's exit(1): C atexit handlers and C++ destructors run as at any exit; only the freeing of Python's modules
# is skipped.
#
# Only on proof that nothing is lost: a worker whose own exception started the failure (not the collective's
# error of a lost peer), one that holds an object whose class has a __del__ (a ZipFile writing its directory, a
# shelve, a Parquet writer: the teardown would run it), a clean exit, sys.exit(n), KeyboardInterrupt and the
# job's last attempt keep Python's own teardown.
import _io
import atexit
import gc
import os
import sys
import threading
import types

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


# What a collective raises when a peer is gone: Gloo's transport errors are plain RuntimeErrors that name it;
# NCCL's and the store's are torch.distributed's own error types (checked separately).
_LOST_PEER_MARKERS = ("gloo/transport/", "Connection closed by peer", "Connection reset by peer")


def _exit_quickly():
    error = _uncaught
    if error is None or isinstance(error, KeyboardInterrupt):  # Python then dies of SIGINT: left to it
        return
    if getattr(sys, "last_value", None) is not error:  # the interpreter sets it as it reports the error
        return
    # The agent's say for this attempt; and not in a fork of the worker, which inherits this hook.
    if os.environ.get("MESHRUN_QUICK_EXIT") != "1" or not _spawned_by_agent():
        return
    if not _died_of_lost_peer(error):
        return
    objects = gc.get_objects()  # one walk of the heap (186k objects with torch: about 15 ms each)
    writers = _objects_with_a_finalizer(objects)
    if writers is None:
        return
    _close_all(writers)  # a ZipFile writes its directory here, a shelve its cache; then the files they wrote
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    _close_open_files(objects)
    _exit_through_libc(1)


def _died_of_lost_peer(error):
    """True when the exception (or one it was raised from) is the collective's error of a peer that is gone."""
    dist = sys.modules.get("torch.distributed")
    dist_error = getattr(dist, "DistError", None)
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if dist_error is not None and isinstance(error, dist_error):
            return True
        # BaseException.__str__, not str(): nothing of the script's runs here.
        if isinstance(error, RuntimeError) and any(m in BaseException.__str__(error) for m in _LOST_PEER_MARKERS):
            return True
        error = error.__cause__ or error.__context__
    return False


def _objects_with_a_finalizer(objects):
    """The live objects whose class has a __del__ written in Python (the teardown would run it: a shelve writes
    its cache there) and a close() that does what it would (a ZipFile's close() also writes the directory its
    __del__ never does). None when one has no close(): what its __del__ does is unknown, so the teardown runs it."""
    finalizing = set()
    for kind in {type(obj) for obj in objects}:
        for cls in kind.__mro__:
            finalizer = cls.__dict__.get("__del__")
            if finalizer is not None:
                if isinstance(finalizer, types.FunctionType):
                    finalizing.add(kind)
                break
    if not finalizing:
        return []
    writers = [obj for obj in objects if type(obj) in finalizing]
    if any(not callable(getattr(type(obj), "close", None)) for obj in writers):
        return None
    return writers


def _exit_through_libc(code):
    # libc's exit(): C atexit handlers (a C library flushing its files) and C++ static destructors run, and C
    # stdio buffers are flushed, as at any exit. os._exit() would skip them all.
    try:
        import ctypes

        ctypes.CDLL(None).exit(code)
    except Exception:
        pass
    os._exit(code)


def _close_open_files(objects):
    # The teardown closes each file object it frees, a wrapper before what it wraps (a TextIOWrapper before
    # its buffer, a GzipFile before its file, which writes its trailer): here, each file that no other open
    # file holds, until none is left. The standard streams stay open, as they do in the teardown.
    standard = set()
    for stream in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__):
        while stream is not None and id(stream) not in standard:  # the stream, its buffer and its raw file
            standard.add(id(stream))
            stream = getattr(stream, "buffer", None) or getattr(stream, "raw", None)
    # type(), not isinstance(): nothing of the script's (a __class__ property) runs for each object.
    files = [f for f in objects if issubclass(type(f), _io._IOBase) and id(f) not in standard]
    _close_all(files)


def _close_all(files):
    """Closes each object, one that no other of them holds first (a wrapper before what it wraps)."""
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
    except AttributeError:
        return False  # a writer with no such attribute (a ZipFile): it is closed once
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
