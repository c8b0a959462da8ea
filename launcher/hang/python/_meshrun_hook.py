# meshrun's collective watcher, started by meshrun's sitecustomize in the worker meshrun spawned.
#
# A daemon thread reports this rank's collective progress to its agent on <MESHRUN_PROGRESS>.fr (beside the
# progress socket, so that its reports never crowd out the script's own beats):
# "fr status <pg>:<last enqueued>:<last completed> ..." from PyTorch's Flight Recorder summary
# (pg_status: no entries, microseconds) every POLL_S (0.1 s). When the agent suspects a hang it asks, on
# <MESHRUN_PROGRESS>.hook, for the full record ("dump <path>"): the open collectives and the last few of
# each group, with the Python frames that called them, and every Python thread with its native id and stack
# (which thread is the script's, which is this hook's: the agent reads what each waits on); the thread writes it
# as JSON and answers "fr dumped <path>". For stragglers the agent also asks "clock <its ns>" (answered at once with this
# clock, "fr clock <its ns> <ours>") and "arrivals <first> <last> <group>" (when this rank entered those
# collectives: "fr arrivals <first> <last> <count> <mean ns> <span ns> <group>"). While other ranks may wait
# for this one, the agent asks "frames" every few seconds: "fr frames {"frames": [...], "where": "..."}", the main
# thread's stack (stuck or busy: docs/progress.md).
# The lines' format is proto/worker/hook_messages.hpp's (the _*_line functions and _parse_request below).
# Nothing here imports torch: it only looks at torch once the script has.
import atexit
import json
import os
import socket
import sys
import threading
import time

# 31 us a read on this machine; a report ends the goodput ledger's attempts (collective_accountant.hpp) within it
POLL_S = 0.1
RESEND_S = 5.0  # an unchanged status is sent again this often (the agent knows the hook is alive)
KEEP_RETIRED = 4  # finished collectives kept per group in a dump, besides the open ones
MAX_ENTRIES = 64
MAX_FRAMES = 6
MAX_STACK_READ = 24  # frames in an answer to "frames", and per thread in a dump
MAX_THREADS = 64  # threads listed in a dump
MAX_DATAGRAM = 3500
SETTLE_S = 0.02

_started = False
# Set at exit: the watcher stops calling into torch before the interpreter finalises. A daemon thread
# that re-takes the GIL during finalisation is ended by pthread_exit, which aborts the process ("terminate
# called without an active exception") when it unwinds through C++ frames such as torch's bindings.
_stopping = threading.Event()
# The Flight Recorder keys pg_status by a process-local id, its entries and meshrun's verdict by the
# group's name, which every rank shares. Ids seen beside names in the entries are kept here (read once per
# new group); only an id whose entries left the recorder's ring falls back on creation order.
_names_by_uid = {}
_libraries = None  # the standard library's and installed packages' folders, read on first use
# The last arrival answer with times, by (first, last, group): an agent asks again when the answer seems lost,
# and the recorder is read (the GIL held for tens of milliseconds) once per probe.
_last_arrivals = (None, "")


def _active():
    agent = os.environ.get("MESHRUN_AGENT_PID", "")
    # Only the process meshrun spawned: DataLoader workers, compile pools and other Python children
    # inherit this environment but have another parent.
    return bool(os.environ.get("MESHRUN_PROGRESS")) and agent == str(os.getppid())


def _fr_off():
    return os.environ.get("TORCH_FR_BUFFER_SIZE", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "")) == "0"


def _c10d():
    try:
        # The script may be importing torch.distributed right now: a module half-initialised has no
        # is_initialized yet, and anything may still fail; the next poll looks again.
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return sys.modules["torch"]._C._distributed_c10d
    except Exception:
        return None


def _group_names():
    from torch.distributed import distributed_c10d as dc

    names = {str(uid): str(name) for uid, name in enumerate(list(dc._world.pg_names.values()))}
    names.update(_names_by_uid)
    return names


def _full_dump(c10d):
    """The recorder's entries (no stack traces); the group names they show are learned on the way."""
    import pickle

    dump = pickle.loads(c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=False, onlyActive=False))
    for e in dump.get("entries", []):
        if e.get("process_group"):
            _names_by_uid[str(e.get("pg_id"))] = str(e["process_group"][0])
    return dump


def _status(c10d):
    summary = json.loads(c10d._dump_fr_trace_json(includeCollectives=False))
    if any(pg not in _names_by_uid for pg in summary.get("pg_status", {})):
        # A group PyTorch lists once it ran a collective: its entries name it (once per new group).
        _full_dump(c10d)
    names = _group_names()
    groups = [
        (names.get(pg, pg), int(s["last_enqueued_collective"]), int(s["last_completed_collective"]))
        for pg, s in sorted(summary.get("pg_status", {}).items())
    ]
    return _status_line(groups)


def _group_ranks():
    from torch.distributed import distributed_c10d as dc

    out = {}
    world = dc._world
    for pg, name in list(world.pg_names.items()):
        ranks = world.pg_group_ranks.get(pg)
        if ranks is not None:
            out[str(name)] = sorted(int(r) for r in ranks.keys())
    return out


def _main_thread_frames():
    # The Flight Recorder's own frames cost a symbolizer that imports torch._inductor on first use (a
    # second and more, many more while another thread holds the GIL): the main thread's stack, read
    # here, names the same caller of the collective it waits in, for nothing.
    frame = sys._current_frames().get(threading.main_thread().ident)
    out = []
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        # The innermost frames are torch's own (distributed_c10d.py, c10d_logger.py): the caller comes after.
        if "/torch/distributed/" not in code.co_filename:
            out.append([code.co_filename, frame.f_lineno, code.co_name])
        frame = frame.f_back
    return out


def _library_dirs():
    global _libraries
    if _libraries is None:
        import sysconfig

        paths = sysconfig.get_paths()
        _libraries = tuple(sorted({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}))
    return _libraries


def _frames_answer():
    # Where the main thread is now, innermost first, and which frame is the user's own code (not the
    # standard library's or an installed package's): the agent compares two reads (a stack that moves is a
    # rank making progress) and names the user's frame in a "late" line.
    frame = sys._current_frames().get(threading.main_thread().ident)
    frames, where = [], ""
    while frame is not None and len(frames) < MAX_STACK_READ:
        code = frame.f_code
        frames.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        if not where and not code.co_filename.startswith(("<",) + _library_dirs()):
            where = f"{code.co_name} at {os.path.basename(code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return _frames_line(frames, where)


def _threads():
    # Every Python thread with its native id, stack, user frame and the library call that frame made: the agent
    # reads what each thread waits on from /proc and needs to know which thread is whose (late or hung:
    # docs/progress.md). The hook's own thread says so.
    frames, me = sys._current_frames(), threading.get_ident()
    out = []
    for thread in threading.enumerate()[:MAX_THREADS]:
        if thread.native_id is None:
            continue
        frame, stack, where, call, inner = frames.get(thread.ident), [], "", "", ""
        while frame is not None and len(stack) < MAX_STACK_READ:
            code = frame.f_code
            stack.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
            if not where and not code.co_filename.startswith(("<",) + _library_dirs()):
                where, call = f"{code.co_name} at {os.path.basename(code.co_filename)}:{frame.f_lineno}", inner
            inner = code.co_name
            frame = frame.f_back
        out.append({"tid": thread.native_id, "name": thread.name, "frames": stack, "where": where, "call": call,
                    "meshrun": thread.ident == me})
    return out


def _entry(e):
    pg = e.get("process_group") or ("?", "")
    op = e.get("profiling_name", "?")
    return {
        "group": str(pg[0]),
        "seq": int(e.get("collective_seq_id", -1)),
        "p2p": bool(e.get("is_p2p", False)),
        "op": op.split(":", 1)[-1],
        "sizes": json.dumps(e.get("input_sizes", [])),
        "dtypes": ",".join(e.get("input_dtypes", [])),
        "created_ms": int(e.get("time_created_ns", 0)) // 1000000,
        "retired": bool(e.get("retired", False)),
        "frames": [],
    }


def _record(c10d):
    dump = _full_dump(c10d)
    names = _group_names()
    entries = [_entry(e) for e in dump.get("entries", []) if not e.get("is_p2p", False)]
    open_entries = [e for e in entries if not e["retired"]]
    if open_entries:  # the one the main thread waits in: the newest it entered
        open_entries[-1]["frames"] = _main_thread_frames()
    kept, retired_seen = [], {}
    for e in reversed(entries):
        if not e["retired"]:
            kept.append(e)
        elif retired_seen.get(e["group"], 0) < KEEP_RETIRED:
            retired_seen[e["group"]] = retired_seen.get(e["group"], 0) + 1
            kept.append(e)
    kept = sorted(kept[:MAX_ENTRIES], key=lambda e: (e["group"], e["seq"]))
    ranks = _group_ranks()
    groups = {}
    for pg, s in dump.get("pg_status", {}).items():
        name = names.get(str(pg), str(pg))
        groups[name] = {
            "ranks": ranks.get(name, []),
            "last_enqueued": int(s.get("last_enqueued_collective", -1)),
            "last_completed": int(s.get("last_completed_collective", -1)),
        }
    return {"fr": "on", "groups": groups, "entries": kept}


def _dump(path):
    c10d = _c10d()
    if _fr_off():
        record = {"fr": "off"}
    elif c10d is None:
        record = {"fr": "no_process_group"}
    else:
        record = _record(c10d)
    record["pid"] = os.getpid()
    record["threads"] = _threads()
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def _arrivals(first, last, group):  # (count, the answer's line)
    # When this rank entered each collective of the range (the recorder's time_created_ns, this host's
    # wall clock): their count, mean and span, which the daemon compares across ranks (count 0: none known).
    c10d = None if _fr_off() else _c10d()
    times = []
    if c10d is not None:
        for e in _full_dump(c10d).get("entries", []):
            pg = e.get("process_group") or ("", "")
            seq = int(e.get("collective_seq_id", -1))
            if str(pg[0]) == group and not e.get("is_p2p", False) and first <= seq <= last:
                times.append(int(e.get("time_created_ns", 0)))
    mean, span = (sum(times) // len(times), max(times) - min(times)) if times else (0, 0)
    return len(times), _arrivals_line(first, last, len(times), mean, span, group)


# The wire (proto/worker/hook_messages.hpp, whose parser reads these lines: tests/proto/hook_lines.txt pins both).
def _hello_line(pid, recorder_on):
    return f"fr hello pid={pid} fr={'on' if recorder_on else 'off'}"


def _status_line(groups):
    # groups: (name, last enqueued, last completed) each
    return " ".join(["fr status"] + [f"{name}:{enqueued}:{completed}" for name, enqueued, completed in groups])


def _clock_line(agent_ns, worker_ns):
    return f"fr clock {agent_ns} {worker_ns}"


def _arrivals_line(first, last, count, mean_ns, span_ns, group):
    return f"fr arrivals {first} {last} {count} {mean_ns} {span_ns} {group}"


def _frames_line(frames, where):
    answer = {"frames": list(frames), "where": where}
    text = "fr frames " + json.dumps(answer)
    while len(text.encode()) > MAX_DATAGRAM and answer["frames"]:
        answer["frames"].pop()
        text = "fr frames " + json.dumps(answer)
    return text


def _dumped_line(path):
    return "fr dumped " + path


def _failed_line(why):
    return ("fr failed " + why)[:400]


def _parse_request(text):
    """("clock", agent ns), ("arrivals", first, last, group), ("frames",), ("dump", path), or None."""
    verb, _, rest = text.partition(" ")
    try:
        if verb == "clock":
            return ("clock", int(rest))
        if verb == "arrivals":
            first, last, group = rest.split(" ", 2)
            return ("arrivals", int(first), int(last), group)
    except ValueError:
        return None
    if text == "frames":
        return ("frames",)
    if verb == "dump" and rest:
        return ("dump", rest)
    return None


def _answer(listen, send):
    try:
        request = _parse_request(listen.recv(4096).decode(errors="replace"))
    except socket.timeout:
        return
    if request is None:
        return
    if request[0] == "clock":  # the agent measures this clock's offset from its own: answer at once
        send(_clock_line(request[1], time.time_ns()))
    elif request[0] == "arrivals":
        global _last_arrivals
        _, first, last, group = request
        if _last_arrivals[0] == (first, last, group):
            send(_last_arrivals[1])
            return
        try:
            count, line = _arrivals(first, last, group)
        except Exception:  # the group torn down meanwhile...: no times known
            count, line = 0, _arrivals_line(first, last, 0, 0, 0, group)
        if count:
            _last_arrivals = ((first, last, group), line)
        send(line)
    elif request[0] == "frames":
        send(_frames_answer())
    elif request[0] == "dump":
        path = request[1]
        try:
            _dump(path)
            send(_dumped_line(path))
        except Exception as error:
            send(_failed_line(f"{type(error).__name__}: {error}"))


def _serve(agent, listen):
    def send(text):
        try:
            listen.sendto(text.encode()[:MAX_DATAGRAM], agent)
        except OSError:
            pass

    send(_hello_line(os.getpid(), not _fr_off()))
    # Read now, not on the first "frames" request: the files sysconfig reads would count as the rank's own
    # I/O in the very window the agent judges it stuck or busy.
    _library_dirs()
    last, last_at = None, 0.0
    while not _stopping.is_set():
        try:
            _answer(listen, send)
            if _stopping.is_set():
                break
            c10d = None if _fr_off() else _c10d()
            if c10d is None:
                continue
            status = _status(c10d)
            now = time.monotonic()
            if status != last or now - last_at >= RESEND_S:
                send(status)
                last, last_at = status, now
        except Exception:  # never die of an unexpected state (a group torn down meanwhile...): poll again
            time.sleep(POLL_S)


def start():
    global _started
    if _started or not _active():
        return
    _started = True
    agent = os.environ["MESHRUN_PROGRESS"] + ".fr"
    listen = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = os.environ["MESHRUN_PROGRESS"] + ".hook"
    try:
        os.unlink(path)
    except OSError:
        pass
    listen.bind(path)
    listen.settimeout(POLL_S)
    thread = threading.Thread(target=_serve, args=(agent, listen), name="meshrun-hook", daemon=True)
    thread.start()
    atexit.register(_stop, thread, listen, path)


def _stop(thread, listen, path):
    _stopping.set()
    try:
        listen.sendto(b"stop", path)  # wakes its recv at once
    except OSError:
        pass
    thread.join(2.0)
    if "torch.distributed" in sys.modules:
        # PyTorch's Gloo threads go on releasing the last collective for a few milliseconds after it returned;
        # an interpreter that finalises meanwhile aborts ("terminate called without an active exception",
        # pytorch/pytorch#190489: half the scripts that end without destroy_process_group(), under torchrun).
        # Leaving them SETTLE_S closes that window (bench/control/teardown.sh).
        time.sleep(SETTLE_S)
