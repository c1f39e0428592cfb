// dlsym(RTLD_NEXT) under the interposer: glibc resolves "next" from the caller's return address,
// so a dlsym() replacement that called glibc (instead of jumping to it) would make this lookup
// start after the interposer and find the first library's own definition.
//   RTLD_NEXT_PART=1: librtld_next_first.so, defines the probe (1) and looks up the next one
//   RTLD_NEXT_PART=2: librtld_next_second.so, defines the probe (2)
//   RTLD_NEXT_PART=0: the program, linked with both in that order; exits 0 when the first
//                     library's RTLD_NEXT lookup finds the second library's definition
#include <dlfcn.h>

#include <cstdio>

#define EXPORT extern "C" __attribute__((visibility("default")))

#if RTLD_NEXT_PART == 1
EXPORT int okit_rtld_next_probe() { return 1; }
EXPORT int okit_rtld_next_from_first() {
  auto next = reinterpret_cast<int (*)()>(dlsym(RTLD_NEXT, "okit_rtld_next_probe"));
  return next != nullptr ? next() : -1;
}
#elif RTLD_NEXT_PART == 2
EXPORT int okit_rtld_next_probe() { return 2; }
#else
extern "C" int okit_rtld_next_from_first();
int main() {
  const int found = okit_rtld_next_from_first();
  std::printf("RTLD_NEXT from the first library found definition %d (expected 2)\n", found);
  return found == 2 ? 0 : 1;
}
#endif
