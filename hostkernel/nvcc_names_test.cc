// Checks that every kernel nvcc registers for a kernel source has a host
// implementation of the same mangled name in its host kernel library.
//
// Usage: nvcc_names_test <nm output of the nvcc object> <host kernel .so>
//                        [<minimum number of kernels, default 1>]
// nvcc emits, per kernel, a host stub named `__device_stub_<mangled name>`,
// wrapped as an Itanium identifier (`_Z<len><identifier>...`, `_ZL` when
// local); the mangled name is read back from that identifier.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "hostkernel/loader.h"

namespace {

// "_Z29__device_stub__Z5saxpyifPKfPfifPKfPf" -> "_Z5saxpyifPKfPf".
bool KernelNameFromStub(const std::string& symbol, std::string* name) {
  static const char kPrefix[] = "__device_stub_";
  size_t at = 0;
  if (symbol.compare(0, 2, "_Z") != 0) return false;
  at = 2;
  if (at < symbol.size() && symbol[at] == 'L') ++at;
  size_t digits = at;
  while (digits < symbol.size() && isdigit(static_cast<unsigned char>(symbol[digits]))) {
    ++digits;
  }
  if (digits == at) return false;
  const size_t length = std::stoul(symbol.substr(at, digits - at));
  const std::string id = symbol.substr(digits, length);
  if (id.size() != length || id.compare(0, strlen(kPrefix), kPrefix) != 0) return false;
  *name = id.substr(strlen(kPrefix));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: " << argv[0] << " <nm file> <host kernel .so> [min kernels]\n";
    return 2;
  }
  const size_t min_kernels = argc == 4 ? std::stoul(argv[3]) : 1;
  std::ifstream nm(argv[1]);
  if (!nm) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 1;
  }
  std::set<std::string> nvcc_names;
  std::string line;
  while (std::getline(nm, line)) {
    std::istringstream fields(line);
    std::string address, type, symbol;
    if (!(fields >> address >> type >> symbol)) continue;
    std::string name;
    if (KernelNameFromStub(symbol, &name)) nvcc_names.insert(name);
  }
  auto registry = revenant::hostkernel::HostKernelRegistry::Load({argv[2]});
  if (!registry.ok()) {
    std::cerr << registry.status() << "\n";
    return 1;
  }
  // Fewer kernels than the source defines means the stub parsing broke.
  if (nvcc_names.size() < min_kernels) {
    std::cerr << "FAIL: found only " << nvcc_names.size()
              << " kernel stubs in the nvcc object\n";
    return 1;
  }
  int missing = 0;
  for (const std::string& name : nvcc_names) {
    if ((*registry)->Find(name) == nullptr) {
      std::cerr << "FAIL: nvcc registers " << name
                << " but the host kernel library has no kernel of that name\n";
      ++missing;
    } else {
      std::cout << "ok " << name << "\n";
    }
  }
  if (missing > 0) return 1;
  std::cout << "PASS " << nvcc_names.size() << " kernel names match\n";
  return 0;
}
