// What the SIMT executor knows about a kernel before it runs it, and the launch checks
// that follow from it (see simt.h). Both facts come from the kernel's own code:
//   - __launch_bounds__(n) is n NOPs at the kernel's entry (simt.h's definition);
//   - its static __shared__ variables are the symbols _ZZ<kernel>E... of the
//     executable's symbol table (function-local statics), with their sizes.
// Also the environment: the thread order (DDPRT_SIMT_SCHED) and its seed.
#include "test/simt/simt_int.h"
#include "rt/env.h"
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
struct sym {
    uintptr_t addr;
    size_t size;
    const char *name;
    int file; // a local symbol's source file (its STT_FILE's index); -1 global
};
std::mutex info_mu;
std::unordered_map<void *, simt::kinfo> kinfos;
std::vector<sym> funcs, statics;
int symtab_state; // 0 not read, 1 read, -1 unreadable (stripped: no NaN fill, no size check)

int bias_cb(struct dl_phdr_info *info, size_t, void *arg)
{
    *(uintptr_t *)arg = info->dlpi_addr; // the first object is the executable
    return 1;
}

void read_symtab()
{
    symtab_state = -1;
    int fd = open("/proc/self/exe", O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return;
    char *m = (char *)mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64) return;
    uintptr_t bias = 0;
    dl_iterate_phdr(bias_cb, &bias);
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        const Elf64_Sym *s = (const Elf64_Sym *)(m + sh[i].sh_offset);
        const char *str = m + sh[sh[i].sh_link].sh_offset;
        // Local symbols follow their file's STT_FILE: two files' anonymous-namespace kernels
        // of the same types have the same names, and each has its own statics.
        int file = 0;
        for (size_t k = 0; k < sh[i].sh_size / sizeof *s; k++) {
            int type = ELF64_ST_TYPE(s[k].st_info);
            if (type == STT_FILE) file++;
            if (s[k].st_shndx == SHN_UNDEF || !s[k].st_value) continue;
            const char *name = str + s[k].st_name;
            int f = ELF64_ST_BIND(s[k].st_info) == STB_LOCAL ? file : -1;
            if (type == STT_FUNC) funcs.push_back({bias + s[k].st_value, s[k].st_size, name, f});
            else if (type == STT_OBJECT && !strncmp(name, "_ZZ", 3))
                statics.push_back({bias + s[k].st_value, s[k].st_size, name, f});
        }
        symtab_state = 1; // the mapping stays: the names point into it
    }
}

const unsigned char NOP = 0x90, ENDBR64[4] = {0xf3, 0x0f, 0x1e, 0xfa};

int order_mode = -1;
unsigned long long order_seed = 1;

void read_env()
{
    const char *s = rt_env_str(RT_ENV_SIMT_SCHED), *seed = rt_env_str(RT_ENV_SIMT_SEED);
    if (!s || !strcmp(s, "forward")) order_mode = 0;
    else if (!strcmp(s, "reversed")) order_mode = 1;
    else if (!strcmp(s, "random")) order_mode = 2;
    else if (!strcmp(s, "warps")) order_mode = 3;
    else {
        fprintf(stderr, "simt: DDPRT_SIMT_SCHED=%s: the thread order is forward, reversed, random or warps\n", s);
        exit(2);
    }
    if (seed) order_seed = strtoull(seed, NULL, 10);
}
} // namespace

simt::kinfo *simt::info_of(void *kernel)
{
    std::lock_guard<std::mutex> g(info_mu);
    auto it = kinfos.find(kernel);
    if (it != kinfos.end()) return &it->second;
    if (!symtab_state) read_symtab();
    kinfo k{};
    const unsigned char *c = (const unsigned char *)kernel;
    if (!memcmp(c, ENDBR64, 4)) c += 4;
    while (c[k.bound] == NOP && k.bound <= 1024) k.bound++;
    for (const sym &f : funcs) {
        if (f.addr != (uintptr_t)kernel || strncmp(f.name, "_Z", 2)) continue;
        k.sym = f.name;
        std::string pre = std::string("_ZZ") + (f.name + 2) + "E"; // _ZZ<encoding>E<name>
        for (const sym &s : statics)
            if (!strncmp(s.name, pre.c_str(), pre.size()) && (s.file < 0 || f.file < 0 || s.file == f.file)) {
                k.vars.push_back({(char *)s.addr, s.size});
                k.shared += s.size;
            }
        break;
    }
    return &(kinfos[kernel] = k);
}

cudaError_t simt::check_launch(const launch_rec *L, char *why, size_t len)
{
    const dim3 &g = L->c.grid, &b = L->c.block;
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535 || !b.x || !b.y || !b.z ||
        b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024) {
        snprintf(why, len, "grid (%u,%u,%u), block (%u,%u,%u): a block holds 1 to 1024 threads (z up to 64), a grid "
                 "1 to 2^31-1 blocks in x, 65535 in y and z", g.x, g.y, g.z, b.x, b.y, b.z);
        return cudaErrorInvalidConfiguration;
    }
    kinfo *k = info_of(L->kernel);
    size_t dyn_max = k->max_dyn ? (size_t)k->max_dyn : 48 * 1024;
    if (L->c.shmem > dyn_max || L->c.shmem + k->shared > SIMT_DYN_MAX) {
        snprintf(why, len, "%zu bytes of dynamic shared memory: over the kernel's %zu (cudaFuncSetAttribute("
                 "cudaFuncAttributeMaxDynamicSharedMemorySize) raises it) or, with %zu static bytes, over %d",
                 L->c.shmem, dyn_max, k->shared, SIMT_DYN_MAX);
        return cudaErrorInvalidValue;
    }
    if (k->bound && threads > (unsigned long long)k->bound) {
        snprintf(why, len, "a block of %llu threads, over the kernel's __launch_bounds__(%d)", threads, k->bound);
        return cudaErrorLaunchOutOfResources;
    }
    if (k->shared > 48 * 1024) {
        snprintf(why, len, "%zu bytes of static shared memory, over the 48 KiB a block may declare", k->shared);
        return cudaErrorLaunchOutOfResources;
    }
    return cudaSuccess;
}

int simt::sched_order()
{
    static std::once_flag once;
    std::call_once(once, read_env);
    return order_mode;
}

unsigned long long simt::sched_seed()
{
    sched_order();
    return order_seed;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || !func) return cudaErrorInvalidValue;
    simt::kinfo *k = simt::info_of((void *)func);
    if (value < 0 || (size_t)value + k->shared > SIMT_DYN_MAX) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> g(info_mu);
    k->max_dyn = value;
    return cudaSuccess;
}
