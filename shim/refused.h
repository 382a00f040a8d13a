// The shim's answer to a CUDA library function the API table has no row
// for (api/shim_refused.cc, generated from the libraries' exports): one log
// line per function and process, naming it and its library; the stub then
// returns the library's "not supported" status.
//
//   static std::atomic<bool> once{false};
//   NoteRefused(&once, "cudnnConvolutionForward", "libcudnn.so.9");
//
// Thread safety: may be called from any thread, also during the
// application's static initialization and exit.
#ifndef REVENANT_SHIM_REFUSED_H_
#define REVENANT_SHIM_REFUSED_H_

#include <atomic>

namespace revenant {
namespace shim {

void NoteRefused(std::atomic<bool>* once, const char* name, const char* library);

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_REFUSED_H_
