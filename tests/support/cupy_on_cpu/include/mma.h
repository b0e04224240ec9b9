// mma.h for the CPU harness: CUDA's warp matrix multiply API (nvcuda::wmma) on the fibers of
// cuda_on_cpu.h, which comes before it.
//
// A fragment holds its whole matrix in every lane (on a GPU each lane holds a share, in a
// layout CUDA leaves unspecified: a kernel may only fill, load, store and multiply them, and
// apply one operation to every element). Each call is warp-synchronous, as CUDA requires:
// every lane of the warp must reach it, in step (the harness stops a launch whose lanes
// diverge), and it checks what CUDA requires of its arguments: a pointer aligned to 256 bits
// and a leading dimension a multiple of 16 bytes. load_matrix_sync reads the whole matrix in
// every lane; store_matrix_sync writes only the lane's share of it (element e by lane e % 32),
// so a kernel that reads what a store wrote before the warp (or the block) synchronises reads
// what was there before, as it would on a GPU. mma_sync sums in the accumulator's type.
#ifndef TSPEC_CUDA_ON_CPU_MMA_H
#define TSPEC_CUDA_ON_CPU_MMA_H

#include <cuda_fp16.h>

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> {
    static const int rows = M, cols = K;
};
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> {
    static const int rows = K, cols = N;
};
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> {
    static const int rows = M, cols = N;
};

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static const int rows = shape_of<Use, M, N, K>::rows, cols = shape_of<Use, M, N, K>::cols;
    static const int num_elements = rows * cols;
    typedef T element_type;
    T x[rows * cols];                          // row by row
};

namespace detail {

inline void check(const char* call, const void* pointer, unsigned ldm, std::size_t item) {
    __syncwarp();                              // every lane, in step
    if (reinterpret_cast<std::uintptr_t>(pointer) % 32 != 0)
        cuda_on_cpu::fail("%s: pointer %p is not aligned to 256 bits", call, pointer);
    if (ldm * item % 16 != 0)
        cuda_on_cpu::fail("%s: leading dimension %u is not a multiple of 16 bytes", call, ldm);
}

template <typename T> inline float wide(T value) { return static_cast<float>(value); }

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const V& value) {
    __syncwarp();
    for (int e = 0; e < f.num_elements; ++e) f.x[e] = static_cast<T>(value);
}

// a matrix_a or matrix_b fragment, its layout in memory its own
template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
    detail::check("load_matrix_sync", p, ldm, sizeof(T));
    const bool by_rows = std::is_same<Layout, row_major>::value;
    for (int r = 0; r < f.rows; ++r)
        for (int c = 0; c < f.cols; ++c)
            f.x[r * f.cols + c] = by_rows ? p[r * ldm + c] : p[c * ldm + r];
}

// an accumulator, its layout in memory given
template <int M, int N, int K, typename T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm,
                             layout_t layout) {
    detail::check("load_matrix_sync", p, ldm, sizeof(T));
    for (int r = 0; r < f.rows; ++r)
        for (int c = 0; c < f.cols; ++c)
            f.x[r * f.cols + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

template <int M, int N, int K, typename T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                              layout_t layout) {
    detail::check("store_matrix_sync", p, ldm, sizeof(T));
    const unsigned lane = cuda_on_cpu::current->lane;
    for (int e = static_cast<int>(lane); e < f.num_elements; e += 32) {
        const int r = e / f.cols, c = e % f.cols;
        (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
    }
}

template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
inline void mma_sync(fragment<accumulator, M, N, K, TC>& d,
                     const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b,
                     const fragment<accumulator, M, N, K, TC>& c) {
    __syncwarp();
    TC result[M * N];
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            TC sum = c.x[i * N + j];
            for (int l = 0; l < K; ++l)
                sum += static_cast<TC>(detail::wide(a.x[i * K + l])) *
                       static_cast<TC>(detail::wide(b.x[l * N + j]));
            result[i * N + j] = sum;
        }
    for (int e = 0; e < M * N; ++e) d.x[e] = result[e];
}

}  // namespace wmma
}  // namespace nvcuda

#endif
