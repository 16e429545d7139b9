// tessera_switch.h: the fiber context switch of the CUDA-on-CPU harness (CUDA-CPU-2), hand-written
// for x86-64 (System V) and AArch64 (AAPCS64) Linux. It includes nothing, so that a freestanding
// program can test it on its own (tests/cuda_cpu/test_aarch64_switch.py).
//
// tsr_cpu_switch(save, load): store the callee-saved state of the calling fiber on its stack, its
// stack pointer in *save, then load the stack pointer `load` and return into the fiber that had
// stored it. tsr_cpu_initial_sp(top, entry, arg): the stack pointer of a new fiber whose stack ends
// at `top` (16-byte aligned): its frame is laid out as if it had switched away just before
// tsr_cpu_fiber_start, which calls entry(arg) on a 16-byte aligned stack (and traps if it returns).
//
// x86-64: rbp, rbx, r12–r15, the SSE control word MXCSR and the x87 control word are saved; a new
// fiber starts with the default control words (round to nearest, exceptions masked).
// AArch64: x19–x28, x29 (fp), x30 (lr, the address the switch returns to) and d8–d15 (the low
// 64 bits of v8–v15, all that AAPCS64 preserves of them) are saved; sp is the saved pointer. The
// FPCR (rounding mode, flush-to-zero) is a thread-global setting under AAPCS64, not a callee-saved
// register: every fiber runs with the thread's.
#pragma once

extern "C" void tsr_cpu_switch(void** save_sp, void* load_sp);
extern "C" void tsr_cpu_fiber_start();

#if defined(__x86_64__)

// The frame, from the saved stack pointer up: x87 control word (4 bytes + 4 unused), MXCSR
// (4 + 4), r15, r14, r13, r12, rbx, rbp, the return address. A new fiber: r12 = arg, r13 = entry.
asm(R"(
  .text
  .p2align 4
  .globl tsr_cpu_switch
  .hidden tsr_cpu_switch
  .type tsr_cpu_switch, @function
tsr_cpu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tsr_cpu_switch, .-tsr_cpu_switch
  .globl tsr_cpu_fiber_start
  .hidden tsr_cpu_fiber_start
  .type tsr_cpu_fiber_start, @function
tsr_cpu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size tsr_cpu_fiber_start, .-tsr_cpu_fiber_start
)");

inline void* tsr_cpu_initial_sp(unsigned char* top, void* entry, void* arg) {
  void** sp = (void**)(top - 72);  // after the pops and the ret: top, 16-byte aligned at the call
  for (int i = 0; i < 9; ++i) sp[i] = nullptr;
  ((unsigned*)sp)[0] = 0x037f;  // x87 control word: round to nearest, double extended, exceptions masked
  ((unsigned*)sp)[2] = 0x1f80;  // MXCSR: round to nearest, exceptions masked
  sp[4] = entry;                // r13
  sp[5] = arg;                  // r12
  sp[8] = (void*)&tsr_cpu_fiber_start;
  return sp;
}

#elif defined(__aarch64__)

// The frame (160 bytes, so sp stays 16-byte aligned), from the saved stack pointer up: x19 … x28,
// x29, x30, d8 … d15. A new fiber: x19 = arg, x20 = entry, x29 = 0 (the end of the frame chain),
// x30 = tsr_cpu_fiber_start; the switch's `ret` enters it with sp = top. `hint #34` is `bti c`:
// the landing pad a call through a linker veneer needs where branch protection is on (a g++
// built with -mbranch-protection marks the whole unit as BTI-guarded), a no-op elsewhere.
asm(R"(
  .text
  .p2align 4
  .globl tsr_cpu_switch
  .hidden tsr_cpu_switch
  .type tsr_cpu_switch, %function
tsr_cpu_switch:
  hint #34
  sub sp, sp, #160
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
  mov x9, sp
  str x9, [x0]
  mov sp, x1
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
  add sp, sp, #160
  ret
  .size tsr_cpu_switch, .-tsr_cpu_switch
  .globl tsr_cpu_fiber_start
  .hidden tsr_cpu_fiber_start
  .type tsr_cpu_fiber_start, %function
tsr_cpu_fiber_start:
  mov x0, x19
  blr x20
  brk #0
  .size tsr_cpu_fiber_start, .-tsr_cpu_fiber_start
)");

inline void* tsr_cpu_initial_sp(unsigned char* top, void* entry, void* arg) {
  void** sp = (void**)(top - 160);
  for (int i = 0; i < 20; ++i) sp[i] = nullptr;
  sp[0] = arg;    // x19
  sp[1] = entry;  // x20
  sp[11] = (void*)&tsr_cpu_fiber_start;  // x30
  return sp;
}

#else
#error "tessera_switch.h: the CUDA-on-CPU harness switches fibers with hand-written x86-64 or AArch64 code; this architecture has neither (run the 'interp' backend)"
#endif
