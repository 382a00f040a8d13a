"""One CUDA test program = an nvcc binary + the host kernel library of its kernels."""

load("//build_defs:cuda.bzl", "cuda_binary", "host_kernel_library")

def cuda_test_app(name, nvcc_flags = ""):
    """`name` (nvcc, from <name>.cu) and `<name>_host_kernels` (lib<name>_host_kernels.so).

    Both compile the same `<name>_kernels.cuh`.
    """
    cuda_binary(
        name = name,
        srcs = [name + ".cu"],
        hdrs = [
            name + "_kernels.cuh",
            "app_check.h",
            "//hostkernel:kernel_portability.h",
        ],
        nvcc_flags = nvcc_flags,
        visibility = ["//visibility:public"],
    )
    host_kernel_library(
        name = name + "_host_kernels",
        srcs = [name + "_host_kernels.cc"],
        hdrs = [name + "_kernels.cuh"],
        visibility = ["//visibility:public"],
    )
