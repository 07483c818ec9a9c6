// src/backends/nv/nv_wakeup.cpp - interrupt-driven waits on a channel.
//
// A host thread that waits for a long transfer should sleep, and wake when
// the transfer is done rather than on a timer. RM delivers a copy engine's
// non-stall interrupts to user space as OS events:
//   1. a separately opened /dev/nvidiactl file is registered as an event
//      target (NV_ESC_ALLOC_OS_EVENT on that file; its number is the key),
//   2. NV01_EVENT_OS_EVENT objects under the subdevice route the engine's
//      non-stall interrupts (NV2080_NOTIFIERS_CE(lce), and/or the host's
//      NV2080_NOTIFIERS_FIFO_EVENT_MTHD which on GH100 also sees every
//      host-driven engine's) to that file, without event data,
//   3. poll() on the file reports POLLIN|POLLPRI once an event was posted and
//      clears it (kernel-open/nvidia/nv.c nvidia_poll; the file must not be
//      O_NONBLOCK or poll never sleeps on it).
// The waiter asks for the interrupt only when it is about to sleep: it
// submits host WFI + NON_STALL_INTERRUPT (or a timeline release with
// LAUNCH_DMA INTERRUPT_TYPE=NON_BLOCKING), which fires after everything
// submitted before it. Events carry no channel: any work on the engine (other
// processes' too) wakes the waiter, so it re-checks the timeline each time,
// and ppoll has a safety timeout so that a lost interrupt costs time, not a
// hang. One event file per channel, because poll() clears the event for the
// first poller only. Interface facts: kernel-open/common/inc/nv-ioctl.h,
// src/common/sdk/nvidia/inc/class/cl0005.h, nvos.h, cl2080_notification.h,
// src/nvidia/src/kernel/rmapi/event_notification.c (the notifier must be a
// subdevice for NONSTALL_INTR events) - definitions in rm_abi.hpp.
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "backends/nv/nv_device.hpp"
#include "backends/nv/rm_abi.hpp"

namespace conccl::nv {

void Gpu::setup_wakeup(NvChannel& ch) {
  const std::string lce = "LCE" + std::to_string(ch.lce);
  if (!opt_.interrupt_waits) {
    ch.irq_note = "off (nv::Options::interrupt_waits = false)";
    return;
  }
  const int fd = ::open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    ch.irq_note = std::string("cannot open an event file on /dev/nvidiactl: ") + std::strerror(errno);
    log(lce + ": interrupt waits off: " + ch.irq_note);
    return;
  }
  abi::OsEvent ev{h_client_, h_device_, static_cast<uint32_t>(fd), 0};
  if (::ioctl(fd, abi::rm_ioctl(abi::kEscAllocOsEvent, sizeof ev), &ev) != 0 || ev.Status != 0) {
    const int err = errno;
    ch.irq_note = "NV_ESC_ALLOC_OS_EVENT refused: " +
                   (ev.Status ? rm_status_name(ev.Status) : std::string(std::strerror(err)));
    log(lce + ": interrupt waits off: " + ch.irq_note);
    ::close(fd);
    return;
  }
  uint32_t indices[2] = {};
  int n = 0;
  if (opt_.irq_notifier != IrqNotifier::host) indices[n++] = abi::notifier_ce(ch.lce);
  if (opt_.irq_notifier != IrqNotifier::copy_engine) indices[n++] = abi::kNotifierFifoEventMthd;
  for (int i = 0; i < n; ++i) {
    abi::EventAllocParams p{};
    p.hParentClient = h_client_;
    p.hSrcResource = h_subdevice_;
    p.hClass = abi::kNv01EventOsEvent;
    p.notifyIndex = indices[i] | abi::kEventNonstallIntr | abi::kEventWithoutEventData;
    p.data = static_cast<uint64_t>(fd);
    uint32_t h = 0;
    Status s = rm_alloc(h_subdevice_, abi::kNv01EventOsEvent, &p, sizeof p, &h, "wake event (NV01_EVENT_OS_EVENT)");
    if (!s.ok()) {
      ch.irq_note = "event for notifier " + std::to_string(indices[i]) + " refused: " + s.message();
      log(lce + ": interrupt waits off: " + ch.irq_note);
      ch.event_fd = fd;  // so that teardown_wakeup frees what was made
      teardown_wakeup(ch);
      return;
    }
    ch.h_wake[i] = h;
  }
  ch.event_fd = fd;
  ch.irq_note.clear();
  log(lce + ": interrupt waits on event file " + std::to_string(fd));
}

void Gpu::teardown_wakeup(NvChannel& ch) {
  for (uint32_t& h : ch.h_wake)
    if (h) {
      (void)rm_free(h_subdevice_, h, "wake event");
      h = 0;
    }
  if (ch.event_fd >= 0) {
    abi::OsEvent ev{h_client_, h_device_, static_cast<uint32_t>(ch.event_fd), 0};
    (void)::ioctl(ch.event_fd, abi::rm_ioctl(abi::kEscFreeOsEvent, sizeof ev), &ev);
    ::close(ch.event_fd);
    ch.event_fd = -1;
  }
}

// The waiter (GpfifoQueue::wait_done) has armed the interrupt after the work
// it waits for; any event on the file wakes it, and it re-checks the timeline.
bool NvChannel::sleep(std::chrono::nanoseconds timeout) {
  if (event_fd < 0) {
    timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
    nanosleep(&ts, nullptr);
    return false;
  }
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  pollfd p{event_fd, POLLIN | POLLPRI, 0};
  const int r = ::ppoll(&p, 1, &ts, nullptr);
  if (r > 0 && (p.revents & (POLLHUP | POLLERR))) {
    event_lost = true;  // fault_status() reports it
    return true;
  }
  return r > 0;
}

}  // namespace conccl::nv
