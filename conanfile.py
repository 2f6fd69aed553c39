# Conan 2 recipe for dtrain, after ConanCenter's header-only template. dtrain multiplies on its own kernels;
# with_blas adds the dtrain::blas component, whose programs may hand GEMMs to OpenBLAS (DTRAIN_GEMM=blas;
# include/dtrain/backend/cpu/blas.hpp).
import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy
from conan.tools.layout import basic_layout
from conan.tools.scm import Version

required_conan_version = ">=2.0"


class DtrainConan(ConanFile):
    name = "dtrain"
    version = "0.1.0"
    description = "Header-only synchronous data-parallel training with a Keras-shaped API"
    license = "Apache-2.0"
    topics = ("deep-learning", "distributed-training", "all-reduce", "keras", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    # with_cuda: the cuda backend's component (dtrain::cuda). The CUDA Toolkit is not a Conan package:
    # it is taken from the machine, at the conf user.dtrain:cuda_root (default /usr/local/cuda).
    # with_nccl: comm::nccl's component (dtrain::nccl), with NCCL from the same place (or the conf
    # user.dtrain:nccl_root); it needs with_cuda and with_ring_tcp (NCCL's rendezvous is the TCP ring).
    # with_image: PNG, JPEG, BMP and GIF decoding (dtrain::image: libpng, libjpeg-turbo, giflib).
    # with_keras: Keras' .keras files (dtrain::keras: HDF5).
    # with_onnx: the ONNX export (dtrain::onnx: ONNX's protobuf classes).
    options = {"with_ring_tcp": [True, False], "with_blas": [True, False], "with_cuda": [True, False],
               "with_nccl": [True, False], "with_image": [True, False], "with_keras": [True, False],
               "with_onnx": [True, False]}
    default_options = {"with_ring_tcp": True, "with_blas": False, "with_cuda": False, "with_nccl": False,
                       "with_image": False, "with_keras": False, "with_onnx": False}
    exports_sources = "include/*", "LICENSE"
    no_copy_source = True

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        # the same dependencies as CMakeLists.txt, in ranges that start at Debian 12's versions (what CI
        # tests) so a profile's [platform_requires] can take them from the system
        self.requires("xtensor/[>=0.24.3 <0.25]", transitive_headers=True)
        self.requires("nlohmann_json/[>=3.11.2 <4]", transitive_headers=True)
        self.requires("zlib/[>=1.2.13 <2]")
        if self.options.with_blas:
            self.requires("openblas/[>=0.3.21 <0.4]")
        if self.options.with_ring_tcp:
            self.requires("asio/[>=1.22.1 <2]", transitive_headers=True)
            self.requires("openssl/[>=3 <4]")
        if self.options.with_image:
            self.requires("libpng/[>=1.6.39 <2]")
            self.requires("libjpeg-turbo/[>=2.1.5 <4]")
            self.requires("giflib/[>=5.2.1 <6]")
        if self.options.with_keras:
            self.requires("hdf5/[>=1.10.8 <2]")
        if self.options.with_onnx:
            self.requires("onnx/[>=1.12.0 <2]", transitive_headers=True)

    def package_id(self):
        self.info.clear()

    def validate(self):
        # what is built and tested (README "Supported platforms"): Linux, GCC >= 12 or Clang >= 19
        check_min_cppstd(self, 20)
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("dtrain supports Linux only (POSIX sockets, signals and fsync)")
        compiler, version = str(self.settings.compiler), Version(str(self.settings.compiler.version))
        oldest = {"gcc": "12", "clang": "19"}
        if compiler not in oldest or version < oldest[compiler]:
            raise ConanInvalidConfiguration(f"dtrain needs GCC >= 12 or Clang >= 19 (float template arguments, "
                                            f"C++20 designated initializers); got {compiler} {version}")
        if self.options.with_cuda:
            root = self.conf.get("user.dtrain:cuda_root", default="/usr/local/cuda")
            if not os.path.isfile(os.path.join(root, "include", "nvrtc.h")):
                raise ConanInvalidConfiguration(f"with_cuda: no CUDA Toolkit at {root} (nvrtc.h not found); set the conf "
                                                f"user.dtrain:cuda_root to where it is")
        if self.options.with_nccl:
            if not self.options.with_cuda or not self.options.with_ring_tcp:
                raise ConanInvalidConfiguration("with_nccl needs with_cuda=True and with_ring_tcp=True")
            root = self._nccl_root()
            if not os.path.isfile(os.path.join(root, "include", "nccl.h")):
                raise ConanInvalidConfiguration(f"with_nccl: no NCCL at {root} (nccl.h not found); set the conf "
                                                f"user.dtrain:nccl_root to where it is")

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "dtrain")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []

        core = self.cpp_info.components["dtrain"]
        core.set_property("cmake_target_name", "dtrain::dtrain")
        core.bindirs = []
        core.libdirs = []
        self._link(core, {"xtensor::xtensor": None, "nlohmann_json::nlohmann_json": None, "zlib::zlib": "z"})
        if self.settings.os in ["Linux", "FreeBSD"]:
            core.system_libs.append("pthread")

        if self.options.with_blas:
            blas = self.cpp_info.components["blas"]
            blas.set_property("cmake_target_name", "dtrain::blas")
            blas.requires = ["dtrain"]
            blas.bindirs = []
            blas.libdirs = []
            blas.defines = ["DTRAIN_BLAS"]
            self._link(blas, {"openblas::openblas": "openblas"})

        if self.options.with_ring_tcp:
            ring = self.cpp_info.components["ring_tcp"]
            ring.set_property("cmake_target_name", "dtrain::ring_tcp")
            ring.requires = ["dtrain"]
            ring.bindirs = []
            ring.libdirs = []
            self._link(ring, {"asio::asio": None, "openssl::ssl": "ssl", "openssl::crypto": "crypto"})

        if self.options.with_image:
            image = self.cpp_info.components["image"]
            image.set_property("cmake_target_name", "dtrain::image")
            image.requires = ["dtrain"]
            image.bindirs = []
            image.libdirs = []
            self._link(image, {"libpng::libpng": "png", "libjpeg-turbo::libjpeg-turbo": "jpeg", "giflib::giflib": "gif"})

        if self.options.with_keras:
            keras = self.cpp_info.components["keras"]
            keras.set_property("cmake_target_name", "dtrain::keras")
            keras.requires = ["dtrain"]
            keras.bindirs = []
            keras.libdirs = []
            self._link(keras, {"hdf5::hdf5_c": "hdf5_serial"})
            if "hdf5::hdf5_c" not in keras.requires and os.path.isdir("/usr/include/hdf5/serial"):
                keras.includedirs = ["/usr/include/hdf5/serial"]  # Debian's HDF5 from the system

        if self.options.with_onnx:
            onnx = self.cpp_info.components["onnx"]
            onnx.set_property("cmake_target_name", "dtrain::onnx")
            onnx.requires = ["dtrain"]
            onnx.bindirs = []
            onnx.libdirs = []
            self._link(onnx, {"onnx::onnx_proto": "onnx_proto"})
            if "onnx::onnx_proto" not in onnx.requires:  # the system's: its definitions and protobuf too
                onnx.defines = ["ONNX_NAMESPACE=onnx", "ONNX_ML=1"]
                onnx.system_libs.append("protobuf")

        if self.options.with_cuda:
            root = self.conf.get("user.dtrain:cuda_root", default="/usr/local/cuda")
            gpu = self.cpp_info.components["cuda"]
            gpu.set_property("cmake_target_name", "dtrain::cuda")
            gpu.requires = ["dtrain"]
            gpu.bindirs = []
            gpu.includedirs = [os.path.join(root, "include")]
            gpu.libdirs = [os.path.join(root, "lib64")]
            gpu.system_libs = ["cudart", "cublas", "nvrtc"]

        if self.options.with_nccl:
            root = self._nccl_root()
            nccl = self.cpp_info.components["nccl"]
            nccl.set_property("cmake_target_name", "dtrain::nccl")
            nccl.requires = ["cuda", "ring_tcp"]
            nccl.bindirs = []
            nccl.includedirs = [os.path.join(root, "include")]
            nccl.libdirs = [os.path.join(root, "lib64"), os.path.join(root, "lib")]
            nccl.system_libs = ["nccl"]

    def _nccl_root(self):
        cuda = self.conf.get("user.dtrain:cuda_root", default="/usr/local/cuda")
        return self.conf.get("user.dtrain:nccl_root", default=cuda)

    def _link(self, component, needs):
        # A dependency that the profile takes from the system ([platform_requires]) has no Conan package:
        # its headers are on the compiler's default path and its library (if any) is linked by name.
        from_conan = {dep.ref.name for dep in self.dependencies.host.values()}
        for requirement, system_lib in needs.items():
            if requirement.split("::")[0] in from_conan:
                component.requires.append(requirement)
            elif system_lib:
                component.system_libs.append(system_lib)
