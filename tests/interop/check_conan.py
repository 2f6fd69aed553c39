"""Proves conanfile.py with the real Conan 2 (from PyPI, in the venv this runs in): `conan create` with its
test_package, once with the default options and once without the ring and with a BLAS, against
tools/conan/debian12 (every dependency from Debian, none from ConanCenter), and `validate()` refusing a
compiler dtrain does not support.
The recipe is copied with what it exports into a scratch folder, and Conan's home is a scratch folder too.
usage: python check_conan.py <dtrain source dir>"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

src = Path(sys.argv[1]).resolve()
conan = str(Path(sys.executable).parent / "conan")
profile = str(src / "tools" / "conan" / "debian12")


def run(*args, expect_ok=True):
    print("$ conan " + " ".join(args), flush=True)
    p = subprocess.run([conan, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if (p.returncode == 0) != expect_ok:
        print(p.stdout[-4000:])
        sys.exit(f"FAIL: conan {' '.join(args)} exited {p.returncode}")
    return p.stdout


with tempfile.TemporaryDirectory() as tmp:
    os.environ["CONAN_HOME"] = str(Path(tmp) / "home")
    recipe = Path(tmp) / "dtrain"
    recipe.mkdir()
    shutil.copy(src / "conanfile.py", recipe)
    shutil.copy(src / "LICENSE", recipe)
    shutil.copytree(src / "include", recipe / "include")
    shutil.copytree(src / "test_package", recipe / "test_package",
                    ignore=shutil.ignore_patterns("build", "CMakeUserPresets.json"))
    run("profile", "detect")
    # test_package is built unoptimised: it checks the package, not speed, and -O3 doubles its build time
    fast = ["-s", "build_type=Debug"]

    out = run("create", str(recipe), "-pr:a", profile, "--build=missing", "-nr", *fast)
    if "(multi_worker_mirrored_strategy<ring_tcp>): loss" not in out:
        print(out[-3000:])
        sys.exit("FAIL: test_package did not train under the ring")
    print([l for l in out.splitlines() if "): loss" in l][-1])

    out = run("create", str(recipe), "-pr:a", profile, "--build=missing", "-nr", *fast, "-o", "dtrain/*:with_ring_tcp=False",
              "-o", "dtrain/*:with_blas=True")
    if "(single worker, DTRAIN_GEMM=blas): loss" not in out:
        print(out[-3000:])
        sys.exit("FAIL: test_package without the ring, with OpenBLAS, did not train")
    print([l for l in out.splitlines() if "): loss" in l][-1])

    out = run("create", str(recipe), "-pr:a", profile, "-nr", "-s", "compiler.version=11", expect_ok=False)
    if "needs GCC >= 12 or Clang >= 19" not in out:
        print(out[-3000:])
        sys.exit("FAIL: validate() did not refuse GCC 11 with its reason")
    print("GCC 11 refused: " + next(l for l in out.splitlines() if "needs GCC" in l).strip())
print("PASS: conan create")
