// tests/backends/nv/asan_cuda_options.cpp - AddressSanitizer options for test programs
// that load libcuda: the CUDA driver maps memory in the range ASan keeps as
// its "shadow gap", so ASan must leave that range unprotected
// (protect_shadow_gap=0, as NVIDIA's compute-sanitizer documentation and
// CUDA's ASan notes ask). ASan reads __asan_default_options() at start-up;
// other builds ignore this file.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "protect_shadow_gap=0"; }
#endif
