# Conan 2 recipe for dtrain, after ConanCenter's header-only template. dtrain calls BLAS' sgemm_ itself
# (include/dtrain/backend/cpu/blas.hpp); OpenBLAS, from ConanCenter, provides it.
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
    options = {"with_ring_tcp": [True, False]}
    default_options = {"with_ring_tcp": True}
    exports_sources = "include/*", "LICENSE"
    no_copy_source = True

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        # the same dependencies as CMakeLists.txt (Debian 12's versions or newer)
        self.requires("xtensor/0.24.7", transitive_headers=True)
        self.requires("openblas/0.3.25")
        self.requires("nlohmann_json/3.11.3", transitive_headers=True)
        self.requires("zlib/[>=1.2.13 <2]")
        if self.options.with_ring_tcp:
            self.requires("asio/1.29.0", transitive_headers=True)
            self.requires("openssl/[>=3 <4]")

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

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "dtrain")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []

        core = self.cpp_info.components["dtrain"]
        core.set_property("cmake_target_name", "dtrain::dtrain")
        core.requires = ["xtensor::xtensor", "openblas::openblas", "nlohmann_json::nlohmann_json", "zlib::zlib"]
        core.bindirs = []
        core.libdirs = []
        if self.settings.os in ["Linux", "FreeBSD"]:
            core.system_libs = ["pthread"]

        if self.options.with_ring_tcp:
            ring = self.cpp_info.components["ring_tcp"]
            ring.set_property("cmake_target_name", "dtrain::ring_tcp")
            ring.requires = ["dtrain", "asio::asio", "openssl::ssl", "openssl::crypto"]
            ring.bindirs = []
            ring.libdirs = []
