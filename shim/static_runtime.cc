#include "shim/static_runtime.h"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace revenant {
namespace shim {
namespace {

bool ReadAt(int fd, uint64_t offset, void* out, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, static_cast<char*>(out) + done, n - done,
                            static_cast<off_t>(offset + done));
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

struct Symbols {
  bool imports_register = false;  // __cudaRegisterFatBinary undefined (imported)
  bool defines_runtime = false;   // __cudaRegisterFatBinary or cudaMalloc defined
};

// Scans one symbol table (`sym`, with its string table `str`).
void Scan(int fd, const Elf64_Shdr& sym, const Elf64_Shdr& str, Symbols* out) {
  if (sym.sh_entsize != sizeof(Elf64_Sym) || sym.sh_size == 0) return;
  std::vector<char> names(str.sh_size);
  if (!ReadAt(fd, str.sh_offset, names.data(), names.size())) return;
  std::vector<Elf64_Sym> syms(sym.sh_size / sizeof(Elf64_Sym));
  if (!ReadAt(fd, sym.sh_offset, syms.data(), syms.size() * sizeof(Elf64_Sym))) return;
  for (const Elf64_Sym& s : syms) {
    if (s.st_name == 0 || s.st_name >= names.size()) continue;
    const char* name = names.data() + s.st_name;
    const size_t max = names.size() - s.st_name;
    const bool reg = strncmp(name, "__cudaRegisterFatBinary", max) == 0;
    const bool malloc = strncmp(name, "cudaMalloc", max) == 0;
    if (!reg && !malloc) continue;
    if (s.st_shndx == SHN_UNDEF) {
      if (reg) out->imports_register = true;
    } else if (ELF64_ST_TYPE(s.st_info) == STT_FUNC) {
      out->defines_runtime = true;
    }
  }
}

}  // namespace

std::string StaticRuntimeReason(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string why;
  Elf64_Ehdr eh;
  std::vector<Elf64_Shdr> sh;
  if (ReadAt(fd, 0, &eh, sizeof(eh)) && std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_shentsize == sizeof(Elf64_Shdr) &&
      eh.e_shnum > 0 && eh.e_shstrndx < eh.e_shnum) {
    sh.resize(eh.e_shnum);
    if (!ReadAt(fd, eh.e_shoff, sh.data(), sh.size() * sizeof(Elf64_Shdr))) sh.clear();
  }
  if (!sh.empty()) {
    std::vector<char> shstr(sh[eh.e_shstrndx].sh_size);
    bool modules = false;
    Symbols syms;
    if (ReadAt(fd, sh[eh.e_shstrndx].sh_offset, shstr.data(), shstr.size())) {
      for (const Elf64_Shdr& s : sh) {
        if (s.sh_name < shstr.size() &&
            strncmp(shstr.data() + s.sh_name, ".nvFatBinSegment", shstr.size() - s.sh_name) == 0) {
          modules = true;
        }
        if ((s.sh_type == SHT_DYNSYM || s.sh_type == SHT_SYMTAB) && s.sh_link < sh.size()) {
          Scan(fd, s, sh[s.sh_link], &syms);
        }
      }
    }
    if (syms.defines_runtime) {
      why = "its symbol table defines the CUDA runtime's functions (__cudaRegisterFatBinary or "
            "cudaMalloc)";
    } else if (modules && !syms.imports_register) {
      why = "it holds CUDA modules (.nvFatBinSegment) but does not import __cudaRegisterFatBinary "
            "from libcudart.so";
    }
  }
  close(fd);
  return why;
}

}  // namespace shim
}  // namespace revenant
