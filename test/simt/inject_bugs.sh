#!/usr/bin/env bash
# Injected bugs in the real kernels (make simt-inject): each mutation below is applied
# to a copy of kernels/cuda, the .cu files that see it are rebuilt for the SIMT
# executor, the device suite is relinked with them and run on the tests that use the
# kernel; the table says what reported each bug (the executor's check, a sanitizer, or
# only the comparison with the CPU). A bug nothing reports makes the script fail.
#
# Usage (the Makefile passes its flags): inject_bugs.sh BUILD "CXX FLAGS" "LINK" "OBJS" "LIBS"
# DDPRT_INJECT=REGEX: only the bugs whose name matches (make simt-inject INJECT=...).
# INJECT_LOG=DIR: each bug's whole suite output in DIR/<name>.log.
# INJECT_DRY=1: only whether each mutation applies (exactly once), nothing built or run
# (make test's simt_injected_bugs_all_apply: a kernel edit that breaks a row's pattern).
set -euo pipefail
build=$1 cxx=$2 link=$3 objs=$4 libs=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
san="${DDPRT_SAN:-}"

# name | file | perl substitution (must match exactly once) | device-suite filter | thread order
#   [| the .cu files to rebuild: default every one that includes the file; the rest keep
#    the unmutated objects, which is sound where the filter's tests call only these]
bugs=(
"GEMM barrier after the tile loads removed|k_cuda_gemm.cuh|s/(Bs\[kk\]\[nn\] = .*\n        \}\n)        __syncthreads\(\);\n/\$1/|gpu_linear_shapes|forward"
"GEMM barrier after the tile's products removed|k_cuda_gemm.cuh|s/(acc\[i\]\[j\] = fmaf\(a\[i\], b\[j\], acc\[i\]\[j\]\);\n        \}\n)        __syncthreads\(\);\n/\$1/|gpu_linear_shapes|forward"
"__shfl_xor_sync in log_softmax under a lane condition|k_cuda_softmax.cu|s/for \(int o = 16; o > 0; o >>= 1\) m = fmaxf/for (int o = 16; o > 0 && lane < 16; o >>= 1) m = fmaxf/|gpu_log_softmax|forward"
"embedding ballot skipped by lanes past the last token|k_cuda_graph_ops.cu|s/unsigned m = __ballot_sync\(0xffffffffu, t < ntok && f.ids\[t\] == v\);/if (t >= ntok) break;\n                unsigned m = __ballot_sync(0xffffffffu, f.ids[t] == v);/|gpu_embedding|forward"
"bounds guard of the linear bias gradient removed|k_cuda_linear.cu|s/    if \(o >= out\) return;\n//|gpu_linear_shapes|forward"
"block sum reads past its shared array|k_cuda_common.cuh|s/for \(int w = K_CUDA_THREADS \/ 2; w > 0; w >>= 1\)/for (int w = K_CUDA_THREADS; w > 0; w >>= 1)/|gpu_log_softmax|forward"
"final barrier of the BatchNorm block sum removed|k_cuda_bn.cu|s/(    double r = sh\[0\];\n)    __syncthreads\(\);\n/\$1/|gpu_batchnorm_resnet|forward"
"tensor-core GEMM: wrong A fragment rows in ldmatrix|k_cuda_tc_gemm.cuh|s/tc_off<BM, true>\(mb \+ \(lane & 15\)/tc_off<BM, true>(mb + (lane \& 7)/|gpu_tc_gemm_layouts|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM: cp.async.wait_group removed|k_cuda_tc_gemm.cuh|s/        K_CP_ASYNC_WAIT\(TC_STAGES - 2\);\n//|gpu_tc_gemm_layouts|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90): wgmma.fence removed|k_cuda_tc_wgmma.cuh|s/        K_WGMMA_FENCE\(\); \/\/ \(16-bit arrays\)/        \/\/ (16-bit arrays)/|gpu_tc_gemm_wgmma|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM: barrier between pipeline stages removed|k_cuda_tc_gemm.cuh|s/(K_CP_ASYNC_WAIT\(TC_STAGES - 2\);\n)\s*__syncthreads\(\);\n/\$1/|gpu_tc_gemm_layouts|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90): B's wgmma descriptor without the 64-byte swizzle|k_cuda_tc_wgmma.cuh|s/k_wgmma_desc\(tb \+ 16 \* kk, 16, 8 \* TC_BK \* 2, K_WGMMA_SW64\)/k_wgmma_desc(tb + 16 * kk, 16, 8 * TC_BK * 2, K_WGMMA_NOSWZ)/|gpu_tc_gemm_wgmma|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, conv and linear): wgmma.fence removed|k_cuda_tc_wgmma.cuh|s/        K_WGMMA_FENCE\(\); \/\/ the accumulators/        \/\/ the accumulators/|gpu_tc_conv_linear_on_wgmma|forward|k_cuda_linear.cu"
"tensor-core GEMM (sm_90, M/N-major): imm-trans-b 0 on the N-major tile|k_cuda_tc_wgmma.cuh|s/K_WGMMA_BF16_128T\(acc, da, db, 1, !AK, !BK\)/K_WGMMA_BF16_128T(acc, da, db, 1, !AK, 0)/|gpu_tc_gemm_wgmma_mn_major|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, M/N-major): B's descriptor LBO (the second 64 rows) wrong|k_cuda_tc_wgmma.cuh|s/wg_off_mn\(16 \* kk, 0\), 4096, 1024/wg_off_mn(16 * kk, 0), 2048, 1024/|gpu_tc_conv_dw_mn_major_on_wgmma|forward|k_cuda_conv.cu"
"tensor-core GEMM (sm_90, M/N-major): imm-trans-a 0 on the M-major tile|k_cuda_tc_wgmma.cuh|s/K_WGMMA_BF16_128T\(acc, da, db, 1, !AK, !BK\)/K_WGMMA_BF16_128T(acc, da, db, 1, 0, !BK)/|gpu_tc_gemm_wgmma_mn_major|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, M/N-major): B's descriptor LBO wrong, seen by the start-up probe|k_cuda_tc_wgmma.cuh|s/wg_off_mn\(16 \* kk, 0\), 4096, 1024/wg_off_mn(16 * kk, 0), 2048, 1024/|gpu_tc_conv_linear_on_wgmma|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (one 16-bit operand, one gathered): cp.async.wait_group removed|k_cuda_tc_gemm.cuh|s/            K_CP_ASYNC_WAIT\(0\);\n(            __syncthreads\(\); \/\/ mixed)/\$1/|gpu_tc_w16_bitwise_equal_without|forward|k_cuda_conv.cu"
"conv on NHWC copies: the input grad's inexact stride division not zeroed|k_cuda_conv.cu|s/if \(pr \W\W qr \W\W pp >= g\.P/if (pp >= g.P/|gpu_tc_conv_nhwc_matches_cpu_amp|forward"
"NHWC BN sums: barrier in the row lanes' tree removed|k_cuda_nhwc.cu|s/(if \(ty < w\) sh\[0\]\[ty\]\[tx\] \+= sh\[0\]\[ty \+ w\]\[tx\], sh\[1\]\[ty\]\[tx\] \+= sh\[1\]\[ty \+ w\]\[tx\];\n)        __syncthreads\(\);\n/\$1/|gpu_nhwc_bn_matches_nchw|forward"
"NHWC max pool: the channel stride dropped from x's index|k_cuda_nhwc.cu|s/k_act_ld\(x, xt, \(nn \* h \* w \+ off\) \* C \+ c\)/k_act_ld(x, xt, (nn * h * w + off) + c)/|gpu_nhwc_pools_match_nchw|forward"
"conv channels-last y: the NHWC store index ignored|k_cuda_conv.cu|s/size_t i = nhwc \? \(size_t\)j \* g\.K \+ m/size_t i = 0 ? (size_t)j * g.K + m/|gpu_nhwc_conv_bitwise_equal_to_nchw_copies|forward"
"conv workspace: the backward places x's copy the size left out (XNHWC with X16)|k_cuda_conv.cu|s/\n    ConvWs L = conv_ws\(g, 1, wp != NULL, x_direct\(mm\), no_dx\(mm\)\);/\n    ConvWs L = conv_ws(g, 1, wp != NULL, 0, no_dx(mm));/|gpu_nhwc_conv_bitwise_equal_to_nchw_copies|forward"
"conv channels-last x: still permuted in the forward (same values, one more launch)|k_cuda_conv.cu|s/if \(\(!xn && chan_last\(mm, g\.N, g\.HW\(\), g\.C, x, bb\.xt, xh/if ((chan_last(mm, g.N, g.HW(), g.C, x, bb.xt, xh/|gpu_nhwc_conv_bitwise_equal_to_nchw_copies|forward"
"conv 1x1 plain products: a stride-2 1x1 conv taken as plain rows (the stride test dropped)|k_cuda_conv.cu|s/return g\.R == 1 && g\.S == 1 && g\.st == 1 && g\.pad == 0/return g.R == 1 \&\& g.S == 1 \&\& g.pad == 0/|gpu_tc_conv1x1_small_and_others|forward"
"tensor-core attention: barrier before the next key tile's loads removed|k_cuda_attn_tc.cu|s/            __syncthreads\(\); \/\/ every warp done with the last tile\n//|gpu_tc_attention_bf16_hd8_32_128|warps"
"tensor-core attention: P's C fragments reused as A in the wrong order|k_cuda_attn_tc.cuh|s/\{fa_pack<TY>\(p\[2 \* s\]\[0\], p\[2 \* s\]\[1\]\), fa_pack<TY>\(p\[2 \* s\]\[2\], p\[2 \* s\]\[3\]\),/{fa_pack<TY>(p[2 * s][2], p[2 * s][3]), fa_pack<TY>(p[2 * s][0], p[2 * s][1]),/|gpu_tc_attention_bf16_hd64|forward"
"tensor-core attention: cp.async.wait_group removed|k_cuda_attn_tc.cuh|s/    K_CP_ASYNC_WAIT\(0\); \/\/ this thread's copies of the tile\n//|gpu_tc_attention_cp_async_bits|forward"
"tensor-core attention: barrier before overwriting the other K/V buffer removed|k_cuda_attn_tc.cuh|s/    __syncthreads\(\); \/\/ everyone's, and the other buffer free\n//|gpu_tc_attention_bf16_hd64|warps"
"tensor-core attention (sm_90): P's register fragment with a1 and a2 swapped (row + 8 and k + 8)|k_cuda_attn_wg.cuh|s/&a\[2 \* ks \+ \(i >> 1\)\]\[2 \* \(i & 1\)\]/\&a[2 * ks + (i \& 1)][2 * (i >> 1)]/|gpu_tc_attention_wgmma_fwd_bf16|forward"
"tensor-core attention (sm_90): V's wgmma descriptor LBO (the next 64 columns of hd) 4 KiB, not 8|k_cuda_attn_wg.cuh|s/dv = k_wgmma_desc\(tv, 2 \* FW_BLOCK, 1024/dv = k_wgmma_desc(tv, FW_BLOCK, 1024/|gpu_tc_attention_wgmma_fwd_f16|forward"
"tensor-core attention (sm_90): wgmma.fence before P V removed|k_cuda_attn_wg.cuh|s/        K_WGMMA_FENCE\(\); \/\/ after P's registers[^\n]*\n//|gpu_tc_attention_wgmma_fwd_bf16|forward"
"tensor-core GEMM (sm_90): fence.proxy.async after cp.async's writes removed|k_cuda_tc_wgmma.cuh|s/        K_FENCE_PROXY_ASYNC\(\); \/\/ cp.async's writes, for the async proxy wgmma reads through\n//|gpu_tc_gemm_wgmma|forward|k_cuda_tc_gemm.cu"
"tensor-core attention (sm_90): wgmma.fence before P V placed before P's registers are written|k_cuda_attn_wg.cuh|s/(        unsigned pa\[FA_T \/ 16\]\[4\];\n)((?:.*\n)*?)        K_WGMMA_FENCE\(\); \/\/ after P's registers[^\n]*\n/        K_WGMMA_FENCE();\n\$1\$2/|gpu_tc_attention_wgmma_fwd_bf16|forward"
"tensor-core attention (sm_90): P's registers changed before the P V wait_group|k_cuda_attn_wg.cuh|s/(FW_WGMMA_RS\(TY, HD, [^\n]*\n        K_WGMMA_COMMIT\(\);\n)/\$1        pa[0][0] ^= 1;\n/|gpu_tc_attention_wgmma_fwd_bf16|forward"
"tensor-core attention (sm_90): V's descriptor LBO 4 KiB, seen by the start-up probe|k_cuda_attn_wg.cuh|s/dv = k_wgmma_desc\(tv, 2 \* FW_BLOCK, 1024/dv = k_wgmma_desc(tv, FW_BLOCK, 1024/|gpu_tc_path_probes|forward"
"conv 1x1 plain products: x's rows 8 elements too long, seen by the start-up probe|k_cuda_conv.cu|s/bp.ld = g.C, bp.vec = 1;\n            return/bp.ld = g.C + 8, bp.vec = 1;\n            return/|gpu_tc_path_probes|forward"
"attention backward on wgmma (sm_90): dO / Q / K as the B of dV, dK, dQ K-major (imm-trans-b 0), not N-major|k_cuda_attn_wgb.cuh|s/db \+ 128 \* ks, 1, 1\)/db + 128 * ks, 1, 0)/|gpu_tc_attention_wgmma_bwd_bf16|forward"
"attention backward on wgmma (sm_90): wgmma.wait_group after dV, dK removed (the next P^T, dS^T packed under it)|k_cuda_attn_wgb.cuh|s/(fw_ab<TY, HD>\(dk, dsa, tq\); \/\/ dK \+= dS\^T Q\n        K_WGMMA_COMMIT\(\);\n)        K_WGMMA_WAIT\(0\);\n/\$1/|gpu_tc_attention_wgmma_bwd_bf16|forward"
"attention backward on wgmma (sm_90): barrier after the streamed tiles' cp.async wait removed|k_cuda_attn_wgb.cuh|s/(wgmma reads through\n)    __syncthreads\(\);\n/\$1/|gpu_tc_attention_wgmma_bwd_f16|forward"
"tensor-core attention backward (sm_90): wgmma.fence before dV, dK placed before P^T / dS^T are packed|k_cuda_attn_wgb.cuh|s/(        unsigned pt\[FA_T \/ 16\]\[4\][^\n]*\n)((?:.*\n)*?)        K_WGMMA_FENCE\(\); \/\/ after the registers are written\n/        K_WGMMA_FENCE();\n\$1\$2/|gpu_tc_attention_wgmma_bwd_bf16|forward"
"tensor-core GEMM (sm_90, TMA): the consumers' wait on the full barrier removed|k_cuda_tc_tma.cuh|s/            K_MBAR_WAIT\(&sm.full\[s\], \(it \/ WT_STAGES\) & 1\);\n//|gpu_tc_tma_gemm_odd_shapes|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, TMA): the producer's wait on the empty barrier removed|k_cuda_tc_tma.cuh|s/                if \(it >= WT_STAGES\) K_MBAR_WAIT\(&sm.empty\[s\], \(it \/ WT_STAGES - 1\) & 1\);\n//|gpu_tc_tma_gemm_odd_shapes|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, TMA): expect_tx 16 bytes short|k_cuda_tc_tma.cuh|s/K_MBAR_ARRIVE_TX\(&sm.full\[s\], \(WGG_T \+ BN\) \* 128\);/K_MBAR_ARRIVE_TX(\&sm.full[s], (WGG_T + BN) * 128 - 16);/|gpu_tc_tma_gemm_odd_shapes|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, TMA, M/N-major): B's descriptor LBO (the next 64 rows) 4 KiB, not the boxes' 8 KiB|k_cuda_tc_tma.cuh|s/: k_wgmma_desc\(tb \+ 64 \* 16 \* kk, 8192, 1024, K_WGMMA_SW128\);/: k_wgmma_desc(tb + 64 * 16 * kk, 4096, 1024, K_WGMMA_SW128);/|gpu_tc_tma_gemm_mn_major|forward|k_cuda_tc_gemm.cu"
"tensor-core GEMM (sm_90, TMA): the consumers take more registers than the producer gives (setmaxnreg.inc 240)|k_cuda_tc_tma.cuh|s/#define WT_CONSUMER_REGS 232/#define WT_CONSUMER_REGS 240/|gpu_tc_tma_gemm_odd_shapes|forward|k_cuda_tc_gemm.cu"
"TMA split-K GEMM (sm_90): the chunk's k offset dropped from A's boxes|k_cuda_tc_tma.cuh|s/wt_issue<AK, WGG_T>\(a, ma, w.kbeg \+ kt \* SK,/wt_issue<AK, WGG_T>(a, ma, kt * SK,/|gpu_tc_tma_split_k|forward|k_cuda_linear.cu"
"TMA split-K GEMM (sm_90): the chunk's k offset dropped, seen by the start-up probe|k_cuda_tc_tma.cuh|s/wt_issue<AK, WGG_T>\(a, ma, w.kbeg \+ kt \* SK,/wt_issue<AK, WGG_T>(a, ma, kt * SK,/|gpu_tc_tma_probe_agrees|forward|k_cuda_tc_gemm.cu"
"tensor-core TF32 GEMM (sm_90, TMA): a stage's k as the 16-bit one's (64, not 32: every other 32 k skipped)|k_cuda_tc_tma.cuh|s/return TY == K_CUDA_MM_TF32 \? 32 : WT_BK;/return TY == K_CUDA_MM_TF32 ? 64 : WT_BK;/|gpu_tc_tf32_tma_linear_bitwise|forward|k_cuda_linear.cu"
"tensor-core TF32 GEMM (sm_90, TMA): the fp32 maps encoded with 16-bit elements|k_cuda_tc_tma.cuh|s/constexpr int eb = TY == K_CUDA_MM_TF32 \? 4 : 2;/constexpr int eb = 2;/|gpu_tc_tf32_tma_linear_bitwise|forward|k_cuda_linear.cu"
"tensor-core TF32 GEMM (sm_90, TMA): the fp32 maps encoded with 16-bit elements, seen by the start-up probe|k_cuda_tc_tma.cuh|s/constexpr int eb = TY == K_CUDA_MM_TF32 \? 4 : 2;/constexpr int eb = 2;/|gpu_tc_tf32_wgmma_probe_agrees|forward|k_cuda_linear.cu"
"TMA im2col conv (sm_90): the tap's offsets in the wrong order ({r, s}, not {w, h} = {s, r})|k_cuda_tc_tma.cuh|s/p \* g.st - g.padh, n, \(unsigned short\)ow, \(unsigned short\)oh,/p * g.st - g.padh, n, (unsigned short)oh, (unsigned short)ow,/|gpu_tc_conv_im2col_3x3_bitwise|forward|k_cuda_conv.cu"
"TMA im2col conv input grad (sm_90): dy's taps not flipped|k_cuda_tc_tma.cuh|s/const int ow = g.flip \? g.S - 1 - s : s, oh = g.flip \? g.R - 1 - r : r;/const int ow = s, oh = r;/|gpu_tc_conv_im2col_3x3_bitwise|forward|k_cuda_conv.cu"
"TMA im2col conv input grad (sm_90): dy's taps not flipped, seen by the start-up probe|k_cuda_tc_tma.cuh|s/const int ow = g.flip \? g.S - 1 - s : s, oh = g.flip \? g.R - 1 - r : r;/const int ow = s, oh = r;/|gpu_tc_path_probes_agree|forward|k_cuda_conv.cu"
"TMA im2col conv (sm_90): expect_tx 16 bytes short of the im2col box and the weights' box|k_cuda_tc_tma.cuh|s/K_MBAR_ARRIVE_TX\(&sm.full\[s\], \(WGG_T \+ BN\) \* 128\);/K_MBAR_ARRIVE_TX(\&sm.full[s], (WGG_T + BN) * 128 - 16 * TL::i2c);/|gpu_tc_conv_im2col_strided_bitwise|forward|k_cuda_conv.cu"
"TMA im2col conv weight grad (sm_90): the im2col boxes' first pixel a stage late|k_cuda_tc_tma.cuh|s/min\(m0 \+ 64 \* j, M - 64\), j0, bar\)/min(m0 + 64 * j, M - 64), j0 + WT_BK, bar)/|gpu_tc_conv_im2col_strided_bitwise|forward|k_cuda_conv.cu"
"TMA im2col conv weight grad (sm_90): both im2col boxes of a stage into the first 64 rows|k_cuda_tc_tma.cuh|s/wt_issue_i2c\(tile \+ 64 \* WT_BK \* j, map/wt_issue_i2c(tile, map/|gpu_tc_conv_im2col_strided_bitwise|forward|k_cuda_conv.cu"
"TMA im2col conv strided input grad (sm_90): a phase's store with its h and w phases swapped|k_cuda_conv_phase.cuh|s/g.st \* a \+ ph\) \* g.W \+ g.st \* b \+ pw, v\)/g.st * a + pw) * g.W + g.st * b + ph, v)/|gpu_tc_conv_im2col_strided_dx_phases|forward|k_cuda_conv.cu"
"TMA im2col conv strided input grad (sm_90): the grouped product's tile loop gives each phase's first tile to the phase before|k_cuda_conv_grp.cuh|s/t >= gp->t0\[p \+ 1\]\) p\+\+;/t > gp->t0[p + 1]) p++;/|gpu_tc_conv_im2col_strided_dx_grouped|forward|k_cuda_conv.cu"
"TMA im2col conv strided input grad (sm_90): a phase's first tap off by one|k_cuda_conv_phase.cuh|s/f.r0 = \(ph \+ g.pad\) % g.st,/f.r0 = (ph + g.pad + 1) % g.st,/|gpu_tc_conv_im2col_strided_dx_phases|forward|k_cuda_conv.cu"
"TMA im2col conv strided input grad (sm_90): a phase's first tap off by one, seen by the start-up probe|k_cuda_conv_phase.cuh|s/f.r0 = \(ph \+ g.pad\) % g.st,/f.r0 = (ph + g.pad + 1) % g.st,/|gpu_tc_path_probes_agree|forward|k_cuda_conv.cu"
"tensor-core TF32 GEMM (sm_90): the tf32 rounding dropped (fp32 bits stored: the unit truncates them)|k_cuda_tc_wgtf.cuh|s/v\[i\] = k_tf32\(/v[i] = __float_as_uint(/|gpu_tc_tf32_wgmma_linear_bitwise|forward|k_cuda_linear.cu"
"tensor-core TF32 GEMM (sm_90): the tiles stored unswizzled, the descriptors 64-byte swizzled|k_cuda_tc_wgtf.cuh|s/tile\[tf_off<WGG_T>\(r, k\)\] = v\[i\];/tile[r * TF_BK + k] = v[i];/|gpu_tc_tf32_wgmma_linear_bitwise|forward|k_cuda_linear.cu"
"tensor-core TF32 GEMM (sm_90): fence.proxy.async after the tiles' stores removed|k_cuda_tc_wgtf.cuh|s/        K_FENCE_PROXY_ASYNC\(\); \/\/ the generic-proxy stores[^\n]*\n//|gpu_tc_tf32_wgmma_conv_bitwise|forward|k_cuda_conv.cu"
"tensor-core TF32 GEMM (sm_90): B's second k8 step at k 4 (16 bytes), seen by the start-up probe|k_cuda_tc_wgtf.cuh|s/k_wgmma_desc\(tb \+ 8 \* kk,/k_wgmma_desc(tb + 4 * kk,/|gpu_tc_tf32_wgmma_probe_agrees|forward|k_cuda_linear.cu"
)

printf '| injected bug | kernel file | what reported it |\n|---|---|---|\n'
# In three passes, so that a 2-core machine keeps both cores busy (make test's runner runs
# one test at a time): every row's mutation applied to its own copy of the sources; each
# distinct (mutated source, .cu) compiled once, JOBS at a time (rows that share a mutation
# share its objects); then each row linked and run, JOBS at a time. Lines in the table's order.
jobs_max=${JOBS:-$(nproc 2>/dev/null || echo 2)}
par() { # "$@" in the background, at most jobs_max at once
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  "$@" &
}
rows=() compiles=()
declare -A seen_obj=()
for b in "${bugs[@]}"; do
  IFS='|' read -r name file subst filter order only <<<"$b"
  [[ -z "${DDPRT_INJECT:-}" || "$name" =~ $DDPRT_INJECT ]] || continue
  i=${#rows[@]} d="$tmp/r${#rows[@]}"
  rows+=("$b")
  mkdir -p "$d/src/kernels/cuda"
  cp kernels/cuda/*.cu kernels/cuda/*.cuh kernels/cuda/*.h "$d/src/kernels/cuda/"
  f="$d/src/kernels/cuda/$file"
  if ! perl -0pi -e "\$n = ($subst); die \"no match\\n\" unless \$n == 1" "$f"; then
    echo "| $name | $file | (mutation did not apply) |" >"$d/line"; echo 1 >"$d/fail"; continue
  fi
  # The .cu files that include the mutated one (or are it), rebuilt; the rest as built.
  cus=$(cd kernels/cuda && { [ "${file##*.}" != cu ] || echo "$file"; { grep -l "$file" *.cuh || true; } |
        while read -r h; do grep -l "$h" *.cu || true; done; grep -l "$file" *.cu || true; } | sort -u)
  [[ -n ${only:-} ]] && cus=$only
  key=$(sha1sum <"$f" | cut -c1-16)
  : >"$d/objs"
  for cu in $cus; do
    o="$tmp/obj/$key-${cu%.cu}.o"
    echo "$cu $o" >>"$d/objs"
    [[ -n ${seen_obj[$o]:-} ]] && continue
    seen_obj[$o]=1
    compiles+=("$d|$cu|$o")
  done
done
if [[ -n ${INJECT_DRY:-} ]]; then
  fails=0
  for i in "${!rows[@]}"; do
    IFS='|' read -r name file _ <<<"${rows[$i]}"
    if [[ -e $tmp/r$i/fail ]]; then cat "$tmp/r$i/line"; fails=$((fails+1)); else echo "| $name | $file | applies |"; fi
  done
  echo "$((${#rows[@]} - fails)) of ${#rows[@]} mutations apply"
  exit $((fails > 0))
fi
mkdir -p "$tmp/obj"
compile() { # row dir, .cu, object: the mutated copies first (the sources include "kernels/cuda/..." through -I.)
  ${cxx/ -I. / -I$1/src -I. } -c "$1/src/kernels/cuda/$2" -o "$3" >"$3.log" 2>&1 || echo 1 >"$3.fail"
}
for c in "${compiles[@]}"; do IFS='|' read -r d cu o <<<"$c"; par compile "$d" "$cu" "$o"; done
wait
run_row() { # row index: link with the row's objects, run its tests, write its table line
  local d="$tmp/r$1" name file subst filter order only link_objs=$objs out what cu o
  IFS='|' read -r name file subst filter order only <<<"${rows[$1]}"
  while read -r cu o; do
    if [[ -e $o.fail ]]; then
      echo "| $name | $file | (did not compile: $(grep -m1 -E 'error' "$o.log" | cut -c1-160)) |" >"$d/line"
      echo 1 >"$d/fail"; return
    fi
    link_objs=${link_objs//"$build/obj-simt/kernels/cuda/${cu%.cu}.o"/$o}
  done <"$d/objs"
  # shellcheck disable=SC2086
  $link -o "$d/suite" $link_objs $libs
  out=$(DDPRT_SIMT_SCHED=$order DDPRT_BUILD=$build "$d/suite" "$filter" 2>&1 || true)
  rm -f "$d/suite"
  # INJECT_LOG=dir: each row's whole output kept there (what the table's one line leaves out)
  [[ -n ${INJECT_LOG:-} ]] && printf '%s\n' "$out" > "$INJECT_LOG/$(printf '%s' "$name" | tr -c 'A-Za-z0-9' _ | cut -c1-80).log"
  what=$(printf '%s\n' "$out" | grep -m1 -oE 'ThreadSanitizer: data race.{0,60}|AddressSanitizer: [a-z-]+.{0,40}|simt: .{0,400}' | head -1 || true)
  if [ -z "$what" ]; then
    what=$(printf '%s\n' "$out" | grep -m1 -E '^FAIL ' | cut -c1-160 || true)
    [ -n "$what" ] && what="only the comparison with the CPU: $what"
  fi
  if [ -z "$what" ]; then what="NOTHING (the suite passed)"; echo 1 >"$d/fail"; fi
  echo "| $name | $file | ${what//|/\\|} |" >"$d/line"
}
for i in "${!rows[@]}"; do [[ -e $tmp/r$i/line ]] || par run_row "$i"; done
wait
fails=0
for i in "${!rows[@]}"; do
  cat "$tmp/r$i/line" 2>/dev/null || echo "| (row $i wrote no line) | | |"
  [[ -e $tmp/r$i/line && ! -e $tmp/r$i/fail ]] || fails=$((fails+1))
done
echo
echo "thread order per bug as listed; sanitizer: ${san:-none}; $(date -u +%F)"
exit $((fails > 0))
