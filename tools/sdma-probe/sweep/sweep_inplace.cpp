// tools/sdma-probe/sweep_inplace.cpp - see sweep_inplace.hpp.
#include "sweep/sweep_inplace.hpp"

namespace probe {

using conccl::CollOp;

conccl::Buffer view_of(const conccl::Buffer& b, uint64_t off, uint64_t len) {
  conccl::Buffer v = b;
  v.va = b.va + off;
  v.host = b.host ? static_cast<char*>(b.host) + off : nullptr;
  v.size = static_cast<size_t>(len);
  return v;
}

std::optional<InPlace> in_place_of(const conccl::CollectiveArgs& a, int n) {
  InPlace ip;
  ip.args = a;
  ip.poison.assign(static_cast<size_t>(n), true);
  const uint64_t b = a.bytes;
  auto send = [&](int r) -> conccl::Buffer& { return ip.args.send[static_cast<size_t>(r)]; };
  auto recv = [&](int r) -> conccl::Buffer& { return ip.args.recv[static_cast<size_t>(r)]; };
  switch (a.op) {
    case CollOp::all_gather:
      for (int r = 0; r < n; ++r) {
        send(r) = view_of(recv(r), uint64_t(r) * b, b);
        ip.sources.push_back({r, send(r), r, 0});
      }
      return ip;
    case CollOp::broadcast:
      send(a.root) = view_of(recv(a.root), 0, b);
      ip.sources.push_back({a.root, send(a.root), a.root, 0});
      return ip;
    case CollOp::gather:
      send(a.root) = view_of(recv(a.root), uint64_t(a.root) * b, b);
      ip.sources.push_back({a.root, send(a.root), a.root, 0});
      return ip;
    case CollOp::scatter:
      // The root's whole send buffer is already its data; its recv is part of it.
      recv(a.root) = view_of(send(a.root), uint64_t(a.root) * b, b);
      ip.poison[static_cast<size_t>(a.root)] = false;
      return ip;
    case CollOp::all_to_all:
    case CollOp::p2p: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace probe
