// tools/bench/nvml_sampler.hpp - SM clock, power, temperature and clock
// event reasons sampled every 10 ms by a thread, through NVML loaded with
// dlopen (nvml.h names; read-only queries, nothing is set), and averaged
// over a phase of a benchmark. The C3 benches use it to show what the GEMM's
// clock and power did beside the copies.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace conccl::bench {

// Milliseconds since the program started (the samples' and phases' clock).
inline double sampler_now_ms() {
  static const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

class Sampler {
 public:
  struct Sample {
    double t_ms;
    unsigned sm_mhz, mem_mhz, power_mw, temp_c;
    unsigned long long reasons;
  };
  bool start() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return false;
    auto sym = [&](const char* n) { return dlsym(lib_, n); };
    init_ = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    handle_ = reinterpret_cast<int (*)(unsigned, void**)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
    power_ = reinterpret_cast<int (*)(void*, unsigned*)>(sym("nvmlDeviceGetPowerUsage"));
    temp_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(sym("nvmlDeviceGetTemperature"));
    reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons_)
      reasons_ = reinterpret_cast<int (*)(void*, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    if (!init_ || !handle_ || !clock_ || !power_ || init_() != 0 || handle_(0, &dev_) != 0) return false;
    run_ = true;
    thread_ = std::thread([this] {
      while (run_) {
        Sample s{sampler_now_ms(), 0, 0, 0, 0, 0};
        clock_(dev_, 1 /* NVML_CLOCK_SM */, &s.sm_mhz);
        clock_(dev_, 2 /* NVML_CLOCK_MEM */, &s.mem_mhz);
        power_(dev_, &s.power_mw);
        if (temp_) temp_(dev_, 0 /* NVML_TEMPERATURE_GPU */, &s.temp_c);
        if (reasons_) reasons_(dev_, &s.reasons);
        {
          std::lock_guard<std::mutex> g(mu_);
          samples_.push_back(s);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    return true;
  }
  void stop() {
    run_ = false;
    if (thread_.joinable()) thread_.join();
  }
  ~Sampler() { stop(); }
  struct Avg {
    double sm = 0, mem = 0, power_w = 0, temp = 0, power_cap_frac = 0;
    unsigned long long reasons = 0;
    int n = 0;
  };
  Avg average(double t0, double t1) {
    std::lock_guard<std::mutex> g(mu_);
    Avg a;
    int capped = 0;
    for (const Sample& s : samples_) {
      if (s.t_ms < t0 || s.t_ms > t1) continue;
      a.sm += s.sm_mhz;
      a.mem += s.mem_mhz;
      a.power_w += s.power_mw / 1000.0;
      a.temp += s.temp_c;
      a.reasons |= s.reasons;
      capped += (s.reasons & 0x4) ? 1 : 0;  // SwPowerCap
      ++a.n;
    }
    if (a.n) {
      a.sm /= a.n;
      a.mem /= a.n;
      a.power_w /= a.n;
      a.temp /= a.n;
      a.power_cap_frac = double(capped) / a.n;
    }
    return a;
  }

 private:
  void* lib_ = nullptr;
  void* dev_ = nullptr;
  int (*init_)() = nullptr;
  int (*handle_)(unsigned, void**) = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*temp_)(void*, int, unsigned*) = nullptr;
  int (*reasons_)(void*, unsigned long long*) = nullptr;
  std::atomic<bool> run_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<Sample> samples_;
};

}  // namespace conccl::bench
