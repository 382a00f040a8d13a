"""One CUDA test program = an nvcc binary + the host kernel library of its kernels."""

load("//build_defs:cuda.bzl", "cuda_binary", "cuda_kernel_symbols", "host_kernel_library")

def cuda_test_app(name, num_kernels, nvcc_flags = "", extra_hdrs = [], libs = ""):
    """`name` (nvcc, from <name>.cu) and `<name>_host_kernels` (lib<name>_host_kernels.so).

    Both compile the same `<name>_kernels.cuh`; `extra_hdrs` are further
    headers the program includes (generated ones too), `libs` further link
    options (`-lnccl`). `<name>_kernel_names_test`
    fails when a kernel nvcc registers from it (at least `num_kernels`) has no
    host implementation under the same mangled name.
    """
    cuda_binary(
        name = name,
        srcs = [name + ".cu"],
        hdrs = [
            name + "_kernels.cuh",
            "app_check.h",
            "//hostkernel:kernel_portability.h",
        ] + extra_hdrs,
        nvcc_flags = nvcc_flags,
        libs = libs,
        visibility = ["//visibility:public"],
    )
    host_kernel_library(
        name = name + "_host_kernels",
        srcs = [name + "_host_kernels.cc"],
        hdrs = [name + "_kernels.cuh"],
        visibility = ["//visibility:public"],
    )
    cuda_kernel_symbols(
        name = name + "_nvcc_symbols",
        src = name + ".cu",
        hdrs = [
            name + "_kernels.cuh",
            "app_check.h",
            "//hostkernel:kernel_portability.h",
        ] + extra_hdrs,
        nvcc_flags = nvcc_flags,
    )
    native.cc_test(
        name = name + "_kernel_names_test",
        srcs = ["//hostkernel:nvcc_names_test.cc"],
        data = [
            ":" + name + "_host_kernels",
            ":" + name + "_nvcc_symbols",
        ],
        args = [
            "$(location :%s_nvcc_symbols)" % name,
            "$(location :%s_host_kernels)" % name,
            str(num_kernels),
        ],
        deps = [
            "//hostkernel:loader",
            "//third_party:absl",
        ],
    )
