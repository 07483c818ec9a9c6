/* tests/backends/kfd/uapi_shim/drm/drm.h - lets kfd_uapi_test.cpp include the
 * kernel's <linux/kfd_ioctl.h> on Debian, where no <drm/drm.h> is installed
 * (libdrm-dev has it as <libdrm/drm.h>). kfd_ioctl.h needs only the __u32 /
 * __u64 types and the _IO* macros from it. */
#pragma once
#include <linux/ioctl.h>
#include <linux/types.h>
