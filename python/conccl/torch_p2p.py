"""Point to point for the "conccl" process group on the DMA engines (the default;
CONCCL_TORCH_P2P=store sends through the group's store instead).

Measured (docs/perf/h200-collectives.md, tools/bench/torch_p2p_bench.py, 2 processes):
on an H100 (run 76) a ring step of 1 KiB to 4 MiB 0.72-0.77 ms on the engines against
5.9-21.8 ms through the store, 64 MiB 5.4 ms against 555 ms; with each transfer ordered
on the pair's stream a ring step took 2.1-2.2 ms (an H200 in run 77, an H100 in run 78;
0.86-0.97 under MPS): the two processes' contexts took turns on the GPU. Ordered on the
host (the default since run 78, _Pair._move), 0.63-0.65 ms.

ConCCL's calls are collective over a communicator, and torch's send/recv involve two
ranks of the group. So each ordered pair (src, dst) that exchanges data gets a
communicator of its own, of two ranks (the sender rank 0, the receiver rank 1), and
a send is a broadcast from rank 0 of that communicator: the receiver's engines pull
the data through the pair's staging window.

A pair's communicator is made when the pair first exchanges data, by a thread of
that pair: making it is collective over the two ranks, and a ring of sends (each
rank sending to the next before it receives from the previous one) would wait
forever if each rank made its sender's communicator in the caller's thread. The
pair's thread then runs the pair's transfers in the order they were called, as
NCCL matches sends and receives between two ranks in order (tags are not matched).

Work: a send of at most CONCCL_TORCH_P2P_EAGER_BYTES (4 MiB) is eager: the tensor is
copied aside at the call and its Work is complete (eager_bytes()). Otherwise wait()
returns once the transfer is done (emulator), or makes the caller's current stream
wait for it (CUDA: each pair has a stream, which first waits for the caller's stream
as it was at the call). What a pair holds: a communicator, a
SymmetricPool of CONCCL_TORCH_P2P_STAGING_BYTES (default 4 MiB; larger tensors
move in pieces) and, on CUDA, a stream.
"""
import atexit
import os
import queue
import sys
import threading
import weakref
import time

import torch

import conccl


class _Pair:
    """One ordered pair's communicator, staging and thread. It keeps what it needs of
    the group, not the group: the group (and so its PairChannels) can go, and then its
    pairs' threads end (PairChannels.__del__) and their communicators with them."""

    def __init__(self, group, src, dst, order):
        self.src, self.dst, self.order = src, dst, order
        self.rank, self.store, self.dev, self.gpu = group._rank, group._store, group._dev, group._gpu
        self.peer = dst if group._rank == src else src
        self._group_comm = weakref.ref(group._comm)  # to ask whether the peer's process has gone
        self.timeout_ms, self.emu, self.cuda = group._timeout_ms, group._emu, group._cuda
        self.jobs = queue.Queue()
        self.failed = []  # errors of eager sends, whose Works had completed: the pair's next send raises the first
        self.lock = threading.Lock()
        self.eager_pending = 0  # bytes of eager sends copied aside and not yet moved
        self.comm = self.pool = self.stage = None
        self.stream = None
        self.thread = threading.Thread(target=self._run, name=f"conccl-p2p-{src}-{dst}", daemon=True)
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.thread.start()

    def stop(self):
        """Asks the pair's thread to end after the transfers already asked for."""
        self.jobs.put(None)

    def peer_gone(self):
        """Whether the peer's process has gone (its group communicator's socket hung up)."""
        comm = self._group_comm()
        try:
            return comm is not None and self.peer in comm.ranks_gone()
        except conccl.Error:  # the group was destroyed: nothing to say
            return False

    def finish(self, deadline):
        """Waits for the pair's thread, stopped, until `deadline` (time.monotonic());
        whether it ended."""
        self.thread.join(max(0.0, deadline - time.monotonic()))
        return not self.thread.is_alive()

    def _open(self):
        me = 0 if self.rank == self.src else 1
        key = f"conccl/p2p-comm/{self.src}/{self.dst}"
        if me == 0:
            self.store.set(key, conccl.unique_id())
        uid = self.store.get(key).decode()
        self.comm = conccl.Communicator(self.dev, rank=me, nranks=2, unique_id=uid, gpu=self.gpu, loopback=True,
                                        timeout_ms=self.timeout_ms)
        from conccl.torch import SymmetricPool
        nbytes = int(os.environ.get("CONCCL_TORCH_P2P_STAGING_BYTES", 4 << 20))
        self.pool = SymmetricPool(self.comm, nbytes + (64 << 10))
        self.stage = self.pool.empty(nbytes)  # uint8, the same offset on both ranks
        if not self.emu:
            self.stream = torch.cuda.Stream(self.cuda)

    def _release(self):
        """The pair's communicator, then its staging's memory, back to the device (no
        collective step: the communicator goes first, so the heap frees at once)."""
        from conccl.torch import end_communicator
        comm, self.comm = self.comm, None
        self.stage = None
        end_communicator(comm, self.stream, "was destroyed: its send/recv pair ended")
        self.pool = None  # SymmetricPool.__del__ frees the heap

    def _move(self, tensor, sending, ready=None):
        """The transfer: pieces of the staging, a broadcast from the sender each.

        CUDA, host-ordered (order == "host", the default): the pair's thread waits for
        its own copies (the sender's into the staging; the receiver's out of it, before
        the next piece lands there) and each broadcast is ordered on the host
        (conccl.HOST): it starts at once and returns when this rank's part is done (the
        sender's staging read, the receiver's filled). No stream then waits for the
        other process, which without MPS costs each transfer a time slice of the GPU
        between the two processes' contexts. Run 78 (an H100, 2 processes, no MPS): a
        ring step 0.63-0.65 ms from 4 KiB to 4 MiB host-ordered against 2.1-2.2 ms
        stream-ordered; one direction 0.34-0.36 ms against 0.30-0.32 (0.51 at 1 KiB,
        0.78 at 4 MiB). order == "stream" (CONCCL_TORCH_P2P_ORDER=stream): the copies
        and the broadcasts all on the pair's stream.

        `ready` (CUDA): the caller's stream as it was at the call. The pair's stream
        waits for it before it first touches the tensor: the sender's before it reads
        it, the receiver's before it writes it (not before the data arrives)."""
        flat = tensor.reshape(-1).view(torch.uint8)
        step = self.stage.numel()
        host = self.stream is not None and self.order == "host"
        for o in range(0, flat.numel(), step):
            m = min(step, flat.numel() - o)
            v = self.stage[:m]
            if ready is not None and (sending or not host):
                self.stream.wait_event(ready)
                ready = None
            if sending:
                v.copy_(flat[o:o + m])
            if host:
                self.stream.synchronize()  # sender: the piece is in the staging; receiver: the last one is out
                self.comm.broadcast(v, 0, stream=conccl.HOST)
            else:
                self.comm.broadcast(v, 0)
            if not sending:
                if ready is not None:
                    self.stream.wait_event(ready)
                    ready = None
                flat[o:o + m].copy_(v)

    def take_eager(self, nbytes, limit):
        """Whether a send of nbytes may be eager: the pair's eager sends not yet moved stay
        within 4 x the eager limit (a sender that runs ahead of its receiver then waits, as
        on NCCL once its buffers are full, instead of copying without bound)."""
        with self.lock:
            if self.eager_pending and self.eager_pending + nbytes > 4 * limit:
                return False
            self.eager_pending += nbytes
            return True

    def _run(self):
        while True:
            job = self.jobs.get()
            if job is None:  # the group is gone, shut down, or the process exits
                self._release()
                with _LIVE_LOCK:
                    _LIVE.discard(self)
                return
            tensor, sending, ready, fut, outcome, eager = job
            try:
                if self.comm is None:
                    if self.emu:
                        self._open()
                    else:  # this thread's current device is not the group's until told
                        with torch.cuda.device(self.cuda):
                            self._open()
                if self.stream is None:
                    self._move(tensor, sending)
                    fut.set_result([tensor])
                else:
                    with torch.cuda.stream(self.stream):
                        self._move(tensor, sending, ready)
                        tensor.record_stream(self.stream)
                        fut.set_result([tensor])  # records an event on the pair's stream
            except Exception as e:  # the Work's wait() raises it
                # As text, and the future completed: an exception kept in the future would
                # keep the frames of every wait() it is raised through, and with them the
                # caller's group (through the Work, which the garbage collector cannot see into).
                outcome.append(f"conccl backend: {'send to' if sending else 'recv from'} rank "
                               f"{self.dst if sending else self.src}: {e}")
                if not fut.done():
                    fut.set_result([tensor])
            if eager:
                with self.lock:
                    self.eager_pending -= eager
            # Nothing of a finished job stays on this thread's frame while it waits.
            job = tensor = ready = fut = outcome = None


class _Work(torch._C._distributed_c10d.Work):
    """The Work of a transfer: wait() raises the transfer's error. (A Work made by
    _create_work_from_future, as the group's other ops return, completes its wait()
    on a failed future without raising in torch 1.13; those ops fail at the call.)
    The future always completes; the error travels beside it, as text."""

    def __init__(self, fut, outcome):
        super().__init__()
        self._fut = fut
        self._outcome = outcome  # the transfer's error, as text, once it failed

    def wait(self, timeout=None):
        self._fut.wait()  # CUDA: orders the current stream after the transfer
        if self._outcome:
            raise RuntimeError(self._outcome[0])
        return True

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        return self._fut.done() and not self._outcome

    def get_future(self):
        return self._fut

    def result(self):
        return self._fut.wait()


class PairChannels:
    """The pairs of one process group: send(tensor, dst) and recv(tensor, src) as Works."""

    def __init__(self, group):
        # Weak: the group holds this, and a cycle would keep the group (and its device
        # memory) until Python's cycle collector happened to run.
        self._group = weakref.ref(group)
        self.eager = eager_bytes()  # read once: a bad setting fails when the group is made
        self.order = transfer_order()
        self.pairs = {}
        self.lock = threading.Lock()

    @property
    def group(self):
        g = self._group()
        if g is None:
            raise RuntimeError("conccl backend: send/recv on a process group that was destroyed")
        return g

    def __del__(self):
        for p in self.pairs.values():
            p.stop()  # after the transfers already asked for

    def shutdown(self):
        """The group's shutdown (what newer torch's destroy_process_group calls): every
        pair's transfers already asked for (eager sends included) end, or fail, within
        the group's timeout (at most EXIT_FLUSH_S); then the pairs' threads and
        communicators are gone."""
        with self.lock:
            pairs, self.pairs = list(self.pairs.values()), {}
        wait_s, left = _finish(pairs)
        if left:
            raise RuntimeError(f"conccl backend: shutdown: the transfers of pairs {left} did not end within "
                               f"{wait_s:.0f} s: a send whose receiver never called recv, or a recv whose sender "
                               "never sent")

    def _pair(self, src, dst):
        with self.lock:
            p = self.pairs.get((src, dst))
            if p is None:
                p = self.pairs[(src, dst)] = _Pair(self.group, src, dst, self.order)
            return p

    def transfer(self, tensor, peer, sending):
        g = self.group
        g._p2p_peer("send to" if sending else "recv from", peer)
        if not tensor.is_contiguous():
            raise RuntimeError("conccl backend: tensors must be contiguous (call .contiguous() first)")
        if not g._emu and torch.cuda.is_current_stream_capturing():
            # A pair's transfers run on its own thread and stream, which a capture of the
            # caller's stream cannot take in; refused here, before anything is recorded.
            raise RuntimeError("conccl backend: send/recv while the stream is being captured into a CUDA graph is "
                               "not supported (the collectives are: docs/graphs.md); call them outside the capture")
        src, dst = (g._rank, peer) if sending else (peer, g._rank)
        pair = self._pair(src, dst)
        if pair.failed:  # an eager send of this pair failed after its Work had completed
            raise RuntimeError(pair.failed[0])
        nbytes = tensor.numel() * tensor.element_size()
        eager = sending and nbytes <= self.eager and pair.take_eager(nbytes, self.eager)
        if eager:  # the data as it is now (CUDA: ordered on the current stream, as the caller's writes)
            tensor = tensor.detach().clone()
        if g._emu:
            fut, ready = torch.futures.Future(), None
        else:
            fut = torch.futures.Future(devices=[g._cuda])
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(g._cuda))
        outcome = []
        if eager:
            done = torch.futures.Future() if g._emu else torch.futures.Future(devices=[g._cuda])
            done.set_result([tensor])
            pair.jobs.put((tensor, sending, ready, fut, pair.failed, nbytes))
            return _Work(done, outcome)
        pair.jobs.put((tensor, sending, ready, fut, outcome, 0))
        return _Work(fut, outcome)


# Every pair whose thread runs. At exit (atexit runs before the interpreter stops its
# daemon threads) each gets its transfers already asked for done: an eager send's data
# reaches its receiver although the sender returned long ago, as a small send over gloo's
# sockets does. And no pair thread is left inside a call into torch (a store's get, a
# future's set_result) that would retake the interpreter's lock while it finalizes: on
# Python 3.11 that ends the thread by a forced unwind through torch's C++ frames, which
# aborts the process ("terminate called without an active exception").
_LIVE = set()
_LIVE_LOCK = threading.Lock()
EXIT_FLUSH_S = 60.0  # the most an exiting process, or a group's shutdown, waits for its pairs' transfers


def _finish(pairs):
    """Ends the pairs' threads after their transfers already asked for, waiting up to the
    longest of their groups' timeouts or EXIT_FLUSH_S, whichever is less: (the seconds
    waited at most, the pairs not finished by then, as "src->dst")."""
    if not pairs:
        return 0.0, []
    wait_s = min(EXIT_FLUSH_S, max(p.timeout_ms for p in pairs) / 1000.0)
    deadline = time.monotonic() + wait_s
    for p in pairs:  # every pair told first: one pair that waits out the deadline must not leave
        p.stop()     # the others no time to take their stop (they would be named unfinished)
    left, pending = [], list(pairs)
    while pending:
        still = []
        for p in pending:
            if p.finish(min(deadline, time.monotonic() + 0.05)):
                continue
            if p.peer_gone():  # its transfers cannot end: not waited for
                left.append(f"{p.src}->{p.dst} (rank {p.peer}'s process has gone)")
            elif time.monotonic() >= deadline:
                left.append(f"{p.src}->{p.dst}")
            else:
                still.append(p)
        pending = still
    return wait_s, left


@atexit.register
def _finish_at_exit():
    with _LIVE_LOCK:
        pairs = list(_LIVE)
    wait_s, left = _finish(pairs)
    if left:
        sys.stderr.write(f"conccl backend: exiting with the transfers of pairs {left} unfinished after {wait_s:.0f} s "
                         "(a send whose receiver never called recv, or a recv whose sender never sent): they are "
                         "dropped\n")
    for p in pairs:  # eager sends whose Work had completed, so nobody saw them fail
        for e in p.failed[:1]:
            sys.stderr.write(f"conccl backend: at exit: a send that had returned failed: {e}\n")


def eager_bytes():
    """CONCCL_TORCH_P2P_EAGER_BYTES (default 4 MiB): a send of at most this many bytes is
    eager: its Work completes once the tensor is copied aside, before the receiver has
    called recv, as NCCL's and gloo's small sends complete into their buffers. So a
    ring of blocking dist.send then dist.recv (every rank sending first) completes, as
    it does on NCCL and gloo for small tensors. A larger send completes when the
    receiver has it (a ring of those waits, as NCCL's does past its buffers), and so
    does a send that would take a pair's eager sends not yet moved past 4 x this.
    An eager send that fails later makes the next send to the same rank raise its error."""
    v = os.environ.get("CONCCL_TORCH_P2P_EAGER_BYTES", str(4 << 20))
    try:
        n = int(v)
        if n >= 0:
            return n
    except ValueError:
        pass
    raise RuntimeError(f"CONCCL_TORCH_P2P_EAGER_BYTES={v}: give a number of bytes >= 0 (0: every send waits "
                       "for its receiver)")


def transfer_order():
    """CONCCL_TORCH_P2P_ORDER (CUDA): "host" (the default: each transfer ordered on the
    host by the pair's thread, so that no stream waits for the other process; _Pair._move
    has run 78's numbers) or "stream" (every step on the pair's stream)."""
    v = os.environ.get("CONCCL_TORCH_P2P_ORDER", "host")
    if v not in ("host", "stream"):
        raise RuntimeError(f"CONCCL_TORCH_P2P_ORDER={v}: use \"host\" (the default: the pair's thread orders each "
                           "transfer on the host) or \"stream\" (on the pair's CUDA stream)")
    return v


def enabled():
    """CONCCL_TORCH_P2P: "engines" (this module, the default) or "store" (through the
    group's store: a host copy, no communicator per pair). Other values are refused when
    the group is made."""
    v = os.environ.get("CONCCL_TORCH_P2P", "engines")
    if v not in ("store", "engines"):
        raise RuntimeError(f"CONCCL_TORCH_P2P={v}: use \"engines\" (the default: a communicator per ordered pair, "
                           "on the DMA engines) or \"store\" (send/recv through the group's store)")
    return v == "engines"
