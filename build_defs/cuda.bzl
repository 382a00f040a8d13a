"""nvcc rules for the CUDA test programs and benchmarks (no rules_cuda offline)."""

NVCC = "/usr/local/cuda/bin/nvcc"
GENCODE = "-gencode arch=compute_90,code=sm_90"

def cuda_binary(name, srcs, hdrs = [], nvcc_flags = "", libs = "", visibility = None, tags = []):
    """Compiles and links a CUDA program with nvcc against the shared runtime.

    `-cudart shared` makes the program import libcudart.so.13, so the shim can
    take it over with LD_PRELOAD exactly as for any user program.
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
