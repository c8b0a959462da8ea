# meshrun's startup hook (docs/progress.md, "Hangs without beats"). meshrun puts this folder first on a
# worker's PYTHONPATH; Python imports this file at start-up. It starts meshrun's collective watcher (in the
# worker meshrun spawned only) and then runs the sitecustomize Python would have run without us, so a
# user's own (or the distribution's) is never hidden: it ends up as sys.modules["sitecustomize"].
import os
import sys


def _meshrun_start_watcher():
    try:
        import _meshrun_hook

        _meshrun_hook.start()
    except Exception as error:  # never break the user's program for a diagnostic
        sys.stderr.write(f"meshrun hook: not watching collectives: {error!r}\n")


def _meshrun_chain_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)  # its errors reach site.py as they would without meshrun


_meshrun_start_watcher()
_meshrun_chain_sitecustomize()
