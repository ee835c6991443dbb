/* k_gemm.c's GEMMs, one template per ISA level (rt/isa_each.h; vector ops: k_kv.h).
 * The micro-tiles per level:
 *   KT_MR x KT_NV   NN: rows of A x vectors of B's row (AVX-512 12x2, AVX2 6x2 = BLIS's
 *                   6x16 Haswell shape, 12 sums in 16 ymm, generic 6x2)
 *   KT_TM x KT_TN   NT: rows of A x rows of B (4x6, 4x3, 3x3); KT_NT_55: also 5x5 tiles;
 *                   KT_NT_BFIRST: the tile's B rows held in registers and A streamed
 *                   (16 registers: 4x3 needs 12 sums + 3 B + 1 A; A first would need 17) */
#include "kernels/cpu/k_kv.h"
#if ISA_X86 && ISA_VB == 64
#define KT_MR 12
#define KT_TM 4
#define KT_TN 6
#define KT_NT_55 1
#elif ISA_X86 && ISA_VB == 32
#define KT_MR 6
#define KT_TM 4
#define KT_TN 3
#define KT_NT_BFIRST 1
#else
#define KT_MR 6
#define KT_TM 3
#define KT_TN 3
#endif
#define KT_NV 2

/* ---------------------------------------------------------------- GEMM, NN form.
 * Micro-kernel: C[mr x nc] for nc <= KT_NV*KV_W columns, over kk steps, reading a
 * packed A panel ap[k*KT_MR + i]. `full` = all KT_NV vectors complete (no masks). */
KT_INL void ISA_FN(ukr_nn)(const int mr, const int full, int nc, int kk, const float *ap,
                       const float *b, long ldb, const long *boff, float *c, long ldc,
                       const float *bias, int acc)
{
    const float *b0 = b;
    kv s[12][2];
    int cnt[2];
#pragma GCC unroll 2
    for (int v = 0; v < KT_NV; v++) {
        int r = nc - v * KV_W;
        cnt[v] = r < 0 ? 0 : r > KV_W ? KV_W : r;
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) {
            float *cp = c + i * ldc + v * KV_W;
            if (acc) s[i][v] = full ? kv_load(cp) : kv_loadn(cp, cnt[v]);
            else s[i][v] = bias ? kv_set1(bias[i]) : kv_zero();
        }
    }
    /* One k step: B's row at bk. Two loops (rows at tap offsets, rows ldb apart), each
     * unrolled by 2 on AVX2, rather than testing boff in the loop: the loop's integer
     * work shares ports 0/1 with the FMAs (16 ymm leave no room for a wider tile). */
#define KT_NN_STEP(bk)                                                                                          \
    do {                                                                                                        \
        kv bv[2];                                                                                               \
        _Pragma("GCC unroll 2") for (int v = 0; v < KT_NV; v++) bv[v] =                                         \
            full ? kv_load((bk) + v * KV_W) : kv_loadn((bk) + v * KV_W, cnt[v]);                                \
        _Pragma("GCC unroll 12") for (int i = 0; i < mr; i++)                                                   \
        {                                                                                                       \
            kv a = kv_set1(ap[i]);                                                                              \
            _Pragma("GCC unroll 2") for (int v = 0; v < KT_NV; v++) s[i][v] = kv_fma(a, bv[v], s[i][v]);        \
        }                                                                                                       \
        ap += KT_MR;                                                                                            \
    } while (0)
    if (boff) {
#if ISA_X86 && ISA_VB == 32
#pragma GCC unroll 2
#endif
        for (int k = 0; k < kk; k++) KT_NN_STEP(b0 + boff[k]); /* row k of B at an arbitrary offset (conv taps) */
    } else {
#if ISA_X86 && ISA_VB == 32
#pragma GCC unroll 2
#endif
        for (int k = 0; k < kk; k++, b += ldb) KT_NN_STEP(b);
    }
#undef KT_NN_STEP
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
#pragma GCC unroll 2
        for (int v = 0; v < KT_NV; v++) {
            float *cp = c + i * ldc + v * KV_W;
            if (full) kv_store(cp, s[i][v]);
            else if (cnt[v]) kv_storen(cp, s[i][v], cnt[v]);
        }
    }
}

#define KT_NN_CASE(M)                                                                   \
    case M:                                                                             \
        if (full) ISA_FN(ukr_nn)(M, 1, nc, kk, ap, b, ldb, boff, c, ldc, bias, acc);        \
        else ISA_FN(ukr_nn)(M, 0, nc, kk, ap, b, ldb, boff, c, ldc, bias, acc);             \
        break;

ISA_TARGET static void ISA_FN(ukr_nn_any)(int mr, int nc, int kk, const float *ap, const float *b,
                                     long ldb, const long *boff, float *c, long ldc,
                                     const float *bias, int acc)
{
    int full = nc == KT_NV * KV_W;
    switch (mr) {
    KT_NN_CASE(1) KT_NN_CASE(2) KT_NN_CASE(3) KT_NN_CASE(4) KT_NN_CASE(5) KT_NN_CASE(6)
#if KT_MR > 6
    KT_NN_CASE(7) KT_NN_CASE(8) KT_NN_CASE(9) KT_NN_CASE(10) KT_NN_CASE(11) KT_NN_CASE(12)
#endif
    default: break;
    }
}

/* B's kc rows (ldb floats apart) x columns [0, n) into panels of
 * cw = KT_NV*KV_W columns, bp[(j0/cw)*kc*cw + k*cw + j] (lanes past n left as they are:
 * the micro-kernel's masks never read them), so that the micro-kernel reads a panel
 * with ldb = cw. Unpacked, B's rows are ldb floats apart (4-6 KiB for GPT's widths):
 * a kc-row panel touches kc pages and few cache sets (the old loop ran 1024^3 at
 * 112 GFLOP/s, 169 with B all on one physical page, 128 with ldb padded to 1040). */
ISA_TARGET static void ISA_FN(pack_b)(int kc, int n, const float *b, long ldb, float *bp)
{
    const int cw = KT_NV * KV_W;
    for (int k = 0; k < kc; k++) {
        const float *r = b + (long)k * ldb;
        float *o = bp + (long)k * cw;
        int j0 = 0;
        for (; j0 + cw <= n; j0 += cw, o += (long)kc * cw)
            for (int v = 0; v < KT_NV; v++) kv_store(o + v * KV_W, kv_load(r + j0 + v * KV_W));
        for (int v = 0; v < KT_NV && j0 + v * KV_W < n; v++) {
            int t = n - j0 - v * KV_W;
            if (t >= KV_W) kv_store(o + v * KV_W, kv_load(r + j0 + v * KV_W));
            else kv_storen(o + v * KV_W, kv_loadn(r + j0 + v * KV_W, t), t);
        }
    }
}

/* Cache blocking around the micro-kernel (BLIS's loops): B (for convs, the shifted
 * rows read through tap offsets) in blocks of KT_KB rows x KT_NB columns that stay in
 * L2 while every row block of A passes over them; each A panel slice (KT_KB x KT_MR)
 * stays in L1 across the block's column tiles. Without it, a B larger than L2
 * (ResNet-18's 56x56 convs: 2.5 MB per image) streamed from L3 once per row block.
 * Every C element still sees the same FMAs in the same k order (C is stored and
 * reloaded exactly between k blocks): the bits do not depend on the blocking. */
#define KT_KB 256
#define KT_NB 128
/* pf: pfn bytes to fetch into L2 (k_gemm_nn_packed_pf), spread evenly over the
 * micro-tiles: a burst would fill the miss buffers and stall the tiles behind it. */
#define KT_PF_STEP(per)                                                                  \
    for (int t_ = 0; t_ < (per) && pfn > 0; t_++, pf = (const char *)pf + 64, pfn -= 64) \
        __builtin_prefetch(pf, 0, 2)
ISA_TARGET static void ISA_FN(gemm_nn_packed)(int m, int n, int kk, const float *ap, const float *b,
                                         long ldb, const long *boff, float *c, long ldc,
                                         const float *bias, int acc, const void *pf, long pfn)
{
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR;
    long tiles = (long)((kk + KT_KB - 1) / KT_KB) * nmb * ((n + cw - 1) / cw);
    int per = pfn > 0 ? (int)((pfn / 64 + tiles) / tiles) : 0;
    for (int k0 = 0; k0 < kk; k0 += KT_KB) {
        int kc = kk - k0 < KT_KB ? kk - k0 : KT_KB, acc_k = acc || k0 > 0;
        const float *bias_k = k0 > 0 ? NULL : bias, *bk = boff ? b : b + (long)k0 * ldb;
        const long *ok = boff ? boff + k0 : NULL;
        for (int jb = 0; jb < n; jb += KT_NB) {
            int je = n - jb < KT_NB ? n : jb + KT_NB;
            for (int ib = 0; ib < nmb; ib++) {
                int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                const float *apk = ap + ((long)ib * kk + k0) * KT_MR;
                for (int j0 = jb; j0 < je; j0 += cw) {
                    int nc = je - j0 < cw ? je - j0 : cw;
                    KT_PF_STEP(per);
                    ISA_FN(ukr_nn_any)(mr, nc, kc, apk, bk + j0, ldb, ok, c + (long)i0 * ldc + j0, ldc,
                                   bias_k ? bias_k + i0 : NULL, acc_k);
                }
            }
        }
    }
}

/* Rows [i0, i0+mr) of A, K steps [k0, k0+kc), into a panel ap[k*KT_MR + i] (lanes
 * i >= mr are left as they are: the micro-kernel never reads them). Pure data
 * movement, so the bits are those of the scalar copy; the common layouts move whole
 * vectors: acs == 1 (rows contiguous, e.g. activations x W) as 8x8 transposes,
 * ars == 1 (columns contiguous, e.g. x^T for dW) as row copies. */
ISA_TARGET static void ISA_FN(pack_panel)(int mr, int kc, const float *a, long ars, long acs, float *ap)
{
    int k = 0;
#if ISA_X86 && ISA_VB >= 32 && defined(K_TR8)
    if (acs == 1) {
        for (; k + 8 <= kc; k += 8)
            for (int r0 = 0; r0 < mr; r0 += 8) {
                int nr = mr - r0 < 8 ? mr - r0 : 8;
                if (nr == 4) { /* rows 8-11 of AVX-512's full 12-row panels: a 4x8 transpose */
                    const float *s0 = a + (long)r0 * ars + k;
                    __m256 r8 = _mm256_loadu_ps(s0), r9 = _mm256_loadu_ps(s0 + ars),
                           r10 = _mm256_loadu_ps(s0 + 2 * ars), r11 = _mm256_loadu_ps(s0 + 3 * ars);
                    __m256 t0 = _mm256_unpacklo_ps(r8, r9), t1 = _mm256_unpackhi_ps(r8, r9),
                           t2 = _mm256_unpacklo_ps(r10, r11), t3 = _mm256_unpackhi_ps(r10, r11);
                    __m256 u[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xee),
                                   _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xee)};
                    float *o = ap + (long)k * KT_MR + r0;
                    for (int q = 0; q < 4; q++) {
                        _mm_storeu_ps(o + q * KT_MR, _mm256_castps256_ps128(u[q]));
                        _mm_storeu_ps(o + (q + 4) * KT_MR, _mm256_extractf128_ps(u[q], 1));
                    }
                    continue;
                }
                __m256 v[8];
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    v[i] = i < nr ? _mm256_loadu_ps(a + (long)(r0 + i) * ars + k) : _mm256_setzero_ps();
                k_tr8(v);
                float *o = ap + (long)k * KT_MR + r0;
                if (nr == 8)
#pragma GCC unroll 8
                    for (int q = 0; q < 8; q++) _mm256_storeu_ps(o + q * KT_MR, v[q]);
                else {
                    /* part of 8 rows (every second block of AVX-512's 12-row panels):
                     * masked stores rather than a spill and nr scalar copies per k */
                    __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                    for (int q = 0; q < 8; q++) _mm256_maskstore_ps(o + q * KT_MR, lanes, v[q]);
                }
            }
    } else if (ars == 1) {
        /* one masked vector per k (KT_MR <= KV_W): the plain loop became a memcpy call */
        for (; k < kc; k++) kv_storen(ap + (long)k * KT_MR, kv_loadn(a + (long)k * acs, mr), mr);
    }
#endif
    for (; k < kc; k++)
        for (int i = 0; i < mr; i++) ap[(long)k * KT_MR + i] = a[(long)i * ars + (long)k * acs];
}

/* The panels of row blocks g0..g1 (of nmb even blocks over m rows) for K chunk [k0,
 * k0 + kc), block ib's at ap + (ib - g0) * kc * KT_MR. Even row blocks: 20 rows ->
 * 10+10 rather than 12+8. */
ISA_TARGET static void ISA_FN(pack_group)(int m, int nmb, int g0, int g1, int k0, int kc, const float *a,
                                      long ars, long acs, float *ap)
{
    for (int ib = g0; ib < g1; ib++) {
        int i0 = (int)((long)ib * m / nmb), i1 = (int)((long)(ib + 1) * m / nmb);
        ISA_FN(pack_panel)(i1 - i0, kc, a + (long)i0 * ars + (long)k0 * acs, ars, acs,
                           ap + (long)(ib - g0) * kc * KT_MR);
    }
}

/* Packed A: for each row block ib (rows split evenly into ceil(m/KT_MR) blocks), the
 * whole K as kk x KT_MR floats: ap[(ib*kk + k)*KT_MR + i]. Callers that reuse A (conv
 * weights, once per call) pack once; k_gemm_nn packs chunks of K on the stack. */
ISA_TARGET static void ISA_FN(pack_a)(int m, int kk, const float *a, long ars, long acs, float *ap)
{
    int nmb = (m + KT_MR - 1) / KT_MR;
    for (int ib = 0; ib < nmb; ib++) {
        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
        float *o = ap + (long)ib * kk * KT_MR;
        ISA_FN(pack_panel)(mr, kk, a + (long)i0 * ars, ars, acs, o); /* vector moves (was per element) */
        for (int k = 0; mr < KT_MR && k < kk; k++)
            for (int i = mr; i < KT_MR; i++) o[(long)k * KT_MR + i] = 0.0f;
    }
}

/* K is cut into chunks of KT_KC, N into blocks of KT_NB so the B chunk's block stays
 * in L2 while row blocks pass over it (as gemm_nn_packed), and M into groups of KT_GB
 * row blocks whose panels are packed once per K chunk (on the stack, KT_GB*KT_KC*KT_MR
 * floats) and reused by every N block: packing once per N block cost as much as a
 * quarter of GPT's training time. Per element the same FMAs in the same order: the
 * bits do not depend on the blocking. B is read in place (rows ldb apart). */
#define KT_KC 256
/* K chunks of even length (a multiple of 8, <= KT_KC): K 384 as 192 + 192 rather than
 * 256 + 128, whose short chunk paid the tiles' C loads and stores for half the FMAs. */
#define KT_KSTEP(kk) ((((kk) + ((kk) + KT_KC - 1) / KT_KC - 1) / (((kk) + KT_KC - 1) / KT_KC) + 7) & ~7)
/* The next micro-tile's C rows (mr x KT_NV vectors; C is megabytes, its tiles come cold
 * from L3 or memory): asked for while this tile's FMAs run, not stalled on at its start. */
#define KT_PF_C(cp, mr, ldc)                                                             \
    for (int r_ = 0; r_ < (mr); r_++)                                                     \
        for (int v_ = 0; v_ < KT_NV * KV_W; v_ += 16) __builtin_prefetch((cp) + (long)r_ * (ldc) + v_, 1, 3)
#define KT_GB 8
ISA_TARGET static void ISA_FN(gemm_nn_rows)(int m, int n, int kk, const float *a, long ars, long acs,
                                       const float *b, long ldb, float *c, long ldc,
                                       const float *bias, int acc)
{
    float ap[KT_GB * KT_KC * KT_MR];
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR;
    const int ks = KT_KSTEP(kk);
    for (int k0 = 0; k0 < kk; k0 += ks) {
        int kc = kk - k0 < ks ? kk - k0 : ks;
        int acc_k = acc || k0 > 0;
        const float *bias_k = k0 > 0 ? NULL : bias;
        for (int g0 = 0; g0 < nmb; g0 += KT_GB) {
            int g1 = nmb - g0 < KT_GB ? nmb : g0 + KT_GB;
            ISA_FN(pack_group)(m, nmb, g0, g1, k0, kc, a, ars, acs, ap);
            for (int jb = 0; jb < n; jb += KT_NB) {
                int je = n - jb < KT_NB ? n : jb + KT_NB;
                for (int ib = g0; ib < g1; ib++) {
                    int i0 = (int)((long)ib * m / nmb), i1 = (int)((long)(ib + 1) * m / nmb);
                    int mr = i1 - i0;
                    const float *apk = ap + (long)(ib - g0) * kc * KT_MR;
                    for (int j0 = jb; j0 < je; j0 += cw) {
                        int nc = je - j0 < cw ? je - j0 : cw;
                        if (j0 + cw < je) KT_PF_C(c + (long)i0 * ldc + j0 + cw, mr, ldc);
                        else if (ib + 1 < g1) KT_PF_C(c + (long)i1 * ldc + jb, mr, ldc);
                        ISA_FN(ukr_nn_any)(mr, nc, kc, apk, b + (long)k0 * ldb + j0, ldb, NULL,
                                       c + (long)i0 * ldc + j0, ldc, bias_k ? bias_k + i0 : NULL, acc_k);
                    }
                }
            }
        }
    }
}

/* gemm_nn_rows with B packed too (pack_b: contiguous panels instead of rows ldb apart),
 * per K chunk and N super-block of at most KT_NCB columns (N cut evenly: GPT's 1152 and
 * 1536 are one super-block, so A is packed once per K chunk and row group; at 512
 * columns the forward GEMMs packed A three times: 2048x1152x384 164 -> 176 GFLOP/s
 * with the 4-row transpose of pack_panel, AVX-512). The same FMAs in the same order:
 * same bits. Buffers on the stack (KT_GB*KT_KC*KT_MR + KT_KC*KT_NCB floats: 96 KiB +
 * 1.5 MiB for AVX-512), in a frame of their own so small GEMMs do not probe it: no
 * malloc here, and a large _Thread_local would sit in the static TLS of every thread of
 * a program linking libddprt.a (glibc carves it from each thread's stack); k_parallel_for's
 * workers (ports/posix, default attributes) and callers' threads have glibc's default
 * stack (RLIMIT_STACK, 8 MiB). KT_NC: k_gemm_nt_pb's super-blocks. */
#define KT_NC 512
#define KT_NCB 1536
/* Row group gi of ngr in super-block si: every second super-block walks the groups
 * backwards, so it starts on the A rows packed last, still in L2 (a forward GEMM's K
 * chunk of A, 2048 x 256 floats, is larger than L2: each super-block re-read it all
 * from memory). The order of the groups does not change any element's sums. */
#define KT_GSERP(gi, ngr, si) (((si) & 1 ? (ngr) - 1 - (gi) : (gi)) * KT_GB)
__attribute__((noinline)) ISA_TARGET static void ISA_FN(gemm_nn_pb)(int m, int n, int kk, const float *a,
                                                               long ars, long acs, const float *b, long ldb,
                                                               float *c, long ldc, const float *bias, int acc)
{
    _Alignas(64) float ap[KT_GB * KT_KC * KT_MR];
    _Alignas(64) float bp[KT_KC * KT_NCB];
    const int cw = KT_NV * KV_W;
    int nmb = (m + KT_MR - 1) / KT_MR, ngr = (nmb + KT_GB - 1) / KT_GB;
    const int ks = KT_KSTEP(kk), nsb = (n + KT_NCB - 1) / KT_NCB, ns = ((n + nsb - 1) / nsb + cw - 1) / cw * cw;
    for (int k0 = 0; k0 < kk; k0 += ks) {
        int kc = kk - k0 < ks ? kk - k0 : ks, acc_k = acc || k0 > 0;
        const float *bias_k = k0 > 0 ? NULL : bias;
        for (int js = 0, si = 0; js < n; js += ns, si++) {
            int jn = n - js < ns ? n - js : ns;
            ISA_FN(pack_b)(kc, jn, b + (long)k0 * ldb + js, ldb, bp);
            for (int gi = 0; gi < ngr; gi++) {
                int g0 = KT_GSERP(gi, ngr, si), g1 = nmb - g0 < KT_GB ? nmb : g0 + KT_GB;
                ISA_FN(pack_group)(m, nmb, g0, g1, k0, kc, a, ars, acs, ap);
                for (int jb = js; jb < js + jn; jb += KT_NB) {
                    int je = js + jn - jb < KT_NB ? js + jn : jb + KT_NB;
                    for (int ib = g0; ib < g1; ib++) {
                        int i0 = (int)((long)ib * m / nmb), mr = (int)((long)(ib + 1) * m / nmb) - i0;
                        const float *apk = ap + (long)(ib - g0) * kc * KT_MR;
                        for (int j0 = jb; j0 < je; j0 += cw) { /* panel (j0-js)/cw: (j0-js)*kc floats in */
                            if (j0 + cw < je) KT_PF_C(c + (long)i0 * ldc + j0 + cw, mr, ldc);
                            else if (ib + 1 < g1) KT_PF_C(c + (long)(ib + 1) * m / nmb * ldc + jb, mr, ldc);
                            ISA_FN(ukr_nn_any)(mr, je - j0 < cw ? je - j0 : cw, kc, apk, bp + (long)(j0 - js) * kc,
                                           cw, NULL, c + (long)i0 * ldc + j0, ldc, bias_k ? bias_k + i0 : NULL,
                                           acc_k);
                        }
                    }
                }
            }
        }
    }
}

/* Packing B costs a copy of each K chunk: it pays when several row blocks read it,
 * it is wider than one panel, and its rows are far enough apart (KT_PB_LD) and the
 * chunks long enough (KT_PB_KC) to overflow L1's sets. Measured packed: 64x784x100
 * and 100x784x64 6-10 % slower, 64x50x320 (AVX2) 9 % slower. */
#define KT_PB_MB 4
#define KT_PB_KC 128
#define KT_PB_LD 256
ISA_TARGET static void ISA_FN(gemm_nn)(int m, int n, int kk, const float *a, long ars, long acs,
                                  const float *b, long ldb, float *c, long ldc,
                                  const float *bias, int acc)
{
    if ((m + KT_MR - 1) / KT_MR >= KT_PB_MB && n > KT_NV * KV_W && kk >= KT_PB_KC && ldb >= KT_PB_LD)
        ISA_FN(gemm_nn_pb)(m, n, kk, a, ars, acs, b, ldb, c, ldc, bias, acc);
    else
        ISA_FN(gemm_nn_rows)(m, n, kk, a, ars, acs, b, ldb, c, ldc, bias, acc);
}


#include "kernels/cpu/k_gemm_tb_simd.h"
#include "kernels/cpu/k_gemm_nt_simd.h"

#undef KT_MR
#undef KT_TM
#undef KT_TN
#undef KT_NT_55
#undef KT_NT_BFIRST
#undef KT_NV
#undef KT_NN_CASE
#undef KT_KB
#undef KT_NB
#undef KT_KC
#undef KT_KSTEP
#undef KT_NC
#undef KT_NCB
#undef KT_TRB
#undef KT_PB_MB
#undef KT_PB_KC
#undef KT_PB_LD
#undef KT_GB
#undef KT_NT_CASE
#undef KT_NT_ROW
#undef KT_NTO_CASE
#undef KT_NTO_ROW
#undef KT_PF_STEP
#undef KT_PF_C
#undef KT_NTL
#undef KT_NTL_MIN
#undef KT_NTL_ST
#undef KT_TB_CASE
#undef KT_TB_CH
