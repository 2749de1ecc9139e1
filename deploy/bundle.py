"""A runtime-only folder for serving an artifact without Python.

    bundle/
      model.so, manifest.json     the artifact
      libtvm_runtime.so           the Relax VM (3.4 MB; not the 259 MB compiler library)
      libtvm_ffi.so               TVM's FFI (2.5 MB)
      tcl-run                     the C++ loader (deploy/loader/tcl_run.cc), rpath $ORIGIN
      README.md                   how to run it, and what the machine needs (glibc, libstdc++)

The loader is compiled here with the system's C++ compiler against the installed wheels, then run
once on the folder, so a bundle that comes out is one that loads and runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from deploy.artifact import Manifest
from deploy.errors import PipelineError

__all__ = ["BundleError", "LOADER_SOURCE", "bundle", "required_symbol_versions"]

LOADER_SOURCE = Path(__file__).parent / "loader" / "tcl_run.cc"
LOADER = "tcl-run"


class BundleError(PipelineError):
    """The artifact could not be bundled; str(err) is the one-line reason."""


def bundle(artifact_dir: Path, out: Path, *, compiler: str | None = None) -> Path:
    """Write the runtime-only folder for `artifact_dir` to `out` (which must not hold anything yet)."""
    from tcl_core import tvm_api

    artifact_dir, out = Path(artifact_dir), Path(out)
    manifest_path = artifact_dir / "manifest.json"
    if not manifest_path.is_file():
        raise BundleError(f"{artifact_dir}: no manifest.json (give the folder `tcl-tuned tune` wrote)")
    try:
        manifest = Manifest.model_validate_json(manifest_path.read_text())
    except ValueError as err:
        raise BundleError(f"{manifest_path}: not a tcl-tuned manifest ({str(err).splitlines()[0]})") from None
    if not (artifact_dir / manifest.library).is_file():
        raise BundleError(f"{artifact_dir}: no {manifest.library}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"--out {out} exists and is not an empty folder")
    cxx = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if not cxx:
        raise BundleError("no C++ compiler found (install g++, or set CXX)")

    files = tvm_api.runtime_files()
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for name in ("libtvm_runtime.so", "libtvm_ffi.so"):
            shutil.copy2(files[name], staging / name)
        shutil.copy2(artifact_dir / manifest.library, staging / manifest.library)
        shutil.copy2(manifest_path, staging / "manifest.json")
        _compile_loader(cxx, files["include"], staging)
        _smoke_run(staging)
        (staging / "README.md").write_text(_readme(manifest, staging))
        if out.exists():
            out.rmdir()
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _compile_loader(cxx: str, include: Path, folder: Path) -> None:
    command = [cxx, "-std=c++17", "-O2", f"-I{include}", str(LOADER_SOURCE), "-o", str(folder / LOADER),
               f"-L{folder}", "-Wl,--no-as-needed", "-ltvm_runtime", "-ltvm_ffi", "-Wl,--as-needed",
               "-Wl,-rpath,$ORIGIN"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr.strip()[:200])
        raise BundleError(f"compiling the loader with {cxx} failed: {first}")


def _smoke_run(folder: Path) -> None:
    """Run the loader once on random inputs with an empty environment: it must load from the folder alone."""
    try:
        done = subprocess.run([str(folder / LOADER), str(folder), "--repeat", "1"], capture_output=True,
                              text=True, env={}, cwd="/", timeout=300)
    except subprocess.TimeoutExpired:
        raise BundleError("the bundled loader did not finish one call in 300 s") from None
    if done.returncode != 0:
        raise BundleError(f"the bundled loader does not run: {done.stderr.strip().splitlines()[-1:]}")


def required_symbol_versions(paths: list[Path]) -> dict[str, str]:
    """The newest GLIBC_ and GLIBCXX_ symbol versions the files ask for: what the machine must have."""
    newest: dict[str, tuple[int, ...]] = {}
    for path in paths:
        for prefix, version in re.findall(rb"\b(GLIBC|GLIBCXX)_(\d+(?:\.\d+)+)\b", path.read_bytes()):
            key, parts = prefix.decode(), tuple(int(p) for p in version.decode().split("."))
            newest[key] = max(newest.get(key, parts), parts)
    return {key: ".".join(map(str, parts)) for key, parts in sorted(newest.items())}


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


def _readme(manifest: Manifest, folder: Path) -> str:
    needs = required_symbol_versions(sorted(p for p in folder.iterdir() if p.is_file() and p.name != "manifest.json"))
    inputs = ", ".join(f"`{t.name}` {t.dtype}{t.shape}" for t in manifest.inputs)
    outputs = ", ".join(f"`{t.name}` {t.dtype}{t.shape}" for t in manifest.outputs)
    sizes = "\n".join(f"- `{p.name}` ({_size(p.stat().st_size)})" for p in sorted(folder.iterdir()) if p.is_file())
    ort = manifest.latency_ms.onnxruntime
    against = f"onnxruntime {ort} ms" if ort is not None else f"onnxruntime cannot run it; checked against {manifest.reference}"
    return f"""# {manifest.name}: tuned with tcl-tuned, runs without Python

Built for `{manifest.platform}` (TVM {manifest.tvm_version}); {manifest.latency_ms.tvm} ms per call when
tuned ({against}) on {manifest.threads} threads.

```
./tcl-run . --inputs {' '.join(f'input_{i}.npy' for i in range(len(manifest.inputs)))} --outputs out/ --repeat 20
```

Inputs, in this order, as `.npy` files: {inputs}. Without `--inputs` the loader draws random ones.
Outputs: {outputs}, written as `out/output_<i>.npy`. The loader prints one JSON line with the
median latency and the thread count; errors are one line on stderr and exit status 1.

## What the machine needs

- Linux x86-64 with glibc >= {needs.get('GLIBC', '?')} and libstdc++ with GLIBCXX_{needs.get('GLIBCXX', '?')}
  (the newest symbol versions these files ask for), and the CPU features of the target:
  `{manifest.target.get('mcpu', manifest.target.get('kind'))}`.
- Threads: TVM reads `TVM_NUM_THREADS` once, when its thread pool starts; the loader sets it to
  {manifest.threads} (what the library was tuned on) unless it is already set. Without it TVM takes
  half the logical CPUs on x86.
- Nothing else: the libraries here are found through rpath `$ORIGIN`.

## Linking it into your own program

C++17; include the headers of the `apache-tvm-ffi` wheel (`tvm-ffi-config --includedir`), not
the `apache-tvm` wheel's runtime headers; link `-Wl,--no-as-needed -ltvm_runtime -ltvm_ffi`
(libtvm_runtime's static initialisers register the VM loader that `model.so` needs). The loader's
source shows the calls: `Module::LoadFromFile`, `vm_load_executable`, `vm_initialization`, `main`.

## Files

{sizes}
"""
