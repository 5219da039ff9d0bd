// Support for the overlay's native shims (ndvstack's own code, not upstream's).
//
// A shim defines an exported libtorch symbol with the patched behaviour and is loaded
// with RTLD_GLOBAL before torch._C, so every caller that binds the symbol through its
// PLT/GOT (libtorch_python.so, C++ extensions, libtorch_cpu.so itself) gets the shim.
// This header gives a shim the original definition and exports ndv_bound_in(), which
// the loader calls after `import torch` to check that the shim really is what torch calls.
#pragma once

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ndv {

// The definition the shim replaces: the next one in lookup order, libtorch_cpu.so's (the
// shim links it with --no-as-needed, so it is in the shim's own lookup scope). Aborts
// with a message rather than calling through a null pointer.
inline void* original(const char* symbol) {
  void* found = dlsym(RTLD_NEXT, symbol);
  if (!found) {
    std::fprintf(stderr, "ndvstack shim: no original definition of %s: %s\n", symbol, dlerror());
    std::abort();
  }
  return found;
}

namespace detail {
struct SlotQuery {
  const char* lib;
  const char* symbol;
  const char* lib_path;
  void* target;
};

// Finds LIB among the loaded objects and reads the GOT slot its relocations give SYMBOL.
inline int find_slot(struct dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<SlotQuery*>(data);
  if (!info->dlpi_name || !std::strstr(info->dlpi_name, q->lib)) {
    return 0;
  }
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (!dyn) {
    return 0;
  }
  q->lib_path = info->dlpi_name;
  ElfW(Addr) base = info->dlpi_addr, symtab = 0, strtab = 0;
  ElfW(Addr) rel[2] = {0, 0}, relsz[2] = {0, 0};
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    auto v = dyn->d_un.d_ptr;
    switch (dyn->d_tag) {
      case DT_SYMTAB: symtab = v; break;
      case DT_STRTAB: strtab = v; break;
      case DT_JMPREL: rel[0] = v; break;
      case DT_PLTRELSZ: relsz[0] = v; break;
      case DT_RELA: rel[1] = v; break;
      case DT_RELASZ: relsz[1] = v; break;
    }
  }
  // glibc relocates the d_ptr entries of loaded objects; be right either way.
  auto fix = [base](ElfW(Addr) a) { return a && a < base ? a + base : a; };
  auto* syms = reinterpret_cast<const ElfW(Sym)*>(fix(symtab));
  auto* strs = reinterpret_cast<const char*>(fix(strtab));
  for (int t = 0; t < 2 && syms && strs; ++t) {
    auto* r = reinterpret_cast<const ElfW(Rela)*>(fix(rel[t]));
    for (size_t k = 0; r && k < relsz[t] / sizeof(ElfW(Rela)); ++k) {
      if (std::strcmp(strs + syms[ELF64_R_SYM(r[k].r_info)].st_name, q->symbol) == 0) {
        q->target = *reinterpret_cast<void**>(base + r[k].r_offset);
        return 1;
      }
    }
  }
  return 0;
}

// An address inside this shim (static: never interposed by another shim's copy).
static void anchor() {}
} // namespace detail
} // namespace ndv

// Which definition of SYMBOL does the loaded library whose path contains LIB call?
// 1: this shim's; 0: another (e.g. libtorch_cpu.so's original, LIB's own included); -1: LIB
// is not loaded or does not import SYMBOL; -2: its slot is not bound yet (lazy binding, still
// in LIB's PLT).
// LIB "global" asks the global lookup scope instead (dlsym(RTLD_DEFAULT)): what every object
// loaded later binds SYMBOL to (a C++ extension, unless it is linked -Bsymbolic or loaded
// with RTLD_DEEPBIND), for a symbol that no loaded library imports yet. 1, 0 or -1 (none).
extern "C" int ndv_bound_in(const char* lib, const char* symbol) {
  ndv::detail::SlotQuery q{lib, symbol, nullptr, nullptr};
  const bool global = std::strcmp(lib, "global") == 0;
  if (global) {
    q.target = dlsym(RTLD_DEFAULT, symbol);
  } else {
    dl_iterate_phdr(ndv::detail::find_slot, &q);
  }
  Dl_info hit{}, self{};
  if (!q.target || !dladdr(q.target, &hit) ||
      !dladdr(reinterpret_cast<void*>(&ndv::detail::anchor), &self)) {
    return -1;
  }
  if (global) {
    return hit.dli_fbase == self.dli_fbase ? 1 : 0;
  }
  if (hit.dli_fbase == self.dli_fbase) {
    return 1;
  }
  if (std::strcmp(hit.dli_fname, q.lib_path) != 0) {
    return 0;
  }
  // Into LIB itself: its own definition (a library that defines the symbol and calls it
  // through its PLT, as libtorch_cpu.so does), or still its PLT stub.
  void* handle = dlopen(q.lib_path, RTLD_NOW | RTLD_NOLOAD);
  void* own = handle ? dlsym(handle, symbol) : nullptr;
  if (handle) {
    dlclose(handle);
  }
  return q.target == own ? 0 : -2;
}
