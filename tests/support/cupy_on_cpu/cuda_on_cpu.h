// CUDA's built-ins on the CPU: what the tests put in front of a kernel's source, unchanged, so
// that g++ compiles it and the harness (kernels.py) runs it on NumPy arrays.
//
// Every CUDA thread of a block is a fiber: its own stack, run on this one OS thread until it
// reaches a warp-synchronous call (a shuffle, a vote, __syncwarp) or __syncthreads, where it
// hands over to the scheduler. Once every lane a call names (its mask) has arrived, the call's
// results are computed from all their values at once, as a warp does, and the lanes go on;
// __syncthreads waits for every thread of the block. Lanes that a call's mask names but that
// wait somewhere else, or have returned, are an error (undefined behaviour on a GPU), as is a
// block whose threads all wait and can never go on. Blocks run one after another, so
// __shared__ variables are static ones (a block starts with what the last one left, where a
// GPU's shared memory starts undefined), and atomics need no locks.
//
// This checks a kernel's logic (its indices, reductions, masks and accumulation types), not its
// speed, its memory access pattern, races between blocks, or what a GPU's math library rounds
// differently (exp, erf, tanh within a few ulp). Warp matrix-multiply fragments (WMMA) are
// include/mma.h's: whole matrices in every lane, products in the accumulator's type.
#ifndef TSPEC_CUDA_ON_CPU_H
#define TSPEC_CUDA_ON_CPU_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csetjmp>
#include <csignal>
#include <cstdarg>
#include <math.h>
#include <type_traits>
#include <utility>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
};

// half precision: x86-64's _Float16 is IEEE binary16, as CUDA's __half
typedef _Float16 __half;
typedef _Float16 half;
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half __float2half(float f) { return static_cast<__half>(f); }
inline __half __float2half_rn(float f) { return static_cast<__half>(f); }
inline unsigned short __half_as_ushort(__half h) {
    unsigned short bits;
    std::memcpy(&bits, &h, sizeof bits);
    return bits;
}
inline __half __ushort_as_half(unsigned short bits) {
    __half h;
    std::memcpy(&h, &bits, sizeof h);
    return h;
}

// reinterpretations and the intrinsics kernels use most
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <typename T> inline T __ldg(const T* p) { return *p; }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <typename T> inline T min(T a, T b) { return b < a ? b : a; }
template <typename T> inline T max(T a, T b) { return a < b ? b : a; }

namespace cuda_on_cpu {

enum State { running, waits_in_warp, waits_in_block, exited };
enum WarpCall {
    shfl_idx, shfl_up, shfl_down, shfl_xor, vote_all, vote_any, vote_ballot, sync_warp
};
const char* const warp_call_names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                       "__shfl_xor_sync", "__all_sync", "__any_sync",
                                       "__ballot_sync", "__syncwarp"};
enum BlockCall { sync_plain, sync_count, sync_and, sync_or };

struct Fiber {
    void* sp;                 // its stack pointer while it waits (x86-64)
#if !defined(__x86_64__)
    ucontext_t context;
#endif
    uint3 index;              // threadIdx
    unsigned int linear, lane, warp;
    State state;
    // the warp-synchronous call it waits in
    int call;
    unsigned int mask;
    int operand, width;
    std::uint64_t value, result;
    // the __syncthreads it waits in
    int block_call, predicate, block_result;
};

static const std::size_t stack_size = 64 * 1024;
static Fiber* fibers = nullptr;
static unsigned int fiber_count = 0;
static char* stacks = nullptr;
static std::size_t stacks_size = 0;
static Fiber* current = nullptr;
#if defined(__x86_64__)
static void* scheduler_sp = nullptr;
#else
static ucontext_t scheduler_context;
#endif
static void (*invoke)(void* kernel, void** params) = nullptr;
static void* kernel_entry = nullptr;
static void** kernel_params = nullptr;

static char message[1024];
static sigjmp_buf escape;

[[noreturn]] static void fail(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace cuda_on_cpu

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
const int warpSize = 32;

namespace cuda_on_cpu {

[[noreturn]] static void fail(const char* format, ...) {
    va_list arguments;
    va_start(arguments, format);
    std::vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    siglongjmp(escape, 2);
}

#if defined(__x86_64__)
// switch(save, load): keep this fiber's callee-saved registers and floating-point control on
// its stack, store its stack pointer in *save, and go on from the stack pointer ``load``
extern "C" void cuda_on_cpu_switch(void** save, void* load);
asm(R"(
    .text
    .p2align 4
    .type cuda_on_cpu_switch, @function
cuda_on_cpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_on_cpu_switch, .-cuda_on_cpu_switch
)");
#endif

static void set_built_ins(const Fiber& f) { threadIdx = f.index; }

// from a fiber to the scheduler, until the scheduler resumes it
static void wait() {
    Fiber* self = current;
#if defined(__x86_64__)
    cuda_on_cpu_switch(&self->sp, scheduler_sp);
#else
    swapcontext(&self->context, &scheduler_context);
#endif
    set_built_ins(*self);
}

static void resume(Fiber& f) {
    current = &f;
    f.state = running;
    set_built_ins(f);
#if defined(__x86_64__)
    cuda_on_cpu_switch(&scheduler_sp, f.sp);
#else
    swapcontext(&scheduler_context, &f.context);
#endif
}

static void fiber_main() {
    invoke(kernel_entry, kernel_params);
    current->state = exited;
#if defined(__x86_64__)
    void* unused;
    cuda_on_cpu_switch(&unused, scheduler_sp);
#else
    setcontext(&scheduler_context);
#endif
    __builtin_unreachable();
}

static void make_stacks(unsigned int count) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t each = stack_size + page;  // a guard page below each stack
    if (count <= fiber_count) return;
    if (stacks) munmap(stacks, stacks_size);
    delete[] fibers;
    stacks_size = each * count;
    void* memory = mmap(nullptr, stacks_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (memory == MAP_FAILED) fail("cannot map %u fiber stacks", count);
    stacks = static_cast<char*>(memory);
    for (unsigned int i = 0; i < count; ++i) mprotect(stacks + i * each, page, PROT_NONE);
    fibers = new Fiber[count];
    fiber_count = count;
}

static void start(Fiber& f, unsigned int i) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    char* bottom = stacks + i * (stack_size + page) + page;
#if defined(__x86_64__)
    const std::uintptr_t top =
        reinterpret_cast<std::uintptr_t>(bottom + stack_size) & ~std::uintptr_t(15);
    void** frame = reinterpret_cast<void**>(top - 80);
    std::uint32_t control[2] = {0, 0};
    asm volatile("stmxcsr %0" : "=m"(control[0]));
    asm volatile("fnstcw %0" : "=m"(control[1]));
    std::memcpy(frame, control, sizeof control);  // the floating-point control words
    for (int slot = 2; slot < 8; ++slot) frame[slot] = nullptr;  // r15 ... rbp
    frame[8] = reinterpret_cast<void*>(&fiber_main);                // where ret goes
    frame[9] = nullptr;                                              // fiber_main never returns
    f.sp = frame;
#else
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = bottom;
    f.context.uc_stack.ss_size = stack_size;
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_main, 0);
#endif
}

// ---------------------------------------------------------------------------------------------
// Warp-synchronous calls

template <typename T> static T at_warp(int call, unsigned int mask, T value, int operand,
                                       int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "a warp-synchronous call takes values of at most 8 bytes");
    Fiber& f = *current;
    if (!(mask >> f.lane & 1u))
        fail("thread %u (lane %u of warp %u) called %s with mask 0x%08x, which leaves it out",
             f.linear, f.lane, f.warp, warp_call_names[call], mask);
    f.call = call;
    f.mask = mask;
    f.operand = operand;
    f.width = width;
    f.value = 0;
    std::memcpy(&f.value, &value, sizeof(T));
    f.state = waits_in_warp;
    wait();
    T result;
    std::memcpy(&result, &f.result, sizeof(T));
    return result;
}

static unsigned int lanes_in(unsigned int warp, unsigned int threads) {
    const unsigned int first = warp * 32;
    const unsigned int count = threads - first < 32 ? threads - first : 32;
    return count == 32 ? 0xffffffffu : (1u << count) - 1;
}

static std::uint64_t shuffled(const Fiber* warp, const Fiber& f, unsigned int mask) {
    const unsigned int width = static_cast<unsigned int>(f.width);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail("%s with width %d: the width must be a power of 2 from 1 to 32",
             warp_call_names[f.call], f.width);
    const unsigned int start = f.lane & ~(width - 1);
    const unsigned int offset = static_cast<unsigned int>(f.operand);
    unsigned int source = f.lane;
    switch (f.call) {
    case shfl_idx: source = start + (offset & (width - 1)); break;
    case shfl_up: source = f.lane - start >= offset ? f.lane - offset : f.lane; break;
    case shfl_down: source = f.lane - start + offset < width ? f.lane + offset : f.lane; break;
    case shfl_xor: {
        const unsigned int other = f.lane ^ (offset & 31u);
        source = other < start + width ? other : f.lane;
        break;
    }
    }
    if (!(mask >> source & 1u))
        fail("lane %u of warp %u reads lane %u in %s, but the mask 0x%08x leaves that lane out",
             f.lane, f.warp, source, warp_call_names[f.call], mask);
    return warp[source].value;
}

// the calls every lane of a group waits in, once all have arrived: false if none is complete
static bool settle_warp(Fiber* warp, unsigned int warp_index, unsigned int present) {
    bool settled = false;
    for (unsigned int lane = 0; lane < 32; ++lane) {
        if (!(present >> lane & 1u)) continue;
        Fiber& f = warp[lane];
        if (f.state != waits_in_warp) continue;
        const unsigned int mask = f.mask;
        if (mask & ~present)
            fail("%s in warp %u names lanes 0x%08x, but the block has only lanes 0x%08x there",
                 warp_call_names[f.call], warp_index, mask, present);
        bool complete = true;
        for (unsigned int other = 0; other < 32; ++other) {
            if (!(mask >> other & 1u)) continue;
            const Fiber& g = warp[other];
            if (g.state == exited)
                fail("lane %u of warp %u waits in %s with mask 0x%08x, but lane %u has returned",
                     lane, warp_index, warp_call_names[f.call], mask, other);
            if (g.state == waits_in_block)
                fail("lane %u of warp %u waits in %s with mask 0x%08x, but lane %u waits in "
                     "__syncthreads", lane, warp_index, warp_call_names[f.call], mask, other);
            if (g.state != waits_in_warp) {
                complete = false;
                continue;
            }
            if (g.call != f.call || g.mask != mask)
                fail("the lanes of warp %u diverge: lane %u waits in %s with mask 0x%08x, lane "
                     "%u in %s with mask 0x%08x", warp_index, lane, warp_call_names[f.call],
                     mask, other, warp_call_names[g.call], g.mask);
        }
        if (!complete) continue;
        unsigned int votes = 0;
        for (unsigned int other = 0; other < 32; ++other)
            if ((mask >> other & 1u) && warp[other].value) votes |= 1u << other;
        for (unsigned int other = 0; other < 32; ++other) {
            if (!(mask >> other & 1u)) continue;
            Fiber& g = warp[other];
            switch (g.call) {
            case vote_all: g.result = votes == mask; break;
            case vote_any: g.result = votes != 0; break;
            case vote_ballot: g.result = votes; break;
            case sync_warp: g.result = 0; break;
            default: g.result = shuffled(warp, g, mask);
            }
        }
        for (unsigned int other = 0; other < 32; ++other)
            if (mask >> other & 1u) warp[other].state = running;
        settled = true;
    }
    return settled;
}

}  // namespace cuda_on_cpu

template <typename T> T __shfl_sync(unsigned int mask, T var, int src_lane, int width = 32) {
    return cuda_on_cpu::at_warp(cuda_on_cpu::shfl_idx, mask, var, src_lane, width);
}
template <typename T> T __shfl_up_sync(unsigned int mask, T var, unsigned int delta,
                                       int width = 32) {
    return cuda_on_cpu::at_warp(cuda_on_cpu::shfl_up, mask, var, static_cast<int>(delta), width);
}
template <typename T> T __shfl_down_sync(unsigned int mask, T var, unsigned int delta,
                                         int width = 32) {
    return cuda_on_cpu::at_warp(cuda_on_cpu::shfl_down, mask, var, static_cast<int>(delta),
                                width);
}
template <typename T> T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = 32) {
    return cuda_on_cpu::at_warp(cuda_on_cpu::shfl_xor, mask, var, lane_mask, width);
}
inline int __all_sync(unsigned int mask, int predicate) {
    return static_cast<int>(cuda_on_cpu::at_warp(cuda_on_cpu::vote_all, mask, predicate != 0, 0,
                                                 32));
}
inline int __any_sync(unsigned int mask, int predicate) {
    return static_cast<int>(cuda_on_cpu::at_warp(cuda_on_cpu::vote_any, mask, predicate != 0, 0,
                                                 32));
}
inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
    return static_cast<unsigned int>(cuda_on_cpu::at_warp(
        cuda_on_cpu::vote_ballot, mask, static_cast<unsigned int>(predicate != 0), 0, 32));
}
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
    cuda_on_cpu::at_warp(cuda_on_cpu::sync_warp, mask, 0, 0, 32);
}
inline unsigned int __activemask() {  // the lanes of this warp that have not returned
    unsigned int active = 0;
    const cuda_on_cpu::Fiber* warp = cuda_on_cpu::current - cuda_on_cpu::current->lane;
    const unsigned int present = cuda_on_cpu::lanes_in(cuda_on_cpu::current->warp,
                                                       blockDim.x * blockDim.y * blockDim.z);
    for (unsigned int lane = 0; lane < 32; ++lane)
        if ((present >> lane & 1u) && warp[lane].state != cuda_on_cpu::exited)
            active |= 1u << lane;
    return active;
}

namespace cuda_on_cpu {
static int at_block(int call, int predicate) {
    Fiber& f = *current;
    f.block_call = call;
    f.predicate = predicate != 0;
    f.state = waits_in_block;
    wait();
    return f.block_result;
}
}  // namespace cuda_on_cpu

inline void __syncthreads() { cuda_on_cpu::at_block(cuda_on_cpu::sync_plain, 0); }
inline int __syncthreads_count(int predicate) {
    return cuda_on_cpu::at_block(cuda_on_cpu::sync_count, predicate);
}
inline int __syncthreads_and(int predicate) {
    return cuda_on_cpu::at_block(cuda_on_cpu::sync_and, predicate);
}
inline int __syncthreads_or(int predicate) {
    return cuda_on_cpu::at_block(cuda_on_cpu::sync_or, predicate);
}

// atomics: one fiber runs at a time and none is interrupted between two of its statements
namespace cuda_on_cpu {
template <typename T, typename F> inline T atomically(T* address, F update) {
    const T old = *address;
    *address = update(old);
    return old;
}
}  // namespace cuda_on_cpu
template <typename T> inline T atomicAdd(T* a, T v) {
    return cuda_on_cpu::atomically(a, [v](T old) { return old + v; });
}
template <typename T> inline T atomicSub(T* a, T v) {
    return cuda_on_cpu::atomically(a, [v](T old) { return old - v; });
}
template <typename T> inline T atomicMax(T* a, T v) {
    return cuda_on_cpu::atomically(a, [v](T old) { return old < v ? v : old; });
}
template <typename T> inline T atomicMin(T* a, T v) {
    return cuda_on_cpu::atomically(a, [v](T old) { return v < old ? v : old; });
}
template <typename T> inline T atomicExch(T* a, T v) {
    return cuda_on_cpu::atomically(a, [v](T) { return v; });
}
template <typename T> inline T atomicCAS(T* a, T compare, T v) {
    return cuda_on_cpu::atomically(a, [compare, v](T old) { return old == compare ? v : old; });
}

#undef assert
#define assert(condition)                                                                    \
    ((condition) ? (void)0                                                                   \
                 : cuda_on_cpu::fail("assertion failed in thread (%u, %u, %u) of block (%u, " \
                                     "%u, %u): %s (line %d)", threadIdx.x, threadIdx.y,      \
                                     threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,        \
                                     #condition, __LINE__))

namespace cuda_on_cpu {

// ---------------------------------------------------------------------------------------------
// Running one block, and a launch

static void run_block(unsigned int threads) {
    for (unsigned int i = 0; i < threads; ++i) {
        Fiber& f = fibers[i];
        f.index.x = i % blockDim.x;
        f.index.y = i / blockDim.x % blockDim.y;
        f.index.z = i / (blockDim.x * blockDim.y);
        f.linear = i;
        f.lane = i % 32;
        f.warp = i / 32;
        f.state = running;
        start(f, i);
    }
    const unsigned int warps = (threads + 31) / 32;
    for (;;) {
        bool any = false;
        for (unsigned int i = 0; i < threads; ++i) {
            if (fibers[i].state == running) {
                resume(fibers[i]);
                any = true;
            }
        }
        if (any) continue;
        bool settled = false;
        for (unsigned int w = 0; w < warps; ++w)
            settled = settle_warp(fibers + 32 * w, w, lanes_in(w, threads)) || settled;
        if (settled) continue;
        unsigned int waiting = 0, gone = 0, first_gone = 0;
        for (unsigned int i = 0; i < threads; ++i) {
            if (fibers[i].state == waits_in_block) ++waiting;
            if (fibers[i].state == exited && gone++ == 0) first_gone = i;
        }
        if (gone == threads) return;
        if (waiting == 0)
            fail("every thread of block (%u, %u, %u) waits and none can go on (a warp-"
                 "synchronous call some lane never reaches)", blockIdx.x, blockIdx.y,
                 blockIdx.z);
        if (gone)
            fail("%u threads of block (%u, %u, %u) wait in __syncthreads, but thread %u has "
                 "returned", waiting, blockIdx.x, blockIdx.y, blockIdx.z, first_gone);
        if (waiting != threads)
            fail("the threads of block (%u, %u, %u) diverge: some wait in __syncthreads, others "
                 "in a warp-synchronous call", blockIdx.x, blockIdx.y, blockIdx.z);
        int count = 0;
        int kind = fibers[0].block_call;
        for (unsigned int i = 0; i < threads; ++i) count += fibers[i].predicate;
        for (unsigned int i = 0; i < threads; ++i) {
            Fiber& f = fibers[i];
            if (f.block_call != kind)
                fail("the threads of block (%u, %u, %u) wait in different kinds of "
                     "__syncthreads", blockIdx.x, blockIdx.y, blockIdx.z);
            f.block_result = kind == sync_count ? count
                           : kind == sync_and   ? count == static_cast<int>(threads)
                           : kind == sync_or    ? count > 0
                                                : 0;
            f.state = running;
        }
    }
}

// The memory a launch hands a kernel: a copy of each argument's bytes in pages of its own,
// ending where a page no one may touch begins, after a gap of 0xff bytes (NaN in every float
// type) that must stay as it was. Reads past an argument's end fault; reads before its start
// see NaN (or fault, further away), writes there are found afterwards.
struct Region {
    char* host;           // where the bytes are in the caller's memory
    long long size;
    int writable;
};
struct Argument {
    int kind;             // 0: a value of ``size`` bytes at ``value``; 1: a pointer into a region
    int floating;         // a value: 1 if a floating-point number, 0 if an integer or bool
    const void* value;
    long long size;
    int region;
    long long offset;     // of the pointer, from the region's start
};
struct Copy {
    char* mapping;
    std::size_t mapping_size;
    char* data;           // the region's bytes in the mapping
    std::size_t gap;      // bytes of 0xff before data
};

static Copy* copies = nullptr;
static int copy_count = 0;
static const Region* regions = nullptr;
static const char* kernel_name = "";
static const char* const* argument_names = nullptr;
static int argument_count = 0;
static const Argument* arguments = nullptr;

static const char* argument_of(int region) {
    for (int a = 0; a < argument_count; ++a)
        if (arguments[a].kind == 1 && arguments[a].region == region) return argument_names[a];
    return "?";
}

static void describe_address(const char* what, std::uintptr_t address) {
    for (int r = 0; r < copy_count; ++r) {
        const Copy& c = copies[r];
        const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(c.mapping);
        if (address < begin || address >= begin + c.mapping_size) continue;
        const char* name = argument_of(r);
        long long offset = 0;
        for (int a = 0; a < argument_count; ++a)
            if (arguments[a].kind == 1 && arguments[a].region == r) {
                offset = arguments[a].offset;
                break;
            }
        const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(c.data) + offset;
        std::snprintf(message, sizeof message, "%s %s byte %lld of argument %s, outside the %lld "
                      "bytes it was given", kernel_name, what,
                      static_cast<long long>(address - start), name, regions[r].size - offset);
        return;
    }
    std::snprintf(message, sizeof message, "%s %s address %p, which is in none of its arguments",
                  kernel_name, what, reinterpret_cast<void*>(address));
}

static void on_signal(int signal, siginfo_t* info, void* context) {
    if (signal == SIGFPE) {
        std::snprintf(message, sizeof message, "%s: an arithmetic trap (integer division by "
                      "zero?) in a thread of block (%u, %u, %u)", kernel_name, blockIdx.x,
                      blockIdx.y, blockIdx.z);
    } else {
        const char* what = "read or wrote";
#if defined(__x86_64__)
        const ucontext_t* state = static_cast<const ucontext_t*>(context);
        what = (state->uc_mcontext.gregs[REG_ERR] & 2) ? "wrote" : "read";
#else
        (void)context;
#endif
        describe_address(what, reinterpret_cast<std::uintptr_t>(info->si_addr));
    }
    siglongjmp(escape, 1);
}

static void release_copies() {
    for (int r = 0; r < copy_count; ++r)
        if (copies[r].mapping) munmap(copies[r].mapping, copies[r].mapping_size);
    delete[] copies;
    copies = nullptr;
    copy_count = 0;
}

static void make_copies(int count, const Region* given) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    copies = new Copy[count]();
    copy_count = count;
    regions = given;
    for (int r = 0; r < count; ++r) {
        const std::size_t size = static_cast<std::size_t>(given[r].size);
        const std::size_t pages = (size + page - 1) / page;
        Copy& c = copies[r];
        c.mapping_size = (pages + 2) * page;  // a guard page before and after
        void* memory = mmap(nullptr, c.mapping_size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (memory == MAP_FAILED) fail("cannot map %zu bytes for an argument", c.mapping_size);
        c.mapping = static_cast<char*>(memory);
        mprotect(c.mapping, page, PROT_NONE);
        mprotect(c.mapping + (pages + 1) * page, page, PROT_NONE);
        c.gap = pages * page - size;
        c.data = c.mapping + page + c.gap;
        std::memset(c.mapping + page, 0xff, c.gap);
        if (size) std::memcpy(c.data, given[r].host, size);
    }
}

// after a launch: the gaps untouched, and what the kernel wrote copied back
static void return_copies() {
    for (int r = 0; r < copy_count; ++r) {
        const Copy& c = copies[r];
        const unsigned char* gap = reinterpret_cast<const unsigned char*>(c.data - c.gap);
        for (std::size_t i = 0; i < c.gap; ++i)
            if (gap[i] != 0xff) {
                describe_address("wrote", reinterpret_cast<std::uintptr_t>(gap + i));
                siglongjmp(escape, 1);
            }
        const std::size_t size = static_cast<std::size_t>(regions[r].size);
        if (!size || !std::memcmp(c.data, regions[r].host, size)) continue;
        if (!regions[r].writable) {
            std::snprintf(message, sizeof message, "%s wrote into argument %s, an array that is "
                          "read-only (a broadcast view?)", kernel_name, argument_of(r));
            siglongjmp(escape, 1);
        }
        std::memcpy(regions[r].host, c.data, size);
    }
}

template <typename... P, std::size_t... I>
static void call_with(void (*kernel)(P...), void** params, std::index_sequence<I...>) {
    kernel(*static_cast<P*>(params[I])...);
}

template <typename... P> static void invoke_as(void* kernel, void** params) {
    call_with(reinterpret_cast<void (*)(P...)>(kernel), params, std::index_sequence_for<P...>{});
}

// the traps a launch sets while it runs (on a stack of their own: a fiber's may be what
// overflowed), and what they replaced
struct SavedSignals {
    struct sigaction segv, bus, fpe;
    stack_t stack;
};

static void set_traps(SavedSignals& saved) {
    static char alternate_stack[64 * 1024];
    stack_t alternate;
    alternate.ss_sp = alternate_stack;
    alternate.ss_size = sizeof alternate_stack;
    alternate.ss_flags = 0;
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaltstack(&alternate, &saved.stack);
    sigaction(SIGSEGV, &action, &saved.segv);
    sigaction(SIGBUS, &action, &saved.bus);
    sigaction(SIGFPE, &action, &saved.fpe);
}

static void clear_traps(const SavedSignals& saved) {
    sigaction(SIGSEGV, &saved.segv, nullptr);
    sigaction(SIGBUS, &saved.bus, nullptr);
    sigaction(SIGFPE, &saved.fpe, nullptr);
    sigaltstack(&saved.stack, nullptr);
}

template <typename... P>
static int launch(void (*kernel)(P...), const char* name, const long long* config, int count,
                  const Argument* given, const char* const* names, int region_count,
                  const Region* given_regions, char* error, int error_size) {
    static const bool is_pointer[] = {std::is_pointer<P>::value..., false};
    static const std::size_t sizes[] = {sizeof(P)..., 0};
    static const int is_floating[] = {
        (std::is_floating_point<P>::value || std::is_same<P, _Float16>::value)..., 0};
    message[0] = 0;
    kernel_name = name;
    argument_names = names;
    argument_count = count;
    arguments = given;
    copies = nullptr;
    copy_count = 0;
    static SavedSignals saved;
    volatile bool handlers = false;
    void* params[sizeof...(P) + 1];
    void* pointers[sizeof...(P) + 1];
    const int outcome = sigsetjmp(escape, 1);
    if (outcome == 0) {
        if (count != static_cast<int>(sizeof...(P)))
            fail("%s takes %d arguments, given %d", name, static_cast<int>(sizeof...(P)), count);
        for (int i = 0; i < count; ++i) {
            if (is_pointer[i] != (given[i].kind == 1))
                fail("%s: argument %s is %s, but the kernel takes %s there", name, names[i],
                     given[i].kind == 1 ? "an array" : "a scalar",
                     is_pointer[i] ? "a pointer" : "a value");
            if (given[i].kind == 1) continue;
            if (static_cast<std::size_t>(given[i].size) < sizes[i])
                fail("%s: argument %s is a scalar of %lld bytes, but the kernel reads %zu there",
                     name, names[i], given[i].size, sizes[i]);
            if (given[i].floating && is_floating[i] &&
                static_cast<std::size_t>(given[i].size) != sizes[i])
                fail("%s: argument %s is a floating-point number of %lld bytes, but the kernel "
                     "takes one of %zu there", name, names[i], given[i].size, sizes[i]);
            if (given[i].floating != is_floating[i])
                fail("%s: argument %s is %s, but the kernel takes %s there", name, names[i],
                     given[i].floating ? "a floating-point number" : "an integer",
                     is_floating[i] ? "a floating-point number" : "an integer");
            if (!is_floating[i] && static_cast<std::size_t>(given[i].size) > sizes[i]) {
                long long full = 0, kept = 0;  // both as signed numbers, little-endian
                std::memcpy(&full, given[i].value, static_cast<std::size_t>(given[i].size));
                std::memcpy(&kept, given[i].value, sizes[i]);
                const int unused = 64 - 8 * static_cast<int>(sizes[i]);
                kept = static_cast<long long>(static_cast<unsigned long long>(kept) << unused) >>
                       unused;
                if (kept != full)
                    fail("%s: argument %s is %lld, which the kernel's %zu-byte parameter cannot "
                         "hold", name, names[i], full, sizes[i]);
            }
        }
        const long long threads = config[3] * config[4] * config[5];
        if (threads > 1024 || config[3] > 1024 || config[4] > 1024 || config[5] > 64 ||
            config[1] > 65535 || config[2] > 65535 || config[0] > 2147483647LL)
            fail("%s: invalid launch configuration: grid (%lld, %lld, %lld), block (%lld, %lld, "
                 "%lld)", name, config[0], config[1], config[2], config[3], config[4], config[5]);
        if (config[6] != 0) fail("%s: dynamic shared memory is not emulated", name);
        make_copies(region_count, given_regions);
        for (int i = 0; i < count; ++i) {
            if (given[i].kind == 1) {
                pointers[i] = copies[given[i].region].data + given[i].offset;
                params[i] = &pointers[i];
            } else {
                params[i] = const_cast<void*>(given[i].value);
            }
        }
        make_stacks(static_cast<unsigned int>(threads));
        invoke = &invoke_as<P...>;
        kernel_entry = reinterpret_cast<void*>(kernel);
        kernel_params = params;
        set_traps(saved);
        handlers = true;
        gridDim.x = static_cast<unsigned int>(config[0]);
        gridDim.y = static_cast<unsigned int>(config[1]);
        gridDim.z = static_cast<unsigned int>(config[2]);
        blockDim.x = static_cast<unsigned int>(config[3]);
        blockDim.y = static_cast<unsigned int>(config[4]);
        blockDim.z = static_cast<unsigned int>(config[5]);
        for (unsigned int z = 0; z < gridDim.z; ++z)
            for (unsigned int y = 0; y < gridDim.y; ++y)
                for (unsigned int x = 0; x < gridDim.x; ++x) {
                    blockIdx.x = x;
                    blockIdx.y = y;
                    blockIdx.z = z;
                    run_block(static_cast<unsigned int>(threads));
                }
        return_copies();
    }
    if (handlers) clear_traps(saved);
    release_copies();
    if (outcome != 0) {
        std::snprintf(error, static_cast<std::size_t>(error_size), "%s", message);
        return outcome;
    }
    return 0;
}

// An element-wise kernel's loop over n elements, under the same traps
template <typename Loop> static int guarded(Loop loop, const char* name, char* error,
                                            int error_size) {
    message[0] = 0;
    kernel_name = name;
    copy_count = 0;
    static SavedSignals saved;
    set_traps(saved);
    const int outcome = sigsetjmp(escape, 1);
    if (outcome == 0) loop();
    clear_traps(saved);
    if (outcome != 0) std::snprintf(error, static_cast<std::size_t>(error_size), "%s", message);
    return outcome;
}

}  // namespace cuda_on_cpu

#define CUDA_ON_CPU_EXPORT extern "C" __attribute__((visibility("default")))

#endif
