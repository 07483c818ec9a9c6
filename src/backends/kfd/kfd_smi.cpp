// src/backends/kfd/kfd_smi.cpp - the SMI fault watch (kfd_smi.hpp).
#include "backends/kfd/kfd_smi.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "backends/kfd/kfd_uapi.hpp"

namespace conccl::kfd {

namespace {

class RealSmiEvents final : public SmiEvents {
 public:
  explicit RealSmiEvents(std::string path) : path_(std::move(path)) {}
  ~RealSmiEvents() override {
    if (kfd_ >= 0) ::close(kfd_);
  }
  int open_client(uint32_t gpu_id, int* fd) override {
    if (kfd_ < 0) {
      kfd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
      if (kfd_ < 0) return errno;
    }
    uapi::SmiEventsArgs a{};
    a.gpuid = gpu_id;
    if (::ioctl(kfd_, uapi::kIocSmiEvents, &a) != 0) return errno;
    *fd = static_cast<int>(a.anon_fd);
    return 0;
  }

 private:
  std::string path_;
  int kfd_ = -1;
};

}  // namespace

std::shared_ptr<SmiEvents> real_smi_events(const std::string& device_path) {
  return std::make_shared<RealSmiEvents>(device_path);
}

std::optional<std::string> smi_fault_text(const std::string& line, pid_t me) {
  char* end = nullptr;
  const unsigned long event = std::strtoul(line.c_str(), &end, 16);
  if (end == line.c_str() || *end != ' ') return std::nullopt;
  const std::string text = end + 1;
  if (event == uapi::kSmiEventVmFault) {
    const unsigned long pid = std::strtoul(text.c_str(), &end, 16);
    if (end == text.c_str() || *end != ':' || pid != static_cast<unsigned long>(me)) return std::nullopt;
    return "GPU memory access fault (KFD SMI event VMFAULT for this process, pid " + std::to_string(pid) + " '" +
           std::string(end + 1) +
           "'); KFD has stopped this process's queues on that GPU (the process must exit to recover). The faulting "
           "address is in the kernel log (dmesg: amdgpu ... page fault). Check that every address in the packets is "
           "mapped to the engine's GPU";
  }
  if (event == uapi::kSmiEventGpuPreReset)
    return "the GPU is being reset (KFD SMI event GPU_PRE_RESET, " + text +
           "): its queues and memory contents are lost; the process must exit and start again";
  return std::nullopt;
}

SmiWatch::~SmiWatch() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

Status SmiWatch::open(SmiEvents& sys, const std::vector<uint32_t>& gpu_ids) {
  const uint64_t mask = uapi::smi_event_mask(uapi::kSmiEventVmFault) | uapi::smi_event_mask(uapi::kSmiEventGpuPreReset);
  std::string failed;
  for (uint32_t id : gpu_ids) {
    int fd = -1;
    int e = sys.open_client(id, &fd);
    // The file reports nothing until told which events to queue (a 64-bit
    // mask written to it: kfd_smi_events.c kfd_smi_ev_write).
    if (e == 0 && ::write(fd, &mask, sizeof mask) != static_cast<ssize_t>(sizeof mask)) {
      e = errno ? errno : EIO;
      ::close(fd);
      fd = -1;
    }
    if (e == 0) {
      // KFD's read never blocks (an empty queue is EAGAIN); a fake's might.
      const int fl = ::fcntl(fd, F_GETFL);
      if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    } else {
      fd = -1;
      failed += (failed.empty() ? "" : ", ") + std::string("gpu_id ") + std::to_string(id) + ": " + std::strerror(e);
    }
    fds_.push_back(fd);
    partial_.emplace_back();
  }
  if (!failed.empty())
    return error(Code::unavailable, "KFD SMI event files (AMDKFD_IOC_SMI_EVENTS) could not be opened (" + failed +
                                        "): faults on those GPUs show up as timeouts with the hang diagnosis");
  return Status();
}

bool SmiWatch::watching() const {
  for (int fd : fds_)
    if (fd >= 0) return true;
  return false;
}

std::vector<std::string> SmiWatch::poll(pid_t me) {
  std::vector<std::string> out(fds_.size());
  for (size_t i = 0; i < fds_.size(); ++i) {
    if (fds_[i] < 0) continue;
    char buf[512];
    while (true) {
      const ssize_t n = ::read(fds_[i], buf, sizeof buf);
      if (n <= 0) break;
      partial_[i].append(buf, static_cast<size_t>(n));
    }
    size_t nl;
    while ((nl = partial_[i].find('\n')) != std::string::npos) {
      const std::string line = partial_[i].substr(0, nl);
      partial_[i].erase(0, nl + 1);
      if (std::optional<std::string> f = smi_fault_text(line, me); f && out[i].empty()) out[i] = *f;
    }
  }
  return out;
}

}  // namespace conccl::kfd
