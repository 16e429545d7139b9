// tessera_fiber.h: the fibers and the block scheduler of the CUDA-on-CPU harness (CUDA-CPU-2 … 5).
//
// Every CUDA thread of a block is a fiber with its own stack; a fiber runs until it reaches a
// yield point (__syncthreads, a warp collective) or returns, then control goes back to the
// scheduler, which runs the other ready fibers in the order of the schedule and, once none is
// ready, releases what can be released: a warp collective whose 32 lanes all wait at it, then
// a barrier that every live thread of the block waits at. Whatever cannot be released is a
// finding (a divergent barrier, a barrier some threads exited before, a warp operation that
// not all 32 lanes reach: the block deadlocks) and ends the launch. Blocks run one after
// another; shared memory is refilled with 0xFF bytes (NaN in every float format) before each.
//
// The context switch (tessera_switch.h) is hand-written for x86-64 System V and AArch64 AAPCS64
// Linux (the callee-saved registers and, on x86-64, the
// SSE control word MXCSR and the x87 control word on the stack, then the stack pointer swapped):
// no system call per switch (ucontext's swapcontext makes one). Every switch is a TSR_SWITCH,
// which under AddressSanitizer (g++ -fsanitize=address: CUDA-CPU-10) tells ASan which stack runs
// next; in every other build it is the bare switch.
#pragma once
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <csetjmp>
#include <csignal>
#include <mutex>
#include <vector>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include "tessera_switch.h"  // tsr_cpu_switch, tsr_cpu_initial_sp (x86-64 or AArch64)

// What a launch is asked to do (filled by the Python side, tessera_ref/backends/cuda/cpu/harness.py).
struct tsr_cpu_options {
  int schedule;            // 0 lockstep (ascending lanes), 1 reverse, 2 random (seeded)
  int eager;               // cp.async: 1 copy at issue, 0 deferred to the covering wait_group
  unsigned long long seed; // random: the seed
  long smem;               // dynamic shared memory in bytes
  int tc_products;         // mma.sync: the tensor-core model's products per block (0: no model)
  int tc_align;            // its extra alignment bits, the inputs' exponent floor (numerics/tc.py)
  int tc_emin;
  int tc_fadd;             // 1: the blocks start from +0 and C is added after by an f32 add
  int tc_order[32];        // the instruction's k in the order its blocks take them
};

// What a launch reports: a finding (kind != 0) and the number of context switches.
struct tsr_cpu_result {
  int kind;                // 0 none; see tsr_cpu::Finding
  int line;                // the CUDA source line of the finding
  int other_line;          // a second line (the other barrier, the other warp operation), or 0
  long block[3];           // the block it happened in
  unsigned long long switches;
  unsigned long long fault_address;  // a memory fault: the address accessed
  unsigned long long fault_pc;       // and the faulting instruction's offset in its library
  char fault_library[512];           // that library's path
  char text[1024];
};

#if defined(__SANITIZE_ADDRESS__)
// the running block's dynamic shared memory: a heap block of exactly the launch's size that the
// ASan driver (tessera_asan.h) allocates, so ASan's redzones lie right before and after it; the
// kernel's `extern __shared__ unsigned char tsr_smem[]` declares this function instead
unsigned char* tsr_cpu_smem_block = nullptr;
inline unsigned char (*tsr_cpu_smem())[] { return reinterpret_cast<unsigned char (*)[]>(tsr_cpu_smem_block); }
#define tsr_smem (*tsr_cpu_smem())
#else
// the running block's dynamic shared memory; the pages past the launch's size are made
// inaccessible during a launch, so an access beyond it faults
alignas(4096) unsigned char tsr_smem[(227 * 1024 + 4095) / 4096 * 4096 + 4096];
#endif

namespace tsr_cpu {

enum Finding { NONE = 0, DIVERGENT_BARRIER = 1, BARRIER_AFTER_EXIT = 2, PARTIAL_WARP = 3, BAD_LAUNCH = 4,
               UNSUPPORTED = 5, MEMORY_FAULT = 6 };
enum State { READY, AT_BARRIER, AT_WARP, DONE };
enum WarpOp { SHFL = 1, BALLOT, MMA, LDMATRIX };

struct Copy { void* dst; const void* src; int bytes; long group; };

// -- every switch --------------------------------------------------------------------------------
// TSR_SWITCH(save, load, self, other) leaves the running stack (its stack pointer stored in *save)
// for the one whose saved stack pointer is `load`, and returns when something switches back.
// Under ASan, `self` and `other` are the two stacks' AsanStack: before the switch ASan's fiber API
// is told the stack that runs next (this stack's fake stack kept in self->fake), after it the
// switch is finished (learning other's bounds: how a fiber learns the scheduler's stack), so ASan
// checks every frame against the stack it runs on. TSR_SWITCH_LAST leaves a finished fiber for
// good (its fake stack destroyed); TSR_ARRIVE(other) is the first statement on a new fiber's
// stack. In every other build they are the bare switch and nothing: the same code as without them.
#if defined(__SANITIZE_ADDRESS__)
struct AsanStack { const void* bottom = nullptr; size_t size = 0; void* fake = nullptr; };
inline void asan_switch(void** save, void* load, AsanStack* self, AsanStack* other, bool last) {
  __sanitizer_start_switch_fiber(last ? nullptr : &self->fake, other->bottom, other->size);
  tsr_cpu_switch(save, load);
  __sanitizer_finish_switch_fiber(self->fake, &other->bottom, &other->size);
}
#define TSR_SWITCH(save, load, self, other) tsr_cpu::asan_switch(save, load, self, other, false)
#define TSR_SWITCH_LAST(save, load, self, other) tsr_cpu::asan_switch(save, load, self, other, true)
#define TSR_ARRIVE(other) __sanitizer_finish_switch_fiber(nullptr, &(other)->bottom, &(other)->size)
#else
#define TSR_SWITCH(save, load, self, other) tsr_cpu_switch(save, load)
#define TSR_SWITCH_LAST(save, load, self, other) tsr_cpu_switch(save, load)
#define TSR_ARRIVE(other) ((void)0)
#endif

struct Fiber {
  void* sp = nullptr;
#if defined(__SANITIZE_ADDRESS__)
  AsanStack asan;            // its stack, as ASan is told of it
#endif
  unsigned lane = 0;
  State state = DONE;
  int line = 0;              // the line of its current yield point
  int op = 0;                // the warp operation it waits at
  // a warp operation's operands and result
  unsigned long long value = 0, result = 0;
  int offset = 0;
  unsigned mma_a[4] = {0, 0, 0, 0}, mma_b[2] = {0, 0};
  float mma_c[4] = {0, 0, 0, 0};
  int mma_fmt = 0;
  const void* address = nullptr;
  int ld_n = 0, ld_trans = 0;
  unsigned ld_r[4] = {0, 0, 0, 0};
  // cp.async groups not yet completed (deferred mode), in issue order
  std::vector<Copy> copies;
  long committed = 0;
  struct { unsigned x, y, z; } tid = {0, 0, 0};
};

typedef void (*Entry)(void**);

struct Runtime {
  std::mutex lock;           // one launch at a time per loaded kernel library
  tsr_cpu_options opt;
  tsr_cpu_result* out = nullptr;
  Entry entry = nullptr;
  void** args = nullptr;
  sigjmp_buf escape;         // where a memory fault in a fiber returns to
  std::vector<Fiber> fibers;
  std::vector<unsigned char*> stacks;
  void* sched_sp = nullptr;
#if defined(__SANITIZE_ADDRESS__)
  AsanStack sched_asan;      // the scheduler's stack (the thread's: a fiber learns it on arrival)
#endif
  Fiber* cur = nullptr;
  unsigned lanes = 0;
  unsigned long long rng = 0, switches = 0;
  struct { unsigned x, y, z; } block = {0, 0, 0}, grid = {1, 1, 1}, dim = {1, 1, 1};
};

inline Runtime& rt() {
  static Runtime r;
  return r;
}

// the most dynamic shared memory a block may have (sm_90): the size of tsr_smem
constexpr long SMEM_MAX = 227 * 1024;

constexpr size_t STACK = 256 * 1024;  // per fiber, with a guard page below it

inline unsigned long long next_random(Runtime& r) {  // splitmix64
  unsigned long long z = (r.rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline void finding(int kind, int line, int other, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
inline void finding(int kind, int line, int other, const char* fmt, ...) {
  Runtime& r = rt();
  if (r.out->kind) return;  // the first one stands
  r.out->kind = kind;
  r.out->line = line;
  r.out->other_line = other;
  r.out->block[0] = r.block.x;
  r.out->block[1] = r.block.y;
  r.out->block[2] = r.block.z;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.out->text, sizeof r.out->text, fmt, ap);
  va_end(ap);
}

// -- the fiber side ------------------------------------------------------------------------------
inline Fiber& self() { return *rt().cur; }

inline void yield() {  // back to the scheduler; returns when the scheduler resumes this fiber
  Runtime& r = rt();
  Fiber* f = r.cur;
  ++r.switches;
  TSR_SWITCH(&f->sp, r.sched_sp, &f->asan, &r.sched_asan);
}

inline void perform(const Copy& c) { std::memcpy(c.dst, c.src, (size_t)c.bytes); }

inline void complete_copies(Fiber& f, long keep_groups) {
  // complete every copy of the groups older than the `keep_groups` most recently committed ones
  // (-1: every copy, the uncommitted ones too)
  long limit = f.committed - keep_groups;
  size_t kept = 0;
  for (size_t i = 0; i < f.copies.size(); ++i) {
    if (f.copies[i].group < limit) perform(f.copies[i]);
    else f.copies[kept++] = f.copies[i];
  }
  f.copies.resize(kept);
}

inline void fiber_main(Fiber* f) {
  Runtime& r = rt();
  TSR_ARRIVE(&r.sched_asan);
  r.entry(r.args);
  complete_copies(*f, -1);  // copies still in flight land before the thread is gone
  f->state = DONE;
  ++r.switches;
  TSR_SWITCH_LAST(&f->sp, r.sched_sp, &f->asan, &r.sched_asan);
}

inline void barrier(int line) {
  Fiber& f = self();
  f.state = AT_BARRIER;
  f.line = line;
  yield();
}

inline void warp_op(int op, int line) {
  Fiber& f = self();
  f.state = AT_WARP;
  f.op = op;
  f.line = line;
  yield();
}

// -- the scheduler side --------------------------------------------------------------------------
inline void release_warp(Runtime& r, unsigned w);  // tessera_cpu.h: the warp operations' semantics

inline const char* op_name(int op) {
  return op == SHFL ? "a warp shuffle" : op == BALLOT ? "a warp vote" : op == MMA ? "mma.sync" : "ldmatrix";
}

inline void start_fiber(Runtime& r, unsigned lane) {
  Fiber& f = r.fibers[lane];
  unsigned char* top = r.stacks[lane] + STACK;  // 16-byte aligned
#if defined(__SANITIZE_ADDRESS__)
  f.asan = {r.stacks[lane], STACK, nullptr};
  ASAN_UNPOISON_MEMORY_REGION(r.stacks[lane], STACK);  // no redzone of the last block's frames stays
#endif
  f.sp = tsr_cpu_initial_sp(top, (void*)&fiber_main, &f);
  f.lane = lane;
  f.tid = {lane, 0, 0};
  f.state = READY;
  f.copies.clear();
  f.committed = 0;
}

inline void lanes_text(char* buf, size_t n, const std::vector<unsigned>& lanes) {
  // "0-31, 64" style
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < lanes.size() && used + 24 < n;) {
    size_t j = i;
    while (j + 1 < lanes.size() && lanes[j + 1] == lanes[j] + 1) ++j;
    used += (size_t)snprintf(buf + used, n - used, j > i ? "%s%u-%u" : "%s%u", i ? ", " : "", lanes[i], lanes[j]);
    i = j + 1;
  }
}

// Nothing is ready: release the warps whose lanes all wait at one operation, else the barrier;
// false (with a finding) when nothing can be released.
inline bool release(Runtime& r) {
  bool any = false;
  unsigned warps = (r.lanes + 31) / 32;
  for (unsigned w = 0; w < warps; ++w) {
    unsigned lo = w * 32, hi = lo + 32 < r.lanes ? lo + 32 : r.lanes;
    Fiber& first = r.fibers[lo];
    bool waiting = false, all = hi - lo == 32;
    for (unsigned l = lo; l < hi; ++l) {
      Fiber& f = r.fibers[l];
      waiting |= f.state == AT_WARP;
      all &= f.state == AT_WARP && f.op == first.op && f.line == first.line;
    }
    if (waiting && all) {
      release_warp(r, w);
      for (unsigned l = lo; l < hi; ++l) r.fibers[l].state = READY;
      any = true;
    }
  }
  if (any) return true;
  std::vector<unsigned> at_barrier, elsewhere, exited, at_warp;
  int line = 0, other = 0;
  for (unsigned l = 0; l < r.lanes; ++l) {
    Fiber& f = r.fibers[l];
    if (f.state == DONE) exited.push_back(l);
    else if (f.state == AT_WARP) { at_warp.push_back(l); if (!other) other = f.line; }
    else if (!line || f.line == line) { line = f.line; at_barrier.push_back(l); }
    else { elsewhere.push_back(l); if (!other) other = f.line; }
  }
  char a[256], b[256];
  if (!at_warp.empty()) {
    Fiber& f = r.fibers[at_warp[0]];
    unsigned w = at_warp[0] / 32;
    std::vector<unsigned> mates, missing;
    for (unsigned l = w * 32; l < w * 32 + 32; ++l)
      (l < r.lanes && r.fibers[l].state == AT_WARP && r.fibers[l].line == f.line ? mates : missing).push_back(l);
    lanes_text(a, sizeof a, mates);
    lanes_text(b, sizeof b, missing);
    finding(PARTIAL_WARP, f.line, line, "%s of warp %u (line %d) is reached by lanes %s only; lanes %s %s: a warp "
            "collective needs all 32 lanes of the warp (blockDim.x = %u): the block deadlocks",
            op_name(f.op), w, f.line, a, b,
            w * 32 + 32 > r.lanes ? "do not exist" : "exited or wait elsewhere", r.lanes);
    return false;
  }
  if (!elsewhere.empty()) {
    lanes_text(a, sizeof a, at_barrier);
    lanes_text(b, sizeof b, elsewhere);
    finding(DIVERGENT_BARRIER, line, other, "divergent __syncthreads: threads %s wait at the barrier of line %d, "
            "threads %s at the barrier of line %d", a, line, b, other);
    return false;
  }
  if (!exited.empty()) {
    lanes_text(a, sizeof a, at_barrier);
    lanes_text(b, sizeof b, exited);
    finding(BARRIER_AFTER_EXIT, line, 0, "__syncthreads at line %d is reached by threads %s after threads %s "
            "returned", line, a, b);
    return false;
  }
  for (unsigned l = 0; l < r.lanes; ++l) r.fibers[l].state = READY;
  return true;
}

inline void order(Runtime& r, std::vector<unsigned>& lanes) {
  for (unsigned l = 0; l < r.lanes; ++l) lanes[l] = r.opt.schedule == 1 ? r.lanes - 1 - l : l;
  if (r.opt.schedule == 2)
    for (unsigned i = r.lanes; i > 1; --i) std::swap(lanes[i - 1], lanes[next_random(r) % i]);
}

inline bool run_block(Runtime& r) {
  std::memset(tsr_smem, 0xff, (size_t)(r.opt.smem > 0 ? r.opt.smem : 0));  // poison: NaN in every float format
  for (unsigned l = 0; l < r.lanes; ++l) start_fiber(r, l);
  std::vector<unsigned> lanes(r.lanes);
  for (;;) {
    order(r, lanes);
    for (unsigned l : lanes) {
      Fiber& f = r.fibers[l];
      if (f.state != READY) continue;
      r.cur = &f;
      ++r.switches;
      TSR_SWITCH(&r.sched_sp, f.sp, &r.sched_asan, &f.asan);
      r.cur = nullptr;
      if (r.out->kind) return false;  // a finding inside a fiber (a bound, an unsupported use)
    }
    bool live = false;
    for (unsigned l = 0; l < r.lanes && !live; ++l) live = r.fibers[l].state != DONE;
    if (!live) return true;
    if (!release(r)) return false;
  }
}

// -- memory faults: an access outside the buffers (guard pages) or a fiber's stack ------------------
inline thread_local bool in_launch = false;
inline struct sigaction old_segv, old_bus;

inline void on_fault(int sig, siginfo_t* info, void* context) {
  if (!in_launch) {  // not ours: the previous handler takes the fault again
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    return;
  }
  Runtime& r = rt();
#if defined(__x86_64__)
  void* pc = (void*)((ucontext_t*)context)->uc_mcontext.gregs[REG_RIP];
#else
  void* pc = (void*)((ucontext_t*)context)->uc_mcontext.pc;
#endif
  Dl_info where;
  r.out->fault_address = (unsigned long long)info->si_addr;
  if (dladdr(pc, &where) && where.dli_fname) {
    r.out->fault_pc = (unsigned long long)((char*)pc - (char*)where.dli_fbase);
    snprintf(r.out->fault_library, sizeof r.out->fault_library, "%s", where.dli_fname);
  }
  int line = r.cur ? r.cur->line : 0;
  finding(MEMORY_FAULT, line, 0, "thread %u touched address 0x%llx outside every buffer it was given (signal %d)",
          r.cur ? r.cur->lane : 0u, (unsigned long long)info->si_addr, sig);
  siglongjmp(r.escape, 1);
}

inline void guard(bool on, long smem) {  // the handlers, the alternate stack, the shared-memory guard
#if defined(__SANITIZE_ADDRESS__)
  (void)on, (void)smem;  // ASan's own handler reports a wild access, with the stack
#else
  static thread_local unsigned char alt[64 * 1024];
  // the whole pages between the launch's shared memory and the end of tsr_smem (both ends rounded
  // inwards to the host's page size: never a page that also holds another variable)
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = (uintptr_t)tsr_smem;
  uintptr_t from = (start + (uintptr_t)smem + page - 1) / page * page, to = (start + sizeof tsr_smem) / page * page;
  if (from < to) mprotect((void*)from, to - from, on ? PROT_NONE : PROT_READ | PROT_WRITE);
  if (on) {
    stack_t ss{};
    ss.ss_sp = alt;
    ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
  } else {
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
  }
  in_launch = on;
#endif
}

inline int launch(Entry entry, const long* grid, int lanes, void** args, const tsr_cpu_options* opt,
                  tsr_cpu_result* out) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> hold(r.lock);
  std::memset(out, 0, sizeof *out);
  r.out = out;
  if (lanes < 1 || lanes > 1024 || grid[0] < 1 || grid[1] < 1 || grid[2] < 1 || opt->smem > SMEM_MAX) {
    finding(BAD_LAUNCH, 0, 0, "a launch needs 1 to 1024 threads per block, a grid of positive sizes and at most "
            "%ld B of dynamic shared memory; got %d threads, grid (%ld, %ld, %ld), %ld B", SMEM_MAX, lanes,
            grid[0], grid[1], grid[2], opt->smem);
    return 1;
  }
  r.opt = *opt;
  r.entry = entry;
  r.args = args;
  r.lanes = (unsigned)lanes;
  r.switches = 0;
  r.rng = opt->seed;
  r.dim = {(unsigned)lanes, 1, 1};
  r.grid = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
  if (r.fibers.size() < (size_t)lanes) r.fibers.resize((size_t)lanes);
  while (r.stacks.size() < (size_t)lanes) {
    void* p = mmap(nullptr, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      finding(BAD_LAUNCH, 0, 0, "could not map %d fiber stacks", lanes);
      return 1;
    }
    mprotect(p, 4096, PROT_NONE);  // a stack overflow faults instead of corrupting the neighbour
    r.stacks.push_back((unsigned char*)p + 4096);
  }
  bool ok = true;
  guard(true, opt->smem);
  if (sigsetjmp(r.escape, 1)) {
    ok = false;  // a memory fault (recorded by on_fault); the fibers are abandoned
  } else {
    for (unsigned z = 0; z < r.grid.z && ok; ++z)
      for (unsigned y = 0; y < r.grid.y && ok; ++y)
        for (unsigned x = 0; x < r.grid.x && ok; ++x) {
          r.block = {x, y, z};
          ok = run_block(r);
        }
  }
  guard(false, opt->smem);
  r.cur = nullptr;
  for (unsigned char* stack : r.stacks) munmap(stack - 4096, STACK + 4096);  // many libraries stay loaded:
  r.stacks.clear();                                                           // none keeps its stacks
  out->switches = r.switches;
  return ok ? 0 : 1;
}

// round trips between the scheduler and one fiber, for the benchmark
inline void pingpong_main(Fiber* f) {
  Runtime& r = rt();
  TSR_ARRIVE(&r.sched_asan);
  for (;;) TSR_SWITCH(&f->sp, r.sched_sp, &f->asan, &r.sched_asan);
}

}  // namespace tsr_cpu

extern "C" __attribute__((visibility("default"))) void tsr_cpu_pingpong(long n) {
  tsr_cpu::Runtime& r = tsr_cpu::rt();
  std::lock_guard<std::mutex> hold(r.lock);
  static unsigned char stack[64 * 1024] __attribute__((aligned(16)));
  tsr_cpu::Fiber f;
  f.sp = tsr_cpu_initial_sp(stack + sizeof stack, (void*)&tsr_cpu::pingpong_main, &f);
#if defined(__SANITIZE_ADDRESS__)
  f.asan = {stack, sizeof stack, nullptr};
#endif
  for (long i = 0; i < n; ++i) TSR_SWITCH(&r.sched_sp, f.sp, &r.sched_asan, &f.asan);
}
