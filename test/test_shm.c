/* Shared memory inside a host (transport/tp_shm.h) through real processes and the
 * rendezvous: the collectives matrix (every collective, dtype and redop) with 2, 3 and
 * 4 ranks, through the copy protocol and through single copy (DDPRT_SHM_CMA_MIN=1: every
 * size), with float results equal bit for bit on every rank; single copy off
 * (DDPRT_SHM_CMA=0) or impossible for one rank (a seccomp filter refusing
 * process_vm_readv: every rank keeps the copy protocol); DDPRT_SHM=0 falling back to
 * sockets, a rank killed inside a single copy op named by the others, a rank SIGKILLed mid-allreduce named by
 * the others, a mismatched collective named at once, and no segment left in /dev/shm
 * on any of these exits (nor after a rank 0 killed before it could unlink its own:
 * the next job removes it). */
#include "test/t.h"
#include "test/t_proc.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXW 4

static void spawn(t_proc *p, int r, const char *mode, const char *url, int world, char **env, const char *a1,
                  const char *a2)
{
    char rs[16], ws[16], name[64];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(ws, sizeof ws, "%d", world);
    snprintf(name, sizeof name, "shm-%s-%d", mode, r);
    char *argv[] = {(char *)t_prog("t-shm_coll"), (char *)mode, (char *)url, rs, ws, (char *)(a1 ? a1 : "-"),
                    (char *)(a2 ? a2 : "-"), NULL};
    t_spawn(p, name, argv, env);
}

/* Segments in /dev/shm made by process pid (rank 0 names them after itself). */
static int segments_of(int pid)
{
    char pre[64];
    snprintf(pre, sizeof pre, "ddprt-shm.%d.", pid);
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, pre, strlen(pre));
    if (d) closedir(d);
    return n;
}

static void url_for(char *url, size_t n) { snprintf(url, n, "tcp://127.0.0.1:%d", t_free_port()); }

/* Every rank runs mode (with env, and env1 for rank 1 only) and must print "shm
 * <want_shm>", "cma <want_cma>" (-1: either) and "rank R of W ok". */
static void run_ok2(int world, const char *mode, char **env, char **env1, int want_shm, int want_cma)
{
    t_clean_env();
    t_proc p[MAXW];
    char url[64];
    url_for(url, sizeof url);
    for (int r = 0; r < world; r++) spawn(&p[r], r, mode, url, world, r == 1 && env1 ? env1 : env, "timeout=60", NULL);
    for (int r = 0; r < world; r++) {
        int rc = t_wait(&p[r], 120);
        char want[64], shm[16], cma[16];
        snprintf(want, sizeof want, "rank %d of %d ok", r, world);
        snprintf(shm, sizeof shm, "shm %d\n", want_shm);
        snprintf(cma, sizeof cma, "cma %d\n", want_cma);
        const char *out = t_slurp(p[r].out);
        CHECKF(rc == 0 && strstr(out, want) && strstr(out, shm) && (want_cma < 0 || strstr(out, cma)),
               "%s world %d: rank %d exited %d\nstdout: %s\nstderr: %s", mode, world, r, rc, out, t_slurp(p[r].err));
    }
    /* Rank 0 names the pairs' transport (tp_transport.h), the last pair too. */
    char pair[96];
    snprintf(pair, sizeof pair, "rank %d <-> %d: %s", world - 2, world - 1, want_shm ? "shm (same host)" : "tcp (same host; no shm: ");
    CHECKF(strstr(t_slurp(p[0].err), pair), "rank 0 does not log '%s':\n%s", pair, t_slurp(p[0].err));
    CHECKF(segments_of(p[0].pid) == 0, "a segment of rank 0 (pid %d) is left in /dev/shm", (int)p[0].pid);
}

static void run_ok(int world, const char *mode, char **env, int want_shm)
{
    run_ok2(world, mode, env, NULL, want_shm, -1);
}

/* The copy protocol (single copy off) at every size. */
static char *no_cma[] = {"DDPRT_SHM_CMA=0", NULL};
PTEST(shm_matrix_2) { run_ok2(2, "matrix", no_cma, NULL, 1, 0); }
PTEST(shm_matrix_3) { run_ok2(3, "matrix", no_cma, NULL, 1, 0); }
PTEST(shm_matrix_4) { run_ok2(4, "matrix", no_cma, NULL, 1, 0); }

/* Single copy at every size (from 1 byte on), in place and not. */
static char *all_cma[] = {"DDPRT_SHM_CMA=1", "DDPRT_SHM_CMA_MIN=1", NULL};
PTEST(shm_cma_matrix_2) { run_ok2(2, "matrix", all_cma, NULL, 1, 1); }
PTEST(shm_cma_matrix_3) { run_ok2(3, "matrix", all_cma, NULL, 1, 1); }
PTEST(shm_cma_matrix_4) { run_ok2(4, "matrix", all_cma, NULL, 1, 1); }

/* Rank 1 cannot read the others' memory (a seccomp filter, as in some containers, or
 * a ptrace policy): every rank keeps the copy protocol, results right. */
PTEST(shm_cma_refused_keeps_copy)
{
    char *deny[] = {"DDPRT_SHM_CMA=1", "DDPRT_SHM_CMA_MIN=1", "T_SHM_DENY_CMA=1", NULL};
    run_ok2(2, "matrix", all_cma, deny, 1, 0);
    run_ok2(3, "ping", all_cma, deny, 1, 0);
}

/* DDPRT_SHM=0: the same matrix over the sockets, no segment mapped. */
PTEST(shm_off_falls_back_to_sockets)
{
    char *env[] = {"DDPRT_SHM=0", NULL};
    run_ok(2, "matrix", env, 0);
    run_ok(3, "ping", env, 0);
}

/* A rank SIGKILLed mid-allreduce (32 MiB, several steps): the others exit 3 naming it
 * and the op, well within the 60 s deadline. cma_kill: the victim dies inside its
 * second single copy op, after publishing its buffers, while the others read them. */
static void run_kill(int world, int victim, int cma_kill)
{
    t_clean_env();
    t_proc p[MAXW];
    char url[64], vs[32];
    char *fault[] = {"DDPRT_SHM_CMA=1", "DDPRT_SHM_TEST_FAULT=cma_kill", NULL}, *cma_on[] = {"DDPRT_SHM_CMA=1", NULL};
    /* cma_kill 2: the same inside an op on registered buffers (the others read and
     * write the victim's memory: their mappings stay valid after it died). */
    char *mfault[] = {"T_SHM_MEM=1", "DDPRT_SHM_TEST_FAULT=map_kill", NULL}, *map_on[] = {"T_SHM_MEM=1", NULL};
    if (cma_kill == 2) memcpy(fault, mfault, sizeof fault), memcpy(cma_on, map_on, sizeof cma_on);
    /* cma_kill 3: SIGKILLed by the test program on two fake hosts (its same-host
     * partner waits on it through the pair's shm ring). */
    char *hosts[] = {"T_SHM_HOSTS=1,1,2,2", NULL};
    int lib = cma_kill == 1 || cma_kill == 2;
    url_for(url, sizeof url);
    snprintf(vs, sizeof vs, "victim=%d", lib ? -2 : victim);
    for (int r = 0; r < world; r++)
        spawn(&p[r], r, "kill", url, world, cma_kill == 3 ? hosts : !cma_kill ? NULL : r == victim ? fault : cma_on, vs,
              "timeout=60");
    int rc[MAXW];
    for (int r = 0; r < world; r++) rc[r] = t_wait(&p[r], 90);
    CHECKF(rc[victim] == 128 + 9, "victim exited %d: %s", rc[victim], t_slurp(p[victim].err));
    double tk = 0, tf = 0;
    const char *kl = strstr(t_slurp(lib ? p[victim].err : p[victim].out), "killed at "); /* after log lines */
    CHECK(kl && sscanf(kl, "killed at %lf", &tk) == 1);
    char want[32];
    snprintf(want, sizeof want, "rank %d ", victim);
    for (int r = 0; r < world; r++) {
        if (r == victim) continue;
        const char *out = t_slurp(p[r].out);
        CHECKF(rc[r] == 3 && sscanf(out, "failed at %lf", &tf) == 1, "rank %d exited %d\nstdout: %s\nstderr: %s", r,
               rc[r], out, t_slurp(p[r].err));
        CHECKF(strstr(out, "allreduce #") && strstr(out, want), "rank %d does not name the op and %s: %s", r, want,
               out);
        CHECKF(tf - tk < 20, "rank %d failed %.1f s after the kill (deadline 60 s)", r, tf - tk);
    }
    CHECKF(segments_of(p[0].pid) == 0, "a segment of rank 0 (pid %d) is left in /dev/shm", (int)p[0].pid);
}

PTEST(shm_kill_one_rank_2) { run_kill(2, 1, 0); }
PTEST(shm_kill_on_a_pair_ring_2x2) { run_kill(4, 1, 3); }
PTEST(shm_kill_on_a_pair_ring_2x2_rank0) { run_kill(4, 0, 3); }

/* Two fake hosts of two ranks (one machine): the same-host pairs take shm's
 * point-to-point rings (both ranks map two p2p inboxes: theirs and the partner's), the
 * cross pairs tcp; no comm-wide segment; every collective and send/recv to both
 * partners correct, and float sums equal bit for bit to a job with DDPRT_SHM=0 (every
 * pair tcp). */
/* One job on two fake hosts; out[r]: rank r's stdout (the test's copy). */
static void pairs_job(char **env, int shm, char out[4][4096])
{
    t_clean_env();
    t_proc p[4];
    char url[64];
    url_for(url, sizeof url);
    for (int r = 0; r < 4; r++) spawn(&p[r], r, "pairs", url, 4, env, "timeout=60", NULL);
    for (int r = 0; r < 4; r++) {
        int rc = t_wait(&p[r], 120);
        char want[64];
        snprintf(want, sizeof want, "rank %d of 4 ok", r);
        const char *o = t_slurp(p[r].out);
        snprintf(out[r], 4096, "%s", o);
        CHECKF(rc == 0 && strstr(o, want) && strstr(o, "shm 0\n") && strstr(o, "p2p ok") &&
                   strstr(o, shm ? "p2p inboxes 2\n" : "p2p inboxes 0\n"),
               "rank %d exited %d\nstdout: %s\nstderr: %s", r, rc, o, t_slurp(p[r].err));
    }
    const char *log = t_slurp(p[0].err);
    static const char *const lines[] = {"rank 0 <-> 1: shm (same host, point-to-point)",
                                        "rank 2 <-> 3: shm (same host, point-to-point)",
                                        "rank 0 <-> 2: tcp (different hosts)", "rank 1 <-> 3: tcp (different hosts)"};
    for (int i = shm ? 0 : 2; i < 4; i++) CHECKF(strstr(log, lines[i]), "rank 0 does not log '%s':\n%s", lines[i], log);
    CHECKF(!strstr(log, "shm pairs send through"), "the rings were not used:\n%s", log);
}

PTEST(shm_pairs_on_two_fake_hosts_4)
{
    static char with[4][4096], without[4][4096];
    char *env[] = {"T_SHM_HOSTS=1,1,2,2", "DDPRT_SHM_CMA=0", NULL};
    char *off[] = {"T_SHM_HOSTS=1,1,2,2", "DDPRT_SHM=0", NULL};
    pairs_job(env, 1, with);
    pairs_job(off, 0, without);
    /* The same sums, bit for bit, on every rank and whatever carried the bytes. */
    for (int r = 0; r < 4; r++) {
        const char *a = strstr(with[r], "sums "), *b = strstr(without[r], "sums "), *z = strstr(with[0], "sums ");
        CHECKF(a && b && z && !strncmp(a, b, 21) && !strncmp(a, z, 21), "rank %d: shm rings '%.21s', tcp '%.21s'", r,
               a ? a : "-", b ? b : "-");
    }
}
PTEST(shm_kill_one_rank_3) { run_kill(3, 0, 0); }
PTEST(shm_kill_in_single_copy_2) { run_kill(2, 1, 1); }
PTEST(shm_kill_in_single_copy_3) { run_kill(3, 2, 1); }
PTEST(shm_kill_in_registered_2) { run_kill(2, 0, 2); }
PTEST(shm_kill_in_registered_3) { run_kill(3, 1, 2); }

/* Registered buffers (tp_mem_alloc; DDPRT_SHM_MAP_MIN=1: every allreduce of at least
 * a byte): the matrix and the bitwise checks with world ranks, env for all and env1
 * for rank 1. map_ops 1: every rank ran ops on registered buffers; 0: none did (every
 * rank kept the copy protocol), and rank 0 says so. Every rank freed its blocks' memfds. */
static void run_map(int world, char **env1, int map_ops)
{
    static char *env[] = {"T_SHM_MEM=1", "DDPRT_SHM_MAP_MIN=1", NULL};
    t_clean_env();
    t_proc p[MAXW];
    char url[64];
    url_for(url, sizeof url);
    for (int r = 0; r < world; r++) spawn(&p[r], r, "matrix", url, world, r == 1 && env1 ? env1 : env, "timeout=60", NULL);
    for (int r = 0; r < world; r++) {
        int rc = t_wait(&p[r], 120);
        char want[64];
        snprintf(want, sizeof want, "rank %d of %d ok", r, world);
        const char *out = t_slurp(p[r].out), *m = strstr(out, "map ");
        unsigned long long n = 0;
        int reg = r != 1 || !env1 || strstr(env1[0], "T_SHM_MEM"); /* rank 1 without T_SHM_MEM prints no map line */
        CHECKF(rc == 0 && strstr(out, want) && strstr(out, "shm 1\n"), "world %d: rank %d exited %d\nstdout: %s\nstderr: %s",
               world, r, rc, out, t_slurp(p[r].err));
        if (!reg) continue;
        CHECKF(m && sscanf(m, "map %llu", &n) == 1 && (map_ops ? n > 100 : n == 0) && strstr(out, "fds 0\n"),
               "world %d: rank %d ran %llu ops on registered buffers (want %s), or kept memfds open:\n%s", world, r, n,
               map_ops ? "> 100" : "0", out);
    }
    CHECKF(segments_of(p[0].pid) == 0, "a segment of rank 0 (pid %d) is left in /dev/shm", (int)p[0].pid);
}

PTEST(shm_registered_matrix_2) { run_map(2, NULL, 1); }
PTEST(shm_registered_matrix_3) { run_map(3, NULL, 1); }
PTEST(shm_registered_matrix_4) { run_map(4, NULL, 1); }

/* One rank cannot take part (its buffers are malloc'd, it cannot map the others'
 * blocks, it turned registered buffers off, or memfd_create failed there): every
 * rank keeps the copy protocol, results right. */
PTEST(shm_registered_one_rank_out_keeps_copy)
{
    char *plain[] = {"DDPRT_SHM_MAP_MIN=1", NULL};
    char *noopen[] = {"T_SHM_MEM=1", "DDPRT_SHM_MAP_MIN=1", "DDPRT_SHM_TEST_FAULT=map_open", NULL};
    char *off[] = {"T_SHM_MEM=1", "DDPRT_SHM_MAP_MIN=1", "DDPRT_SHM_MAP=0", NULL};
    char *nomemfd[] = {"T_SHM_MEM=1", "DDPRT_SHM_MAP_MIN=1", "DDPRT_SHM_TEST_FAULT=memfd", NULL};
    run_map(2, plain, 0);
    run_map(3, noopen, 0);
    run_map(2, off, 0);
    run_map(2, nomemfd, 0);
}

/* Rank 0 allreduces 1000 floats, the others 2000: every rank fails at once naming
 * both sides (not at the deadline). */
PTEST(shm_mismatch_is_named)
{
    t_clean_env();
    t_proc p[3];
    char url[64];
    url_for(url, sizeof url);
    for (int r = 0; r < 3; r++) spawn(&p[r], r, "mismatch", url, 3, NULL, "timeout=60", NULL);
    for (int r = 0; r < 3; r++) {
        int rc = t_wait(&p[r], 90);
        const char *out = t_slurp(p[r].out);
        CHECKF(rc == 3 && strstr(out, "collective mismatch") && strstr(out, "allreduce float sum 4000 B") &&
                   strstr(out, "allreduce float sum 8000 B") && !strstr(out, "timed out"),
               "rank %d exited %d\nstdout: %s\nstderr: %s", r, rc, out, t_slurp(p[r].err));
    }
    CHECKF(segments_of(p[0].pid) == 0, "a segment of rank 0 (pid %d) is left in /dev/shm", (int)p[0].pid);
}

/* Rank 0 killed between creating its segment and unlinking it: its segment stays
 * (nobody can unlink it before the others have it mapped), rank 1 fails naming rank
 * 0, and the next job's rank 0 removes the dead one's segment. */
PTEST(shm_dead_creator_segment_is_swept)
{
    t_clean_env();
    t_proc p[2];
    char url[64];
    url_for(url, sizeof url);
    char *fault[] = {"DDPRT_SHM_TEST_FAULT=create", NULL};
    spawn(&p[0], 0, "ping", url, 2, fault, "timeout=30", NULL);
    spawn(&p[1], 1, "ping", url, 2, NULL, "timeout=30", NULL);
    /* Rank 1 fails once rank 0 is dead; rank 0, not yet reaped, still counts as alive
     * for every job's sweep (other jobs on a shared host sweep too). */
    int rc1 = t_wait(&p[1], 60);
    int segs = segments_of(p[0].pid), rc0 = t_wait(&p[0], 60);
    CHECKF(rc0 == 128 + 9, "rank 0 exited %d: %s", rc0, t_slurp(p[0].err));
    CHECKF(rc1 == 3 && strstr(t_slurp(p[1].err), "rank 0"), "rank 1 exited %d: %s", rc1, t_slurp(p[1].err));
    CHECKF(segs == 1, "the dead rank 0's segment is not in /dev/shm (%d)", segs);
    run_ok(2, "ping", NULL, 1);
    CHECKF(segments_of(p[0].pid) == 0, "the next job did not remove the dead rank 0's segment");
}
