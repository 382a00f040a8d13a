// What //shim:dlopen_caller_test's caller library loads from its RUNPATH.
extern "C" __attribute__((visibility("default"))) int revenant_test_target() { return 7; }
