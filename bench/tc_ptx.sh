#!/usr/bin/env bash
# What nvcc makes of the tensor-core kernels, per architecture (sm_80: mma.sync; sm_90a:
# the same, plus the wgmma GEMMs: k_cuda_tc_gemm.cu's and the gathering one in conv, linear, tfm): the PTX instruction counts and ptxas -v's
# registers, shared memory and spills per kernel instance, as markdown tables (the
# attention's instances, k_cuda_attn_tc.cu, one row each).
# Exit 1 when a tensor-core instruction is missing or a kernel spills; 2 without nvcc.
#   bash bench/tc_ptx.sh [FILE.cu ...]   (default: the files that include k_cuda_tc_gemm.cuh)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || { echo "tc_ptx: no nvcc (install the CUDA Toolkit)"; exit 2; }
PTXAS=$(dirname "$NVCC")/ptxas
files=("$@")
[[ ${#files[@]} -gt 0 ]] || mapfile -t files < <(grep -l 'k_cuda_tc_gemm.cuh' kernels/cuda/*.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
# the tensor-core kernels' mangled names: the GEMMs (conv_phase_gemm: the strided dx's grouped one) and the
# attention's three kernels
KRE='(tc|tf|wg|wgg|wt)_gemmILi|wgtf_gemmI|conv_phase_gemmILi|fa_(fwd|bwd_dkv|bwd_dq)ILi|fw_(fwd|bwd_dkv|bwd_dq)ILi'
# nvcc and ptxas for every (file, arch) at once, JOBS at a time (default: the cores): one
# after another they took over 300 s (the test's deadline) on a loaded 2-core machine
ptx_one() {
  local p="$tmp/$(basename "$1" .cu).$2.ptx"
  "$NVCC" -std=c++17 -O3 -I. -DDDPRT_CUDA=1 -arch="$2" -ptx "$1" -o "$p" && "$PTXAS" -arch="$2" -v "$p" -o /dev/null 2>"$p.v"
}
export -f ptx_one; export NVCC PTXAS tmp
for f in "${files[@]}"; do printf '%s sm_80\n%s sm_90a\n' "$f" "$f"; done |
  xargs -P "${JOBS:-$(nproc)}" -L1 bash -c 'ptx_one "$@"' _
echo "| file | arch | mma.sync | wgmma | wgmma M/N-major | wgmma A in registers | wgmma tf32 | ldmatrix | ldmatrix.trans | cp.async | tensor-core kernels | spilling |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  for arch in sm_80 sm_90a; do
    p="$tmp/$(basename "$f" .cu).$arch.ptx"
    mma=$(grep -c 'mma.sync.aligned' "$p" || true)
    wg=$(grep -c 'wgmma.mma_async' "$p" || true)
    # imm-trans-a / -b (the last two immediates) 1: an M/N-major operand (wg_gemm's M/N-major tiles);
    # A from registers ({a0..a3}, then b-desc: the attention's P V) has imm-trans-b alone
    wgt=$(grep -cE 'wgmma.mma_async.*(p, 1, 1, (1, [01]|0, 1);|\{%r[0-9]+(,%r[0-9]+){3}\}, %rd[0-9]+, p, 1, 1, 1;)' "$p" || true)
    wgr=$(grep -cE 'wgmma.mma_async.*\{%r[0-9]+(,%r[0-9]+){3}\}, %rd[0-9]+, p,' "$p" || true)
    # tf32 (wgtf_gemm, wt_gemm<TF32>: --matmul-precision high on sm_90a), of the wgmma column
    wtf=$(grep -cE 'wgmma.mma_async.sync.aligned.m64n[0-9]+k8.f32.tf32.tf32' "$p" || true)
    ldm=$(grep -c 'ldmatrix.sync.aligned.m8n8.x4.shared' "$p" || true)
    ldt=$(grep -c 'ldmatrix.sync.aligned.m8n8.x4.trans' "$p" || true)
    cpa=$(grep -c 'cp.async.cg' "$p" || true)
    # ptxas -v: "Compiling entry function 'NAME'", then "... N bytes spill stores ...", "Used R registers ..."
    awk -v tab="$tmp/kern.tab" '/Compiling entry function/ { n = $0; sub(/.*function .\x27?/, "", n); sub(/\x27.*/, "", n) }
      /spill stores/ { split($0, a, " bytes spill stores"); k = split(a[1], b, " "); sp = b[k] + 0 }
      /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); r = substr($0, RSTART + 5, RLENGTH - 15)
        sm = 0; if (match($0, /[0-9]+ bytes smem/)) sm = substr($0, RSTART, RLENGTH - 11)
        print n "\t" r "\t" sm "\t" sp >> tab }' "$p.v"
    tck=$(grep -cE "$KRE" "$tmp/kern.tab" || true)
    spill=$(awk -F'\t' -v re="$KRE" '$1 ~ re && $4 > 0' "$tmp/kern.tab" | wc -l)
    echo "| $(basename "$f") | $arch | $mma | $wg | $wgt | $wgr | $wtf | $ldm | $ldt | $cpa | $tck | $spill |"
    cp "$tmp/kern.tab" "$tmp/$(basename "$f").$arch.tab"; rm -f "$tmp/kern.tab"
    # TMA (wt_gemm, k_cuda_tc_tma.cuh): the bulk tensor copies and mbarrier operations
    if [[ $arch == sm_90a ]]; then
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "$f")" "$(grep -c 'cp.async.bulk.tensor' "$p" || true)" \
        "$(grep -c 'mbarrier\.' "$p" || true)" "$(grep -c 'mbarrier.try_wait' "$p" || true)" \
        "$(grep -c 'setmaxnreg\.' "$p" || true)" "$(grep -c 'wgmma.mma_async.sync.aligned.m64n256k16' "$p" || true)" \
        >> "$tmp/tma.tab"
    fi
    if [[ $mma -eq 0 || $tck -eq 0 || $spill -ne 0 ]]; then bad=1; fi
    if [[ $(basename "$f") == k_cuda_tc_gemm.cu && ( $ldm -eq 0 || $ldt -eq 0 || $cpa -eq 0 ) ]]; then bad=1; fi
    if [[ $(basename "$f") =~ ^k_cuda_(tc_gemm|conv|linear|tfm)\.cu$ && $arch == sm_90a && $wg -eq 0 ]]; then bad=1; fi
    # TF32 on wgmma: conv's and linear's products at --matmul-precision high
    if [[ $(basename "$f") =~ ^k_cuda_(conv|linear)\.cu$ && $arch == sm_90a && $wtf -eq 0 ]]; then bad=1; fi
    # M/N-major operands on wgmma: the raw entry's and conv's weight gradient
    if [[ $(basename "$f") =~ ^k_cuda_(tc_gemm|conv)\.cu$ && $arch == sm_90a && $wgt -eq 0 ]]; then bad=1; fi
    if [[ $(basename "$f") == k_cuda_attn_tc.cu && ( $ldm -eq 0 || $ldt -eq 0 ) ]]; then bad=1; fi
    # the wgmma forward (fw_fwd) and backward: K-major S = Q K^T, N-major P V with P in registers
    if [[ $(basename "$f") == k_cuda_attn_tc.cu && $arch == sm_90a && ( $wg -eq 0 || $wgt -eq 0 || $wgr -eq 0 ) ]]; then bad=1; fi
  done
done
echo
echo "| file (sm_80) | tensor-core kernel instances | registers | static smem (B) | spill stores (B) |"
echo "|---|---|---|---|---|"
for t in "$tmp"/*.sm_80.tab; do
  awk -F'\t' -v f="$(basename "$t" .sm_80.tab)" -v re="$KRE" '$1 ~ re { n++; if (!lo || $2 < lo) lo = $2; if ($2 > hi) hi = $2
      sm[$3] = 1; if ($4 > sp) sp = $4 }
    END { s = ""; for (k in sm) s = s (s ? ", " : "") k; print "| " f " | " n " | " lo "-" hi " | " s " | " sp + 0 " |" }' "$t"
done
if ls "$tmp"/*.sm_90a.tab >/dev/null 2>&1; then
  echo
  echo "| wg_gemm instance (sm_90a) | file | type | A | B | registers | static smem (B) | spill stores (B) |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in "$tmp"/*.sm_90a.tab; do
    # the demangled instance: wg_gemm<type (1 bf16, 2 f16), A's loader, B's loader, the store>
    awk -F'\t' '$1 ~ /[0-9]wg_gemmILi/' "$t" | while IFS=$'\t' read -r n r sm sp; do
      d=$(c++filt "$n" | sed -e 's/(anonymous namespace):://g' -e 's/^void //' -e 's/>(.*/>/')
      IFS=',' read -r ty a b _ <<<"${d#wg_gemm<}"
      echo "| wg_gemm | $(basename "$t" .sm_90a.tab) | $([[ $ty == 1 ]] && echo bf16 || echo f16) | ${a# } | ${b# } | $r | $sm | $sp |"
    done | sort -u
  done
fi
if ls "$tmp"/*.sm_90a.tab >/dev/null 2>&1; then
  echo
  echo "| wgtf_gemm instance (sm_90a, tf32) | file | A | B | registers | static smem (B) | spill stores (B) |"
  echo "|---|---|---|---|---|---|---|"
  for t in "$tmp"/*.sm_90a.tab; do
    awk -F'\t' '$1 ~ /wgtf_gemmI/' "$t" | while IFS=$'\t' read -r n r sm sp; do
      d=$(c++filt "$n" | sed -e 's/(anonymous namespace):://g' -e 's/^void //' -e 's/>(.*/>/')
      IFS=',' read -r a b _ <<<"${d#wgtf_gemm<}"
      echo "| wgtf_gemm | $(basename "$t" .sm_90a.tab) | ${a# } | ${b# } | $r | $sm | $sp |"
    done | sort -u
  done
fi
if [[ -f $tmp/tma.tab ]]; then
  echo
  echo "| file (sm_90a) | cp.async.bulk.tensor | mbarrier ops | of them try_wait | setmaxnreg | m64n256k16 | wt_gemm instances | registers | spill stores (B) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  while IFS=$'\t' read -r f nb nm nw ns n256; do
    w=$(awk -F'\t' '$1 ~ /wt_gemmILi/ { n++; if (!lo || $2 < lo) lo = $2; if ($2 > hi) hi = $2; if ($4 > sp) sp = $4 }
        END { print n + 0 "\t" (n ? lo "-" hi : "-") "\t" sp + 0 }' "$tmp/$f.sm_90a.tab")
    IFS=$'\t' read -r wn wr ws <<<"$w"
    echo "| $f | $nb | $nm | $nw | $ns | $n256 | $wn | $wr | $ws |"
    if [[ $f == k_cuda_tc_gemm.cu && ( $nb -eq 0 || $nw -eq 0 || $wn -eq 0 || $ns -eq 0 || $n256 -eq 0 ) ]]; then bad=1; fi
  done < "$tmp/tma.tab"
  # wt_gemm's instances: registers are ptxas's count at launch (64K / 384 at most: 168);
  # setmaxnreg then moves the producer's to 40 and the consumers' to 232 (k_cuda_tc_tma.cuh)
  echo
  echo "| wt_gemm instance (sm_90a) | file | type | tile | A | B | registers at launch (ptxas) | spill stores (B) |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in "$tmp"/*.sm_90a.tab; do
    awk -F'\t' '$1 ~ /[0-9]wt_gemmILi/' "$t" | while IFS=$'\t' read -r n r sm sp; do
      d=$(c++filt "$n" | sed -e 's/(anonymous namespace):://g' -e 's/^void //' -e 's/>(.*/>/')
      IFS=',' read -r ty bn ak bk _ <<<"${d#wt_gemm<}"
      echo "| wt_gemm | $(basename "$t" .sm_90a.tab) | $(case $ty in 1) echo bf16 ;; 3) echo tf32 ;; *) echo f16 ;; esac) | 128x${bn# } |" \
        "$([[ ${ak# } == true ]] && echo K || echo M) | $([[ ${bk# } == true ]] && echo K || echo N) | $r | $sp |"
    done | sort -u
  done
  # the strided dx's grouped phase product (k_cuda_conv_grp.cuh): A im2col, B K-major, per phase
  for t in "$tmp"/*.sm_90a.tab; do
    awk -F'\t' '$1 ~ /conv_phase_gemmILi/' "$t" | while IFS=$'\t' read -r n r sm sp; do
      d=$(c++filt "$n" | sed -e 's/(anonymous namespace):://g' -e 's/^void //' -e 's/>(.*/>/')
      IFS=',' read -r ty bn _ <<<"${d#conv_phase_gemm<}"; bn=${bn%>}
      echo "| conv_phase_gemm | $(basename "$t" .sm_90a.tab) | $([[ $ty == 1 ]] && echo bf16 || echo f16) | 128x${bn# } |" \
        "K (im2col) | K | $r | $sp |"
    done | sort -u
  done
fi
if ls "$tmp"/k_cuda_attn_tc.cu.*.tab >/dev/null 2>&1; then
  echo
  echo "| attention kernel (k_cuda_attn_tc.cu) | arch | registers | static smem (B) | spill stores (B) |"
  echo "|---|---|---|---|---|"
  for arch in sm_80 sm_90a; do
    # _ZN..fa_fwdILi1ELi64EEEv.. (fw_fwd: the wgmma forward): the kernel, then its template arguments (type 1 bf16 / 2 f16, head tile, inner tile)
    awk -F'\t' -v a="$arch" '$1 ~ /f[aw]_(fwd|bwd_dkv|bwd_dq)ILi/ { n = $1; p = substr(n, match(n, /f[aw]_(fwd|bwd)/), 3); sub(/.*f[aw]_/, p, n)
        k = n; sub(/I.*/, "", k)
        sub(/^[a-z_]*I/, "", n); match(n, /^(Li[0-9]+E)+/); n = substr(n, 1, RLENGTH); gsub(/Li/, "", n)
        gsub(/E/, ",", n); sub(/,$/, "", n)
        print "| " k "<" n "> | " a " | " $2 " | " $3 " | " $4 " |" }' "$tmp/k_cuda_attn_tc.cu.$arch.tab"
  done
fi
echo
echo "nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $(date -u +%F)"
exit $bad
