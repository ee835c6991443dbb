/* ddprt-bench-kernels --device cuda: wt_gemm's tiles measured. The TMA GEMM picks its tile
 * N by a rule (kernels/cuda/k_cuda_tc_tma.cuh's wt_tile_n: 256 where the wide tiles fill
 * the GPU in no more waves, 64 where N <= 64, else 128) that no GPU has checked yet. Every
 * tile adds the same k16 steps in the same order (the same sums), so the table times each
 * product at each tile (k_cuda_tma_set_tile) beside cuBLAS: GPT-2 124M's linear products
 * at batch 8 x T 1024 (qkv, the attention's projection, the MLP's two, the logits; the
 * forward on k-contiguous operands, the MLP's dX and dW on M/N-contiguous ones) and 4096^3.
 * The rule's choice is marked "<-". With TMA on only (DDPRT_TMA: wt_gemm). */
#include "apps/bench-kernels/k_cuda_bench.h"
#include "kernels/cuda/k_cuda.h"
#include <stdio.h>

typedef struct gt_ctx {
    k_tc_gemm g;
} gt_ctx;
static int gt_ours(void *c_) { return k_cuda_tc_gemm(&((gt_ctx *)c_)->g, kb_S); }
static int gt_blas(void *c_) { return kb_tc_blas(&((gt_ctx *)c_)->g); }

static void gemm_tiles(const char *name, int m, int n, int k, int a_kfast, int b_kfast)
{
    void *a, *b;
    float *c;
    if (port_dev_malloc(&a, (size_t)m * k * 2 + 256, "tile A") || port_dev_malloc(&b, (size_t)n * k * 2 + 256, "tile B"))
        return;
    float *f = kb_dbuf((size_t)(m > n ? m : n) * k); /* uniform in [-1, 1), rounded to bf16 */
    if (!f || !(c = kb_dbuf((size_t)m * n))) return;
    k_cuda_f32_to_bf16((size_t)m * k, f, a, kb_S), k_cuda_f32_to_bf16((size_t)n * k, f, b, kb_S);
    gt_ctx x = {.g = {.type = K_CUDA_MM_BF16, .m = m, .n = n, .k = k, .a = a, .b = b,
                      .lda = a_kfast ? k : m, .ldb = b_kfast ? k : n, .a_kfast = a_kfast, .b_kfast = b_kfast,
                      .c = c, .ldc = n}};
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%dx%d %s%s", m, n, k, a_kfast ? "K" : "M", b_kfast ? "K" : "N");
    double flop = 2.0 * m * n * k, ref = kb_ref.gemm_ex ? kb_time_us(gt_blas, &x) : -1;
    static const int tiles[] = {64, 128, 256};
    const int rule = k_cuda_tma_rule_tile(m, n);
    for (int i = 0; i < 3; i++) {
        if (tiles[i] == 64 && n > 128) continue; /* a narrow tile on wide products: 2x the A reads */
        char row[48];
        int old = k_cuda_tma_set_tile(tiles[i]);
        snprintf(row, sizeof row, "%s TMA 128x%d%s", name, tiles[i], rule == tiles[i] ? " <-" : "");
        kb_tc_row(row, shape, kb_time_us(gt_ours, &x), flop, ref, K_CUDA_MM_BF16);
        k_cuda_tma_set_tile(old);
    }
    port_dev_free(a), port_dev_free(b), port_dev_free(c), port_dev_free(f);
}

void kb_gemm_tiles(int smoke)
{
    if (!k_cuda_tma_on()) return;
    if (smoke) { /* edge tiles: the table's code on the executor */
        gemm_tiles("smoke", 200, 264, 72, 1, 1);
        return;
    }
    printf("# wt_gemm's tiles (bf16, fp32 out; \"<-\": the tile its rule takes; reference: cuBLAS, bf16 in, fp32 "
           "compute and out)\n");
    const int bt = 8 * 1024;
    gemm_tiles("qkv", bt, 2304, 768, 1, 1);
    gemm_tiles("attn proj", bt, 768, 768, 1, 1);
    gemm_tiles("mlp fc", bt, 3072, 768, 1, 1);
    gemm_tiles("mlp proj", bt, 768, 3072, 1, 1);
    gemm_tiles("mlp fc dX", bt, 768, 3072, 1, 0);
    gemm_tiles("mlp fc dW", 3072, 768, bt, 0, 0);
    gemm_tiles("logits", bt, 50257, 768, 1, 1);
    gemm_tiles("square", 4096, 4096, 4096, 1, 1);
}
