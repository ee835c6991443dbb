// The SIMT executor's setmaxnreg.{inc,dec}.sync.aligned.u32 n (sm_90a, see simt.h), from
// the PTX ISA: a warpgroup's four warps move their per-thread maximum register count to
// n. The block is given its registers at launch (the count a thread times its threads,
// 64K at most); dec puts the difference into the block's pool, inc takes it from there
// and blocks until the pool holds enough. Registers are not modelled otherwise: what
// this checks is the instruction's contract.
//
// Checks: n not a multiple of 8 in [24, 256]; a warp whose count n would raise with dec or
// lower with inc; a partial or divergent warpgroup (simt_exec.cc's warpgroup collective,
// as for wgmma); an inc that no dec can meet any more (the scheduler's report, with the
// pool's state here): more registers than the block was given at launch.
//
// The count at launch is ptxas's, which the executor does not know: it takes the most
// __launch_bounds__ allows (64K / its threads, down to a multiple of 8, at most 248:
// what ptxas gives a kernel that uses setmaxnreg, e.g. 168 for 384 threads), or the
// block's size without bounds.
#include "test/simt/simt_int.h"
#include <stdio.h>
#include <string>
#include <vector>

namespace {
int start_regs, block_thr;
long long pool; // registers released by dec and not taken again
std::vector<int> warp_regs;
} // namespace

void simt::regs_block_start(int nthr, int bound)
{
    int per = 65536 / (bound > 0 ? bound : nthr);
    start_regs = (per > 255 ? 255 : per) & ~7;
    block_thr = nthr;
    pool = 0;
    warp_regs.assign((size_t)(nthr + 31) / 32, start_regs);
}

int simt::regs_setmaxnreg(int arg, int wg, const char *file, int line, char *why, size_t len)
{
    int n = arg & 0xffff, inc = arg >> 16 & 1;
    const char *op = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
    if (n < 24 || n > 256 || n % 8) {
        snprintf(why, len, "%s at %s:%d: register count %d is not a multiple of 8 in [24, 256]", op, base_name(file),
                 line, n);
        return -1;
    }
    long long need = 0;
    for (int w = 4 * wg; w < 4 * wg + 4; w++) {
        int cur = warp_regs[w];
        if (inc ? n < cur : n > cur) {
            snprintf(why, len, "%s at %s:%d to %d registers a thread: warp %d holds %d (%s)", op, base_name(file),
                     line, n, w, cur, inc ? "inc only raises the count: lowering is dec's"
                                          : "dec only lowers the count: raising is inc's");
            return -1;
        }
        need += (long long)(n - cur) * 32;
    }
    if (need > pool) return 0; // inc: wait for a dec to fill the pool
    pool -= need;
    for (int w = 4 * wg; w < 4 * wg + 4; w++) warp_regs[w] = n;
    return 1;
}

std::string simt::regs_describe(int arg, int wg)
{
    int n = arg & 0xffff;
    long long need = 0, total = 0;
    for (int w = 4 * wg; w < 4 * wg + 4; w++) need += (long long)(n - warp_regs[w]) * 32;
    for (size_t w = 0; w < warp_regs.size(); w++) total += (long long)warp_regs[w] * 32;
    char b[400];
    snprintf(b, sizeof b, "warpgroup %d asks for %lld more registers (to %d a thread), the block's pool holds %lld: "
             "the block was given %lld at launch (%d a thread x %d threads; 64K at most) and its warps hold %lld",
             wg, need, n, pool, (long long)start_regs * 32 * (long long)warp_regs.size(), start_regs, block_thr,
             total);
    return b;
}
