# meshrun's startup hook (docs/progress.md, "Hangs without beats"). meshrun puts this folder first on a
# worker's PYTHONPATH; Python imports this file at start-up. In the worker meshrun spawned only, it arms the
# quick exit of a failed worker (docs/multi-node.md#quick-exit) and starts meshrun's collective watcher; then
# it runs the sitecustomize Python would have run without us, so a user's own (or the distribution's) is
# never hidden: it ends up as sys.modules["sitecustomize"].
import os
import sys


def _meshrun_arm_quick_exit():
    try:
        import _meshrun_quick_exit

        _meshrun_quick_exit.arm()  # first: its exit step must run after every other, the watcher's too
    except Exception as error:  # the worker exits as Python does: only slower
        sys.stderr.write(f"meshrun hook: no quick exit: {error!r}\n")


def _meshrun_start_watcher():
    try:
        import _meshrun_hook

        _meshrun_hook.start()
    except Exception as error:  # never break the user's program for a diagnostic
        sys.stderr.write(f"meshrun hook: not watching collectives: {error!r}\n")


def _meshrun_chain_sitecustomize():
    import importlib.machinery
    import importlib.util

    # Every meshrun hook folder is skipped, not only this one: a meshrun run inside a meshrun worker puts
    # two of them on the path, and each would otherwise find the other.
    def meshrun_hook_folder(entry):
        return os.path.isfile(os.path.join(os.path.abspath(entry or os.getcwd()), "_meshrun_hook.py"))

    rest = [p for p in sys.path if not meshrun_hook_folder(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors reach site.py as they would without meshrun


_meshrun_arm_quick_exit()
_meshrun_start_watcher()
_meshrun_chain_sitecustomize()
