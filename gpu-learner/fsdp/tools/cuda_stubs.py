#!/usr/bin/env python3
"""Stand-in CUDA libraries for a CPU-only torch install (the post step of scripts/python/torch.txt).

PyPI's Linux torch wheel is the CUDA build: its libraries name libcudart, libcublas, libcudnn, libnccl, ...
as dependencies, which live in ~2.3 GB of nvidia-* wheels. A CPU never calls them, but the dynamic loader
must resolve them to import torch. This tool reads which of those libraries (and which of their symbols,
with symbol versions) torch's ELF files need and are not on the system, and compiles one small stub per
library into torch/lib (on torch's RUNPATH): every function returns an error (100 = cudaErrorNoDevice),
device counts are 0, error strings say what this is. torch then imports, reports
torch.cuda.is_available() == False and runs on the CPU with gloo.

Never use it on a GPU host (scripts/python/torch-cuda.txt installs the real libraries there).
Needs readelf (binutils) and a C compiler. Usage: python cuda_stubs.py   (with the venv's python)
"""
import glob
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

NO_DEVICE = 100  # cudaErrorNoDevice / CUDA_ERROR_NO_DEVICE
MESSAGE = "no CUDA device: CPU-only torch install (stand-in CUDA library, gpu-learner/fsdp/tools/cuda_stubs.py)"
# Functions whose callers read an out-parameter or a returned pointer (the rest return NO_DEVICE).
SPECIAL = {
    "cudaGetDeviceCount": "int {name}(int* n) {{ if (n) *n = 0; return {err}; }}",
    "cuDeviceGetCount": "int {name}(int* n) {{ if (n) *n = 0; return {err}; }}",
    "cudaGetLastError": "int {name}(void) {{ return 0; }}",
    "cudaPeekAtLastError": "int {name}(void) {{ return 0; }}",
    "cuGetErrorString": "int {name}(int e, const char** s) {{ if (s) *s = MESSAGE; return 0; }}",
    "cuGetErrorName": "int {name}(int e, const char** s) {{ if (s) *s = MESSAGE; return 0; }}",
}


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", readelf("-d", path))


def version_files(path):
    """Symbol version name -> the library file that must define it (.gnu.version_r)."""
    files, cur = {}, None
    for line in readelf("-V", path).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"Name: (\S+)\s+Flags:", line)
        if m and cur:
            files[m.group(1)] = cur
    return files


def dynamic_symbols(path):
    """(type, binding, section, name[@version]) of each dynamic symbol."""
    for line in readelf("--dyn-syms", path).splitlines():
        p = line.split()
        if len(p) >= 8 and p[0].endswith(":") and p[0][:-1].isdigit():
            yield p[3], p[4], p[6], p[7]


def missing_libraries(torch_dir):
    """{soname: {symbol: (type, version or None)}} for the libraries torch needs that are nowhere here."""
    lib = os.path.join(torch_dir, "lib")
    elfs = sorted(glob.glob(os.path.join(lib, "*.so*")) + glob.glob(os.path.join(torch_dir, "_C*.so")))
    system = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    shipped = set(os.listdir(lib))

    def system_path(soname):
        m = re.search(r"\s" + re.escape(soname) + r" \(.*?\) => (\S+)", system)
        return m.group(1) if m else None

    def found(soname):
        return soname in shipped or system_path(soname) is not None

    deps = {e: needed(e) for e in elfs}
    defined = set()
    for e in elfs + sorted({system_path(n) for ns in deps.values() for n in ns if n not in shipped and found(n)}):
        defined.update(name.split("@")[0] for _, _, ndx, name in dynamic_symbols(e) if ndx != "UND")
    stubs = {}
    for e in elfs:
        missing = [n for n in deps[e] if not found(n)]
        if not missing:
            continue
        for n in missing:
            stubs.setdefault(n, {})
        versions = version_files(e)
        for typ, bind, ndx, name in dynamic_symbols(e):
            if ndx != "UND" or bind == "WEAK":
                continue
            base, _, ver = name.partition("@")
            ver = re.sub(r"\s*\(\d+\)$", "", ver)
            if ver and versions.get(ver) in missing:
                stubs[versions[ver]][base] = (typ, ver)
            elif not ver and base not in defined:  # unversioned: any loaded library may define it
                stubs[missing[0]][base] = (typ, None)
    return stubs


def stub_source(symbols):
    src = [f'static const char MESSAGE[] = "{MESSAGE}";']
    for name, (typ, _) in sorted(symbols.items()):
        if typ == "OBJECT":
            src.append(f"__attribute__((aligned(64))) char {name}[4096];")
        elif name in SPECIAL:
            src.append(SPECIAL[name].format(name=name, err=NO_DEVICE))
        elif re.search(r"Get(Error|Status)(String|Name)$", name):
            src.append(f"const char* {name}(void) {{ return MESSAGE; }}")
        else:
            src.append(f"long {name}(void) {{ return {NO_DEVICE}; }}")
    return "\n".join(src) + "\n"


def build(soname, symbols, out_dir, work):
    c = os.path.join(work, soname + ".c")
    with open(c, "w") as f:
        f.write(stub_source(symbols))
    cmd = [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-w", "-o", os.path.join(out_dir, soname), f"-Wl,-soname,{soname}", c]
    versions = sorted({v for _, v in symbols.values() if v})
    if len(versions) > 1:
        raise SystemExit(f"cuda_stubs: {soname} is needed with several symbol versions {versions}; not handled")
    if versions:  # the referencing libraries bind versioned symbols (e.g. cudaMalloc@libcudart.so.13)
        vmap = os.path.join(work, soname + ".map")
        with open(vmap, "w") as f:
            f.write(versions[0] + " { global: " + " ".join(n + ";" for n in sorted(symbols)) + " local: *; };\n")
        cmd.append(f"-Wl,--version-script,{vmap}")
    subprocess.run(cmd, check=True)


def main():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("cuda_stubs: torch is not installed in " + sys.prefix)
    torch_dir = list(spec.submodule_search_locations)[0]
    stubs = missing_libraries(torch_dir)
    with tempfile.TemporaryDirectory() as work:
        for soname, symbols in sorted(stubs.items()):
            build(soname, symbols, os.path.join(torch_dir, "lib"), work)
    check = subprocess.run([sys.executable, "-c", "import torch; assert not torch.cuda.is_available(); print(torch.__version__)"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit("cuda_stubs: torch still does not import:\n" + check.stderr[-2000:])
    total = sum(len(s) for s in stubs.values())
    print(f"cuda_stubs: {len(stubs)} stand-in libraries ({total} symbols) in {torch_dir}/lib; torch {check.stdout.strip()} imports, CPU only",
          file=sys.stderr)


if __name__ == "__main__":
    main()
