#pragma once
/// \file
/// Every kernel of the backend concept's families as one table row: its signature and, for each pointer,
/// how many elements the kernel touches from it. Code that must restate every kernel is generated from
/// these rows instead: the opaque backend's range-checked forwarders (backend/opaque.hpp) and the
/// archetype backends of the tests. A kernel added to a family is one row here (with its concept's
/// `requires` line in backend.hpp and its code in each backend's file of that family).
///
/// `DTRAIN_<FAMILY>_KERNELS(K)` calls `K(head, targs, result, name, params...)` once per kernel:
/// - `head`, `targs`: the template head and arguments in parentheses, `(template <window_geometry G>)`
///   and `(<G>)`, or `()` and `()`;
/// - `result`, `name`: the return type and the member's name;
/// - each parameter in parentheses: `(V, type, name)` a value, `(P, element, name, extent)` a backend
///   pointer to `element` of which the kernel touches `extent` elements (0 where it reads nothing
///   through it, as for a pointer the kernel allows to be null). An extent is an expression of the
///   parameters; it may call `matrix(t, rows, cols, ld)` (the span of a row-major operand) and, for
///   kernels whose reach depends on index data, the generator's helpers (`embedding_rows`,
///   `embedding_dy_rows`: only opaque evaluates extents, and it defines them).
/// `DTRAIN_KERNEL_TABLE_MAP(M, c, params...)` applies `M(c, param)` to each parameter, comma-separated.

// ---- preprocessor helpers -------------------------------------------------------------------------------
#define DTRAIN_KERNEL_TABLE_UNPACK(...) __VA_ARGS__
#define DTRAIN_KERNEL_TABLE_CAT(a, b) DTRAIN_KERNEL_TABLE_CAT_(a, b)
#define DTRAIN_KERNEL_TABLE_CAT_(a, b) a##b
#define DTRAIN_KERNEL_TABLE_COUNT(...) \
  DTRAIN_KERNEL_TABLE_COUNT_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define DTRAIN_KERNEL_TABLE_COUNT_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, n, ...) n
#define DTRAIN_KERNEL_TABLE_MAP(M, c, ...) \
  DTRAIN_KERNEL_TABLE_CAT(DTRAIN_KERNEL_TABLE_MAP_, DTRAIN_KERNEL_TABLE_COUNT(__VA_ARGS__))(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_1(M, c, a) M(c, a)
#define DTRAIN_KERNEL_TABLE_MAP_2(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_1(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_3(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_2(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_4(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_3(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_5(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_4(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_6(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_5(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_7(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_6(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_8(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_7(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_9(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_8(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_10(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_9(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_11(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_10(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_12(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_11(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_13(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_12(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_14(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_13(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_15(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_14(M, c, __VA_ARGS__)
#define DTRAIN_KERNEL_TABLE_MAP_16(M, c, a, ...) M(c, a), DTRAIN_KERNEL_TABLE_MAP_15(M, c, __VA_ARGS__)

/// A parameter's declaration (`type name`, `pointer<element> name`) and its type alone.
#define DTRAIN_KERNEL_PARAM(c, p) DTRAIN_KERNEL_PARAM_(DTRAIN_KERNEL_TABLE_UNPACK p)
#define DTRAIN_KERNEL_PARAM_(...) DTRAIN_KERNEL_PARAM__(__VA_ARGS__)
#define DTRAIN_KERNEL_PARAM__(kind, ...) DTRAIN_KERNEL_TABLE_CAT(DTRAIN_KERNEL_PARAM_, kind)(__VA_ARGS__)
#define DTRAIN_KERNEL_PARAM_V(type, name) type name
#define DTRAIN_KERNEL_PARAM_P(element, name, extent) pointer<element> name
#define DTRAIN_KERNEL_TYPE(c, p) DTRAIN_KERNEL_TYPE_(DTRAIN_KERNEL_TABLE_UNPACK p)
#define DTRAIN_KERNEL_TYPE_(...) DTRAIN_KERNEL_TYPE__(__VA_ARGS__)
#define DTRAIN_KERNEL_TYPE__(kind, ...) DTRAIN_KERNEL_TABLE_CAT(DTRAIN_KERNEL_TYPE_, kind)(__VA_ARGS__)
#define DTRAIN_KERNEL_TYPE_V(type, name) type
#define DTRAIN_KERNEL_TYPE_P(element, name, extent) pointer<element>

// ---- the families ---------------------------------------------------------------------------------------
// clang-format off
#define DTRAIN_BLAS_KERNELS(K)                                                                                 \
  K((), (), void, fill, (V, std::size_t, n), (V, float, value), (P, float, x, n))                             \
  K((), (), void, copy, (V, std::size_t, n), (P, const float, x, n), (P, float, y, n))                        \
  K((), (), void, copy_columns, (V, std::size_t, rows), (V, std::size_t, cols),                               \
    (P, const float, x, matrix(transpose::no, rows, cols, ldx)), (V, std::size_t, ldx),                       \
    (P, float, y, matrix(transpose::no, rows, cols, ldy)), (V, std::size_t, ldy))                             \
  K((), (), void, transpose_matrix, (V, std::size_t, rows), (V, std::size_t, cols),                           \
    (P, const float, x, matrix(transpose::no, rows, cols, ldx)), (V, std::size_t, ldx),                       \
    (P, float, y, matrix(transpose::no, cols, rows, ldy)), (V, std::size_t, ldy))                             \
  K((), (), void, axpy, (V, std::size_t, n), (V, float, alpha), (P, const float, x, n), (P, float, y, n))     \
  K((), (), void, multiply, (V, std::size_t, n), (P, const float, x, n), (P, const float, y, n),              \
    (P, float, z, n))                                                                                         \
  K((), (), void, gemm, (V, transpose, ta), (V, transpose, tb), (V, std::size_t, m), (V, std::size_t, n),     \
    (V, std::size_t, k), (V, float, alpha), (P, const float, a, (n ? matrix(ta, m, k, lda) : 0)),             \
    (V, std::size_t, lda), (P, const float, b, (m ? matrix(tb, k, n, ldb) : 0)), (V, std::size_t, ldb),       \
    (V, float, beta), (P, float, c, matrix(transpose::no, m, n, ldc)), (V, std::size_t, ldc))                 \
  K((), (), void, broadcast_rows, (V, std::size_t, rows), (V, std::size_t, cols), (P, const float, x, cols),  \
    (P, float, y, rows * cols))                                                                               \
  K((), (), void, column_sums, (V, std::size_t, rows), (V, std::size_t, cols),                                \
    (P, const float, x, rows * cols), (P, float, y, cols))                                                    \
  K((), (), void, sum, (V, std::size_t, n), (P, const float, x, n), (P, float, out, 1))                       \
  K((), (), void, round_to, (V, std::size_t, n), (V, dtype, to), (P, const float, x, n), (P, float, y, n))   \
  K((), (), void, scale, (V, std::size_t, n), (V, float, alpha), (P, float, x, n))                           \
  K((), (), void, clip, (V, std::size_t, n), (V, float, lo), (V, float, hi), (P, float, x, n))

#define DTRAIN_ACTIVATION_KERNELS(K)                                                                           \
  K((template <activation_kind A>), (<A>), void, activation_forward, (V, std::size_t, rows),                  \
    (V, std::size_t, cols), (P, const float, x, rows * cols), (P, float, y, rows * cols))                     \
  K((template <activation_kind A>), (<A>), void, activation_backward, (V, std::size_t, rows),                 \
    (V, std::size_t, cols), (P, const float, z, (needs_input(A) ? rows * cols : 0)),                          \
    (P, const float, y, rows * cols), (P, const float, dy, rows * cols), (P, float, dx, rows * cols))         \
  K((), (), void, leaky_relu_forward, (V, std::size_t, n), (V, float, slope), (P, const float, x, n),         \
    (P, float, y, n))                                                                                         \
  K((), (), void, leaky_relu_backward, (V, std::size_t, n), (V, float, slope), (P, const float, x, n),        \
    (P, const float, dy, n), (P, float, dx, n))

#define DTRAIN_WINDOW_KERNELS(K)                                                                               \
  K((template <window_geometry G>), (<G>), std::size_t, conv2d_workspace, (V, std::size_t, n))                \
  K((template <window_geometry G>), (<G>), std::size_t, conv2d_backward_workspace, (V, std::size_t, n),       \
    (V, bool, input_gradient))                                                                                \
  K((template <window_geometry G, activation_kind A>), (<G, A>), void, conv2d_forward, (V, std::size_t, n),   \
    (P, const float, x, n * G.in_size()), (P, const float, w, G.kernel_values()), (P, const float, b, (b ? G.f : 0)), \
    (P, float, y, n * G.out_size()), (P, float, z, (needs_input(A) ? n * G.out_size() : 0)),                  \
    (P, float, work, conv2d_workspace<G>(n)))                                                                 \
  K((template <window_geometry G, activation_kind A>), (<G, A>), void, conv2d_backward, (V, std::size_t, n),  \
    (P, const float, z, (needs_input(A) ? n * G.out_size() : 0)), (P, const float, y, n * G.out_size()),      \
    (P, float, dy, n * G.out_size()), (P, const float, w, G.kernel_values()),                                    \
    (P, const float, work, conv2d_workspace<G>(n)), (P, float, scratch, conv2d_backward_workspace<G>(n, bool(dx))), \
    (P, float, gw, G.kernel_values()), (P, float, gb, (gb ? G.f : 0)), (P, float, dx, (dx ? n * G.in_size() : 0))) \
  K((template <window_geometry G>), (<G>), std::size_t, conv2d_transpose_workspace, (V, std::size_t, n))      \
  K((template <window_geometry G, activation_kind A>), (<G, A>), void, conv2d_transpose_forward,              \
    (V, std::size_t, n), (P, const float, x, n * G.out_size()), (P, const float, w, G.kernel_values()),       \
    (P, const float, b, (b ? G.c : 0)), (P, float, y, n * G.in_size()),                                       \
    (P, float, z, (needs_input(A) ? n * G.in_size() : 0)), (P, float, work, conv2d_transpose_workspace<G>(n))) \
  K((template <window_geometry G, activation_kind A>), (<G, A>), void, conv2d_transpose_backward,             \
    (V, std::size_t, n), (P, const float, x, n * G.out_size()),                                               \
    (P, const float, z, (needs_input(A) ? n * G.in_size() : 0)), (P, const float, y, n * G.in_size()),        \
    (P, float, dy, n * G.in_size()), (P, const float, w, G.kernel_values()),                                  \
    (P, float, work, conv2d_transpose_workspace<G>(n)), (P, float, gw, G.kernel_values()),                    \
    (P, float, gb, (gb ? G.c : 0)), (P, float, dx, (dx ? n * G.out_size() : 0)))                              \
  K((template <window_geometry G>), (<G>), void, depthwise_conv2d_forward, (V, std::size_t, n),               \
    (P, const float, x, n * G.in_size()), (P, const float, w, G.kh * G.kw * G.f),                             \
    (P, const float, b, (b ? G.f : 0)), (P, float, y, n * G.out_size()))                                      \
  K((template <window_geometry G>), (<G>), void, depthwise_conv2d_backward, (V, std::size_t, n),              \
    (P, const float, x, n * G.in_size()), (P, const float, w, G.kh * G.kw * G.f),                             \
    (P, const float, dy, n * G.out_size()), (P, float, gw, G.kh * G.kw * G.f),                                \
    (P, float, dx, (dx ? n * G.in_size() : 0)))                                                               \
  K((template <window_geometry G>), (<G>), void, max_pooling2d_forward, (V, std::size_t, n),                  \
    (P, const float, x, n * G.in_size()), (P, float, y, n * G.out_size()),                                    \
    (P, std::uint32_t, argmax, n * G.out_size()))                                                             \
  K((template <window_geometry G>), (<G>), void, max_pooling2d_backward, (V, std::size_t, n),                 \
    (P, const float, dy, n * G.out_size()), (P, const std::uint32_t, argmax, n * G.out_size()),               \
    (P, float, dx, n * G.in_size()))                                                                          \
  K((template <window_geometry G>), (<G>), void, average_pooling2d_forward, (V, std::size_t, n),              \
    (P, const float, x, n * G.in_size()), (P, float, y, n * G.out_size()))                                    \
  K((template <window_geometry G>), (<G>), void, average_pooling2d_backward, (V, std::size_t, n),             \
    (P, const float, dy, n * G.out_size()), (P, float, dx, n * G.in_size()))                                  \
  K((template <window_geometry G>), (<G>), void, zero_padding2d_forward, (V, std::size_t, n),                 \
    (P, const float, x, n * G.in_size()), (P, float, y, n * G.out_size()))                                    \
  K((template <window_geometry G>), (<G>), void, zero_padding2d_backward, (V, std::size_t, n),                \
    (P, const float, dy, n * G.out_size()), (P, float, dx, n * G.in_size()))                                  \
  K((template <window_geometry G>), (<G>), void, up_sampling2d_forward, (V, std::size_t, n),                  \
    (P, const float, x, n * G.in_size()), (P, float, y, n * G.out_size()))                                    \
  K((template <window_geometry G>), (<G>), void, up_sampling2d_backward, (V, std::size_t, n),                 \
    (P, const float, dy, n * G.out_size()), (P, float, dx, n * G.in_size()))

#define DTRAIN_NORMALIZATION_KERNELS(K)                                                                        \
  K((), (), void, layer_normalization_forward, (V, std::size_t, rows), (V, std::size_t, cols),                \
    (V, float, epsilon), (P, const float, x, rows * cols), (P, const float, gamma, cols),                     \
    (P, const float, beta, cols), (P, float, y, rows * cols), (P, float, xhat, rows * cols),                  \
    (P, float, inv_std, rows))                                                                                \
  K((), (), void, layer_normalization_backward, (V, std::size_t, rows), (V, std::size_t, cols),               \
    (P, const float, xhat, rows * cols), (P, const float, inv_std, rows), (P, const float, gamma, cols),       \
    (P, const float, dy, rows * cols), (P, float, dx, rows * cols))                                           \
  K((), (), void, squared_deviation_sums, (V, std::size_t, rows), (V, std::size_t, cols),                     \
    (P, const float, x, rows * cols), (P, const float, mean, cols), (P, float, out, cols))                    \
  K((), (), void, moving_average, (V, std::size_t, n), (V, float, momentum), (P, const float, value, n),      \
    (P, float, average, n))                                                                                   \
  K((), (), void, batch_normalization_forward, (V, std::size_t, rows), (V, std::size_t, cols),                \
    (V, float, epsilon), (P, const float, x, rows * cols), (P, const float, mean, cols),                       \
    (P, const float, variance, cols), (P, const float, gamma, cols), (P, const float, beta, cols),            \
    (P, float, y, rows * cols), (P, float, xhat, (xhat ? rows * cols : 0)), (P, float, inv_std, cols))        \
  K((), (), void, batch_normalization_gradient_sums, (V, std::size_t, rows), (V, std::size_t, cols),          \
    (P, const float, dy, rows * cols), (P, const float, xhat, rows * cols), (P, float, sums, 2 * cols))       \
  K((), (), void, batch_normalization_backward, (V, std::size_t, rows), (V, std::size_t, cols),               \
    (V, float, inv_count), (P, const float, xhat, (sums ? rows * cols : 0)), (P, const float, inv_std, cols),  \
    (P, const float, gamma, cols), (P, const float, sums, (sums ? 2 * cols : 0)),                             \
    (P, const float, dy, rows * cols), (P, float, dx, rows * cols))

#define DTRAIN_EMBEDDING_KERNELS(K)                                                                            \
  K((), (), void, embedding_forward, (V, std::size_t, rows), (V, std::size_t, dim), (V, std::size_t, vocab),  \
    (P, const float, x, rows), (P, const float, table, vocab * dim), (P, float, y, rows * dim))               \
  K((), (), void, embedding_backward, (V, std::size_t, vocab), (V, std::size_t, dim),                         \
    (P, const std::uint32_t, order, embedding_rows(starts, vocab)), (P, const std::uint32_t, starts, vocab + 1), \
    (P, const float, dy, embedding_dy_rows(order, starts, vocab) * dim), (P, float, grad, vocab * dim))

#define DTRAIN_REGULARIZATION_KERNELS(K)                                                                       \
  K((), (), void, dropout, (V, std::size_t, n), (V, float, rate), (V, std::uint64_t, key),                    \
    (P, const float, x, n), (P, float, y, n), (P, float, mask, n))                                            \
  K((), (), void, l2, (V, std::size_t, n), (V, float, factor), (V, float, scale), (P, const float, w, n),     \
    (P, float, g, (g ? n : 0)), (P, float, penalty, 1))                                                       \
  K((), (), void, l1, (V, std::size_t, n), (V, float, factor), (V, float, scale), (P, const float, w, n),     \
    (P, float, g, (g ? n : 0)), (P, float, penalty, 1))

#define DTRAIN_LOSS_KERNELS(K)                                                                                 \
  K((template <class Op>), (), void, loss, (V, const Op&, o), (V, std::size_t, rows), (V, std::size_t, cols), \
    (V, float, scale),                                                                                        \
    (P, const float, y_true, (op::class_index_targets<Op> ? rows : rows * cols)),                            \
    (P, const float, y_pred, rows * cols), (P, float, losses, rows), (P, float, d, (d ? rows * cols : 0)))    \
  K((template <class Op>), (), void, metric, (V, const Op&, o), (V, std::size_t, rows), (V, std::size_t, cols), \
    (P, const float, y_true, (op::class_index_targets<Op> ? rows : rows * cols)),                             \
    (P, const float, y_pred, rows * cols), (P, float, out, 1))

#define DTRAIN_UPDATE_KERNELS(K)                                                                               \
  K((template <class Op>), (), void, update, (V, const Op&, o), (V, std::size_t, n), (P, const float, g, n),  \
    (P, float, slots, slot_count(o) * n), (P, float, p, n))
// clang-format on

/// Every family, in the contract's order.
#define DTRAIN_ALL_KERNELS(K)                                                                            \
  DTRAIN_BLAS_KERNELS(K)                                                                                 \
  DTRAIN_ACTIVATION_KERNELS(K)                                                                           \
  DTRAIN_WINDOW_KERNELS(K)                                                                               \
  DTRAIN_NORMALIZATION_KERNELS(K)                                                                        \
  DTRAIN_EMBEDDING_KERNELS(K)                                                                            \
  DTRAIN_REGULARIZATION_KERNELS(K) DTRAIN_LOSS_KERNELS(K) DTRAIN_UPDATE_KERNELS(K)
