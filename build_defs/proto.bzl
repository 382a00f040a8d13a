"""revenant_cc_proto: C++ code from .proto files with Debian's protoc (offline build).

Bazel 4's proto rules would download @com_google_protobuf; a genrule around
/usr/bin/protoc does the same job with the system protobuf (3.21).
"""

def revenant_cc_proto(name, srcs, deps = [], visibility = None):
    """Generates <name>, a cc_library with the .pb.h/.pb.cc of `srcs`.

    Args:
      name: the cc_library's name.
      srcs: .proto files in this package.
      deps: other revenant_cc_proto targets whose protos these import.
      visibility: of the cc_library.
    """
    pkg = native.package_name()
    hdrs = [s[:-len(".proto")] + ".pb.h" for s in srcs]
    ccs = [s[:-len(".proto")] + ".pb.cc" for s in srcs]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = hdrs + ccs,
        cmd = "/usr/bin/protoc --proto_path=. --cpp_out=$(GENDIR) " +
              " ".join([pkg + "/" + s for s in srcs]),
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + [d + "_srcs" for d in deps],
        visibility = ["//visibility:public"],
    )
    native.cc_library(
        name = name,
        srcs = ccs,
        hdrs = hdrs,
        deps = deps + ["//third_party:protobuf"],
        visibility = visibility,
    )
