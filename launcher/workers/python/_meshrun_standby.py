# meshrun's standby worker (docs/multi-node.md#standby-workers). The agent starts this interpreter ahead of a
# restart as `python -u _meshrun_standby.py FD MODULE...`; it imports the modules (torch first), says so on the
# control socket FD, and waits. When a worker is needed, the agent sends the worker's command line, environment
# and working folder (proto/worker/standby_messages.hpp), with its stdin, stdout and stderr attached; this process then
# becomes that worker and runs the script as a fresh `python -u script.py` would: __main__, sys.argv, sys.path[0],
# __file__, `-m module`, atexit, exit codes and tracebacks. Nothing here touches CUDA.
import array
import json
import os
import socket
import sys
import time

# A whole worker environment fits: the agent sends at most this many bytes.
MAX_MESSAGE = 4 << 20


def _pss_kb():
    # The proportional set size: pages shared with other standbys (torch's libraries) count by share.
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _warm(control, modules):
    started = time.monotonic()
    try:
        for name in modules:
            __import__(name)
    except BaseException as error:  # the agent says why, once, and starts workers as before
        control.send(json.dumps({"ok": False, "error": f"cannot import {name}: {type(error).__name__}: {error}"}).encode())
        os._exit(0)
    control.send(json.dumps({"ok": True, "import_s": time.monotonic() - started, "pss_kb": _pss_kb()}).encode())


def _receive(control):
    fds = array.array("i")
    message, ancillary, _, _ = control.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(3 * fds.itemsize))
    if not message:
        os._exit(0)  # the agent closed the socket: no worker to become
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(fds) != 3:
        os._exit(70)
    return json.loads(message), list(fds)


def _take_streams(fds):
    # What the imports printed (warnings) went to the agent's in-memory files; a fresh worker would have
    # printed it on its own streams, so it is written there first.
    captured = []
    for fd in (1, 2):
        try:
            captured.append(os.pread(fd, os.fstat(fd).st_size, 0))
        except OSError:
            captured.append(b"")
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    for fd, data in zip((1, 2), captured):
        while data:
            data = data[os.write(fd, data) :]


def _fresh_main(file=None, loader=None):
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(
        {"__builtins__": builtins, "__annotations__": {}, "__loader__": loader, "__spec__": None, "__package__": None}
    )
    if file is not None:
        main.__file__ = file
        main.__cached__ = None
    sys.modules["__main__"] = main
    return main


def _trimmed(tb):
    # Without this file's frames: the traceback starts where a fresh interpreter's would.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def _run_script(path):
    import importlib.machinery
    import io

    file = os.path.abspath(path)
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    main = _fresh_main(file, importlib.machinery.SourceFileLoader("__main__", file))
    with io.open_code(file) as source:
        code = compile(source.read(), file, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _run_module(name):
    import runpy

    sys.path[0] = os.getcwd()
    _fresh_main()
    runpy._run_module_as_main(name, alter_argv=True)  # what `python -m` itself calls


def _become_worker(order):
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["env"])
    hook = sys.modules.get("_meshrun_hook")
    if hook is not None:
        hook.start()  # the collective watcher: only now does this process have a progress socket
    sys.orig_argv = list(order["orig_argv"])
    if order["module"]:
        sys.argv = ["-m"] + list(order["args"])
        _run_module(order["target"])
    else:
        sys.argv = [order["target"]] + list(order["args"])
        _run_script(order["target"])


def _exit_as_uncaught(error):
    # A fresh interpreter prints the traceback with its excepthook, runs atexit and exits 1 (or dies of SIGINT
    # for a KeyboardInterrupt); a script that installed its own hook gets it called the same way.
    # The built-in hook prints the exception's own traceback, not its argument: both are trimmed.
    error.with_traceback(_trimmed(error.__traceback__))
    # What the interpreter does before it calls the hook: sys.last_* and the "sys.excepthook" audit event.
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    if sys.version_info >= (3, 12):
        sys.last_exc = error
    sys.audit("sys.excepthook", sys.excepthook, type(error), error, error.__traceback__)
    quick_exit = sys.modules.get("_meshrun_quick_exit")
    if quick_exit is not None:
        quick_exit.note_uncaught(error)  # the audit event above came from Python code: not taken for this
    sys.excepthook(type(error), error, error.__traceback__)
    if isinstance(error, KeyboardInterrupt):
        import atexit
        import signal

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(1)


def _main():
    control = socket.socket(fileno=int(sys.argv[1]))
    _warm(control, sys.argv[2:])
    order, fds = _receive(control)
    control.close()
    _take_streams(fds)
    try:
        _become_worker(order)
    except SystemExit:
        raise
    except BaseException as error:
        _exit_as_uncaught(error)


_main()
