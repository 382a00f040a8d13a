"""nvcc rules for the CUDA test programs and benchmarks (no rules_cuda offline),
and the host kernel libraries that let the host backend run the same kernels."""

NVCC = "/usr/local/cuda/bin/nvcc"
GENCODE = "-gencode arch=compute_90,code=sm_90"

def cuda_binary(name, srcs, hdrs = [], nvcc_flags = "", libs = "", visibility = None, tags = []):
    """Compiles and links a CUDA program with nvcc against the shared runtime.

    `-cudart shared` makes the program import libcudart.so.13, so the shim can
    take it over with LD_PRELOAD exactly as for any user program. The output is
    `<name>.bin`; `hdrs` are the headers (.cuh/.h) the sources include.
    """
    native.genrule(
        name = name,
        srcs = srcs + hdrs,
        outs = [name + ".bin"],
        cmd = NVCC + " -std=c++17 -O2 -cudart shared " + GENCODE + " " + nvcc_flags +
              " -I. -I$(GENDIR) -o $@ " +
              " ".join(["$(location %s)" % s for s in srcs if s.endswith(".cu") or s.endswith(".cc")]) +
              " " + libs + " -Xlinker -rpath=/usr/local/cuda/lib -lpthread",
        visibility = visibility,
        tags = tags,
        executable = True,
    )

def cuda_kernel_symbols(name, src, hdrs = [], nvcc_flags = "", visibility = None):
    """Compiles one .cu with `nvcc -c` and writes `nm` of the object to `<name>.nm`.

    nvcc's host stub for each kernel is a symbol `__device_stub_<mangled>`
    (itself wrapped in an Itanium identifier), so this file lists the exact
    mangled names nvcc registers with __cudaRegisterFunction. Tests compare
    them with a host kernel library's table.
    """
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [name + ".nm"],
        cmd = NVCC + " -std=c++17 -c " + GENCODE + " " + nvcc_flags +
              " -I. -I$(GENDIR) -o $(@D)/" + name + ".o $(location " + src + ") && " +
              "nm $(@D)/" + name + ".o > $@",
        visibility = visibility,
    )

def host_kernel_library(name, srcs, hdrs = [], deps = [], visibility = None, testonly = False):
    """A host kernel library: kernel sources compiled by g++ for the host backend.

    `srcs` is one .cc that includes hostkernel/cuda_host_compat.h, the kernel
    sources (`hdrs`, the same .cuh files nvcc compiles) and registers each
    kernel with REVENANT_HOST_KERNEL. The output is `lib<name>.so`, to be listed
    in REVENANT_HOST_KERNELS (revenant-run --host-kernels); `name` is a
    filegroup of it. Kernels keep default visibility so the loader can name
    them with dladdr; the scheduler runtime is linked in with hidden symbols.
    """
    so_name = "lib" + name + ".so"

    # .cuh is not a C++ source extension Bazel knows: carry the kernel sources
    # as textual headers.
    native.cc_library(
        name = name + "_kernel_sources",
        textual_hdrs = hdrs,
        testonly = testonly,
    )
    native.cc_binary(
        name = so_name,
        srcs = srcs,
        deps = deps + [
            ":" + name + "_kernel_sources",
            "//hostkernel:compat",
            "//hostkernel:runtime",
            "@local_cuda//:headers",
        ],
        linkshared = 1,
        copts = ["-O2", "-Wno-unknown-pragmas"],
        linkopts = ["-lpthread"],
        visibility = visibility,
        testonly = testonly,
    )
    native.filegroup(
        name = name,
        srcs = [":" + so_name],
        visibility = visibility,
        testonly = testonly,
    )

def ptx_header(name, src, var):
    """Compiles one .cu to PTX (compute_90) and writes `<name>.h`: the PTX as
    `static const char <var>[]`, for the agent to load with cuModuleLoadData
    (the driver compiles it for the device it runs on)."""
    native.genrule(
        name = name,
        srcs = [src],
        outs = [name + ".h"],
        cmd = NVCC + " -ptx -arch=compute_90 -o $(@D)/" + name + ".ptx $(location " + src + ") && " +
              "{ echo '// Generated from $(location " + src + ") by nvcc -ptx.'; " +
              "echo 'static const char " + var + "[] = R\"PTX('; cat $(@D)/" + name + ".ptx; " +
              "echo ')PTX\";'; } > $@",
    )

def fatbin_header(name, src, var):
    """Compiles one .cu to a fat binary (sm_90 code, and compute_90 PTX for
    other devices) and writes `<name>.h`: its bytes as `alignas(8) static
    const unsigned char <var>[]`, for the agent to load with cuModuleLoadData
    (no compilation at load time on the devices it was built for)."""
    native.genrule(
        name = name,
        srcs = [src],
        outs = [name + ".h"],
        cmd = NVCC + " -fatbin " + GENCODE + " -gencode arch=compute_90,code=compute_90 " +
              "-o $(@D)/" + name + ".fatbin $(location " + src + ") && " +
              "{ echo '// Generated from $(location " + src + ") by nvcc -fatbin.'; " +
              "echo 'alignas(8) static const unsigned char " + var + "[] = {'; " +
              "od -An -v -tx1 $(@D)/" + name + ".fatbin | sed -e 's/ *\\([0-9a-f][0-9a-f]\\)/0x\\1,/g'; " +
              "echo '};'; } > $@",
    )
