// The driver's entry points by base name and CUDA version: what
// cuGetProcAddress and cudaGetDriverEntryPoint* answer from.
//
//   DriverLookup how;
//   const DriverSymbol* s = FindDriverSymbol(kDriverSymbols, kDriverSymbolCount,
//                                            "cuMemAlloc", 12000, &how);
//   // s->name is "cuMemAlloc_v2" (introduced in CUDA 3.2), how kFound
//
// The table (api/shim_driver_names.cc) is generated from the toolkit's driver
// exports and cudaTypedefs.h (codegen/apigen.cc, EmitDriverNames): per base
// name, each variant with the CUDA version it was introduced in, sorted by
// base name and version. The rule: a request for base B at version V gets B's
// newest variant introduced at or before V; none introduced by V is
// kVersionNotSufficient; a B the driver does not have is kNotFound (also a
// variant's own name, e.g. "cuMemAlloc_v2": the lookup takes base names, as
// the driver's). Every variant is an export of the shim: a row of the API
// table, or the refusing stub of a driver function without one.
#ifndef REVENANT_SHIM_DRIVER_NAMES_H_
#define REVENANT_SHIM_DRIVER_NAMES_H_

#include <cstddef>
#include <cstring>

namespace revenant {
namespace shim {

struct DriverSymbol {
  const char* base;  // "cuMemAlloc"
  int version;       // CUDA version the variant was introduced in (3020)
  const char* name;  // the variant, an export of the shim ("cuMemAlloc_v2")
};

extern const DriverSymbol kDriverSymbols[];
extern const size_t kDriverSymbolCount;

enum class DriverLookup { kFound, kNotFound, kVersionNotSufficient };

// `table` sorted by (base, version). Cost: O(log n) string comparisons.
inline const DriverSymbol* FindDriverSymbol(const DriverSymbol* table, size_t n,
                                            const char* base, int version,
                                            DriverLookup* how) {
  size_t lo = 0, hi = n;
  while (lo < hi) {  // first entry whose base is not below `base`
    const size_t mid = lo + (hi - lo) / 2;
    if (std::strcmp(table[mid].base, base) < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const DriverSymbol* best = nullptr;
  bool any = false;
  for (size_t i = lo; i < n && std::strcmp(table[i].base, base) == 0; ++i) {
    any = true;
    if (table[i].version <= version) best = &table[i];
  }
  *how = best != nullptr ? DriverLookup::kFound
                         : any ? DriverLookup::kVersionNotSufficient : DriverLookup::kNotFound;
  return best;
}

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_DRIVER_NAMES_H_
