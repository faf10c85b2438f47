"""The GPU check's step on this machine: the wheels the GPU machine lacks, small enough to travel.

    python benchmarks/gpu/prepare.py                 # .gpu/wheels/ (ignored by git), checked
    python benchmarks/gpu/prepare.py --simulate DIR  # ... and a Python 3.12 venv like the GPU
                                                     # machine's (torch 2.11) in DIR, for a dry run

The GPU machine (benchmarks/gpu/README.md) has Python 3.12 with torch 2.11 and no network;
a command there carries at most 64 MiB of the repository and its carried paths. This
downloads benchmarks/gpu/wheels.txt as cp312 manylinux x86_64 wheels and cuts Ray's wheel
(79 MB) to what a local Ray of advisor's needs: without its Java jars, its dashboard's web
client (advisor starts Ray with include_dashboard=False) and RLlib, its RECORD rewritten to
match (43 MB). It then checks that every wheel's requirements are met by the wheels or by
the GPU machine's image (IMAGE below, read from the device tool's package list), and that
the wheels and the repository fit in one command's 64 MiB.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WHEELS = REPO / ".gpu" / "wheels"
LIMIT = 64 * 2**20  # what one device command carries: the working tree and its carried paths
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
RAY_DROPPED = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/")
# Python packages of the GPU machine's image ('cuda', read 2026-11-17), normalised names
IMAGE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer click cloudpickle colorama contourpy coverage cycler cython einops filelock
fonttools frozenlist fsspec grpcio h11 hf-xet httpcore httpx huggingface-hub idna iniconfig jinja2 joblib
kiwisolver lightning lightning-utilities markdown markupsafe matplotlib mpmath msgpack multidict networkx
numpy nvidia-ml-py packaging pandas pathspec pillow pip pluggy prometheus-client propcache protobuf psutil
pyarrow pygments pyparsing pytest pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex
requests safetensors scikit-learn scipy setuptools six sympy tabulate tensorboard threadpoolctl tokenizers
torch torchaudio torchmetrics torchvision tqdm transformers triton typer typing-extensions urllib3 wheel
wrapt yarl zipp""".split())


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> list[str]:
    return [line.strip() for line in (HERE / "wheels.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def download(specs: list[str]) -> None:
    WHEELS.mkdir(parents=True, exist_ok=True)
    have = {norm(p.name.split("-")[0]) + "==" + p.name.split("-")[1] for p in WHEELS.glob("*.whl")}
    missing = [s for s in specs if norm(s.split("==")[0]) + "==" + s.split("==")[1] not in have]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(WHEELS),
                        *missing], check=True)


def trim_ray() -> None:
    """Ray's wheel without what a local, dashboard-less Ray never loads; RECORD rewritten."""
    for wheel in WHEELS.glob("ray-*.whl"):
        if wheel.name.endswith("-trimmed.whl") or "+" in wheel.name:
            continue
        with zipfile.ZipFile(wheel) as src:
            if not any(n.startswith(RAY_DROPPED) for n in src.namelist()):
                continue
            out = wheel.with_suffix(".part")
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
                record_name, rows = None, []
                for info in src.infolist():
                    if info.filename.startswith(RAY_DROPPED):
                        continue
                    if info.filename.endswith(".dist-info/RECORD"):
                        record_name = info.filename
                        continue
                    data = src.read(info)
                    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    rows.append(f"{info.filename},sha256={digest},{len(data)}")
                    dst.writestr(info, data)
                assert record_name is not None, f"{wheel.name} has no RECORD"
                rows.append(f"{record_name},,")
                dst.writestr(record_name, "\n".join(rows) + "\n")
        out.replace(wheel)  # the same file name: pip reads the name's tags


def requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    found = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            spec = line.split(":", 1)[1].strip()
            if "extra ==" in spec:
                continue
            if ";" in spec and not _marker_holds(spec.split(";", 1)[1]):
                continue
            found.append(norm(re.split(r"[ ;<>=!~\[(]", spec, maxsplit=1)[0]))
    return found


def _marker_holds(marker: str) -> bool:
    """Whether an environment marker holds on the GPU machine (CPython 3.12, Linux x86_64)."""
    try:
        from packaging.markers import Marker

        return Marker(marker).evaluate({"python_version": "3.12", "python_full_version": "3.12.3",
                                        "sys_platform": "linux", "platform_system": "Linux",
                                        "platform_machine": "x86_64", "implementation_name": "cpython",
                                        "platform_python_implementation": "CPython", "os_name": "posix"})
    except Exception:  # noqa: BLE001 - an unreadable marker: count the requirement
        return True


def check() -> list[str]:
    wheels = sorted(WHEELS.glob("*.whl"))
    names = {norm(w.name.split("-")[0]) for w in wheels}
    problems = []
    for w in wheels:
        for need in requirements(w):
            if need not in names and need not in IMAGE:
                problems.append(f"{w.name} needs {need}: neither a carried wheel nor in the GPU machine's image")
    return problems


def tree_bytes() -> int:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum((REPO / p.decode()).stat().st_size for p in listed if p and (REPO / p.decode()).is_file())


def simulate(where: Path) -> None:
    """A Python 3.12 venv holding what the GPU machine's image holds that advisor's check
    uses (torch 2.11 and the image's libraries), for a dry run of device.sh on this CPU."""
    python = Path.home() / ".pyenv" / "versions" / "3.12.1" / "bin" / "python3"
    if not (where / "bin" / "python3").exists():
        subprocess.run([str(python), "-m", "venv", str(where)], check=True)
    image = ["torch==2.11.0", "transformers", "lightning", "accelerate", "scikit-learn", "pytest", "pytest-timeout",
             "nvidia-ml-py", "pyyaml", "matplotlib", "psutil", "numpy", "scipy", "click", "filelock", "msgpack",
             "protobuf", "requests", "attrs", "tqdm", "markupsafe", "pygments", "typing-extensions", "packaging",
             "tokenizers", "wheel"]
    subprocess.run([str(where / "bin" / "pip"), "install", "-q", *image], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--simulate", metavar="DIR", help="also build a Python 3.12 venv like the GPU machine's in DIR")
    args = ap.parse_args()
    download(pinned())
    trim_ray()
    problems = check()
    wheels = sum(w.stat().st_size for w in WHEELS.glob("*.whl"))
    tree = tree_bytes()
    manifest = {"wheels": sorted(w.name for w in WHEELS.glob("*.whl")), "wheel_bytes": wheels, "tree_bytes": tree,
                "limit_bytes": LIMIT, "problems": problems}
    (REPO / ".gpu" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest['wheels'])} wheels, {wheels / 2**20:.1f} MiB; the working tree {tree / 2**20:.1f} MiB; "
          f"together {(wheels + tree) / 2**20:.1f} of {LIMIT / 2**20:.0f} MiB")
    for p in problems:
        print("problem:", p)
    if args.simulate:
        simulate(Path(args.simulate))
        print(f"simulated GPU machine's Python: {args.simulate}/bin/python3")
    return 1 if problems or wheels + tree > LIMIT else 0


if __name__ == "__main__":
    sys.exit(main())
