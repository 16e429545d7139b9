// A freestanding AArch64 program that exercises the harness's fiber switch (tessera_switch.h):
// test_aarch64_switch.py compiles it with zig (no libc, static stacks) and runs it in the
// unicorn CPU emulator from _start to a sentinel return address; _start returns the address of
// `results`, which the test reads from the emulator's memory and checks against values it
// computes itself.
//
// NF fibers, scheduled in rounds (ascending fiber order in even rounds, descending in odd ones;
// every fiber yields exactly once per round, so a round is a barrier phase):
//  1. ROUNDS rounds of tsr_test_check: load values that depend on the fiber and the round into
//     x19-x28, x29 and d8-d15, switch to the scheduler (the other fibers load theirs), count
//     the registers whose value did not survive;
//  2. a ring: fibers switch directly to one another (no scheduler), LAPS times round;
//  3. a tree reduction of DATA integers across the fibers with a barrier after every step.
// Before that, the register check runs once against tsr_test_clobber (which overwrites every
// callee-saved register instead of switching): it must count all 19, or the check proves nothing.
#include "tessera_switch.h"

constexpr int NF = 4, ROUNDS = 6, LAPS = 3, DATA = 64, STACK = 16384;

struct Results {
  unsigned long magic;
  unsigned long control_mismatches;  // the check against tsr_test_clobber
  unsigned long mismatches;          // the checks across real switches
  unsigned long checks;
  unsigned long stack_top[NF];       // where each fiber's stack ends
  unsigned long entry_sp[NF];        // sp when its entry function started
  unsigned long trace_len;
  unsigned long trace[NF * LAPS];    // the fibers in the order the ring ran them
  long total[NF];                    // the reduction's result as each fiber saw it
  unsigned long switches;
};

Results results;
alignas(16) unsigned char stacks[NF][STACK];
void* sched_sp;
void* fiber_sp[NF];
int done[NF];
int cur;
long partial[NF];

extern "C" unsigned long tsr_test_check(unsigned long seed, void (*between)());
extern "C" void tsr_test_clobber();
extern "C" void tsr_test_entry(void* fiber);

// tsr_test_check(seed, between): a callee that keeps every callee-saved register it uses (so it
// is a proper AAPCS64 function), loads seed + 19 … seed + 29 into x19 … x29 and the bits
// seed + 108 … seed + 115 into d8 … d15, calls between(), and returns how many of the 19
// registers no longer hold their value.
// tsr_test_entry: the fibers' entry; passes its sp at entry (x1) on to tsr_test_fiber.
asm(R"(
  .text
  .globl tsr_test_check
  .type tsr_test_check, %function
tsr_test_check:
  sub sp, sp, #176
  stp x19, x20, [sp, #0]
  stp x21, x22, [sp, #16]
  stp x23, x24, [sp, #32]
  stp x25, x26, [sp, #48]
  stp x27, x28, [sp, #64]
  stp x29, x30, [sp, #80]
  stp d8, d9, [sp, #96]
  stp d10, d11, [sp, #112]
  stp d12, d13, [sp, #128]
  stp d14, d15, [sp, #144]
  str x0, [sp, #160]
  add x19, x0, #19
  add x20, x0, #20
  add x21, x0, #21
  add x22, x0, #22
  add x23, x0, #23
  add x24, x0, #24
  add x25, x0, #25
  add x26, x0, #26
  add x27, x0, #27
  add x28, x0, #28
  add x29, x0, #29
  add x9, x0, #108
  fmov d8, x9
  add x9, x0, #109
  fmov d9, x9
  add x9, x0, #110
  fmov d10, x9
  add x9, x0, #111
  fmov d11, x9
  add x9, x0, #112
  fmov d12, x9
  add x9, x0, #113
  fmov d13, x9
  add x9, x0, #114
  fmov d14, x9
  add x9, x0, #115
  fmov d15, x9
  blr x1
  ldr x10, [sp, #160]
  mov x0, #0
  .irp n, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29
  add x9, x10, #\n
  cmp x\n, x9
  cinc x0, x0, ne
  .endr
  .irp n, 8, 9, 10, 11, 12, 13, 14, 15
  fmov x11, d\n
  add x9, x10, #(100 + \n)
  cmp x11, x9
  cinc x0, x0, ne
  .endr
  ldp x19, x20, [sp, #0]
  ldp x21, x22, [sp, #16]
  ldp x23, x24, [sp, #32]
  ldp x25, x26, [sp, #48]
  ldp x27, x28, [sp, #64]
  ldp x29, x30, [sp, #80]
  ldp d8, d9, [sp, #96]
  ldp d10, d11, [sp, #112]
  ldp d12, d13, [sp, #128]
  ldp d14, d15, [sp, #144]
  add sp, sp, #176
  ret
  .size tsr_test_check, .-tsr_test_check

  .globl tsr_test_clobber
  .type tsr_test_clobber, %function
tsr_test_clobber:
  mov x9, #-1
  .irp n, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29
  mov x\n, x9
  .endr
  .irp n, 8, 9, 10, 11, 12, 13, 14, 15
  fmov d\n, x9
  .endr
  ret
  .size tsr_test_clobber, .-tsr_test_clobber

  .globl tsr_test_entry
  .type tsr_test_entry, %function
tsr_test_entry:
  mov x1, sp
  b tsr_test_fiber
  .size tsr_test_entry, .-tsr_test_entry
)");

static void switch_to(int next) {  // from the running fiber to fiber `next`
  int self = cur;
  cur = next;
  ++results.switches;
  tsr_cpu_switch(&fiber_sp[self], fiber_sp[next]);
}

static void yield() {  // from the running fiber to the scheduler: the end of its round
  ++results.switches;
  tsr_cpu_switch(&fiber_sp[cur], sched_sp);
}

static long datum(int i) { return (long)((i * i * 37 + 11) % 1009); }

extern "C" void tsr_test_fiber(void* arg, unsigned long sp) {
  int f = (int)(long)arg;
  results.entry_sp[f] = sp;
  for (int round = 0; round < ROUNDS; ++round) {
    unsigned long seed = ((unsigned long)(f + 1) << 40) | ((unsigned long)round << 16);
    results.mismatches += tsr_test_check(seed, &yield);
    ++results.checks;
  }
  yield();
  for (int lap = 0; lap < LAPS; ++lap) {
    results.trace[results.trace_len++] = (unsigned long)f;
    switch_to((f + 1) % NF);
  }
  long sum = 0;
  for (int i = f * (DATA / NF); i < (f + 1) * (DATA / NF); ++i) sum += datum(i);
  partial[f] = sum;
  yield();
  for (int step = 1; step < NF; step *= 2) {
    if (f % (2 * step) == 0) partial[f] += partial[f + step];
    yield();
  }
  results.total[f] = partial[0];
  done[f] = 1;
  ++results.switches;
  tsr_cpu_switch(&fiber_sp[f], sched_sp);  // never resumed
}

extern "C" Results* _start() {
  results.magic = 0x7e55e7aa64;
  results.control_mismatches = tsr_test_check(0x5a5a0000, &tsr_test_clobber);
  for (int f = 0; f < NF; ++f) {
    unsigned char* top = stacks[f] + STACK;
    results.stack_top[f] = (unsigned long)top;
    fiber_sp[f] = tsr_cpu_initial_sp(top, (void*)&tsr_test_entry, (void*)(long)f);
  }
  for (int round = 0, live = NF; live; ++round) {
    live = 0;
    for (int k = 0; k < NF; ++k) {
      int f = round % 2 == 0 ? k : NF - 1 - k;
      if (done[f]) continue;
      cur = f;
      ++results.switches;
      tsr_cpu_switch(&sched_sp, fiber_sp[f]);
      live += !done[f];
    }
  }
  return &results;
}
