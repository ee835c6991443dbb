/* Open MPI peer for ddprt-bench: MPI_Allreduce (float, sum) timed the way ddprt-bench times
 * its allreduce (warm-up, then the mean of timed iterations, busbw = algbw * 2(n-1)/n), so the
 * two tables can be compared line by line. Not part of the build (needs mpicc); scripts use
 *   mpicc -O2 bench/ompi_bench.c -o build/ompi-bench
 *   mpirun -np 2 --mca btl self,vader build/ompi-bench [MIN [MAX [FACTOR [ITERS]]]] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    size_t lo = argc > 1 ? parse_size(argv[1]) : 4, hi = argc > 2 ? parse_size(argv[2]) : 64u << 20;
    int factor = argc > 3 ? atoi(argv[3]) : 2, iters = argc > 4 ? atoi(argv[4]) : 20;
    if (lo < 4 || hi < lo || factor < 2 || iters < 1) {
        if (!rank) fprintf(stderr, "ompi-bench: bad arguments (MIN MAX FACTOR ITERS)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    float *buf = malloc(hi), *out = malloc(hi);
    if (!buf || !out) MPI_Abort(MPI_COMM_WORLD, 1);
    if (!rank) {
        printf("# ompi-bench allreduce: world %d, float sum, iters %d, warmup 5\n", world, iters);
        printf("#       size        count       time    algbw    busbw  #wrong\n");
        printf("#        (B)   (elements)       (us)   (GB/s)   (GB/s)\n");
    }
    for (size_t bytes = lo; bytes <= hi; bytes *= (size_t)factor) {
        size_t n = bytes / 4;
        for (size_t i = 0; i < n; i++) buf[i] = (float)((rank + i) % 7);
        for (int i = 0; i < 5; i++) MPI_Allreduce(buf, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) MPI_Allreduce(buf, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - t0) / iters * 1e6;
        long wrong = 0; /* each element is the sum over ranks of (r + i) % 7 */
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int r = 0; r < world; r++) want += (float)((r + i) % 7);
            wrong += out[i] != want;
        }
        double alg = bytes / us / 1e3;
        if (!rank)
            printf("%12zu %12zu %10.2f %8.3f %8.3f %7ld\n", bytes, n, us, alg, alg * 2.0 * (world - 1) / world, wrong);
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}
