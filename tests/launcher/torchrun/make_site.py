"""Makes a directory that, on PYTHONPATH, gives Python meshrun_torchrun and meshrun's entry points as the wheel
would, without building it: a link to launcher/torchrun/meshrun_torchrun and a dist-info whose
entry_points.txt is written from pyproject.toml's [project.entry-points]. So torch finds `etcd-v3` the way
it finds it in an installed wheel: importlib.metadata's scan of sys.path.
Usage: make_site.py SITE_DIR   (Python 3.11+: tomllib)
"""
import os
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
site = os.path.abspath(sys.argv[1])
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
groups = project.get("entry-points", {})
if "torchrun.handlers" not in groups:
    sys.exit("pyproject.toml declares no [project.entry-points.\"torchrun.handlers\"]")
os.makedirs(site, exist_ok=True)
link = os.path.join(site, "meshrun_torchrun")
if not os.path.islink(link):
    os.symlink(os.path.join(ROOT, "launcher", "torchrun", "meshrun_torchrun"), link)
info = os.path.join(site, "meshrun-0.0.0+source.dist-info")
os.makedirs(info, exist_ok=True)
with open(os.path.join(info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: meshrun\nVersion: 0.0.0+source\n")
with open(os.path.join(info, "entry_points.txt"), "w") as f:
    for group, entries in groups.items():
        f.write(f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()) + "\n")
print(site)
