/* What users compare a same-node `demand` with: Open MPI moving the same sizes between two
 * ranks. `maestro bench pool --mpi` compiles this with mpicc and runs it under mpirun.
 *
 * For each size given on the command line (bytes), rank 1 sends `size` bytes to rank 0,
 * which answers with an empty message once they are all received (so the time covers the
 * data being in the receiver's buffer, as a demand's does). One message at a time, or a
 * window of W messages (Irecv/Isend) before the answer, as `bench pool --window W`.
 * Each size is timed twice: with the window's buffers reused (they stay in the cache), and
 * with fresh buffers, each message in the next `size` bytes of a region as large as the
 * volume (up to 1 GiB), as the pool moves fresh CDOs (the region is written before the
 * clock starts, so no page is faulted in while timed).
 * Prints first "hosts <rank 0's host> <rank 1's host>", then one line per size:
 * "<size> <iterations> <GB/s reused> <GB/s fresh>". Exit code 1 on bad arguments.
 *
 * Usage: pingpong WINDOW VOLUME SIZE...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long parse(const char *s, const char *what)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v <= 0) {
        fprintf(stderr, "pingpong: %s must be a positive number, not \"%s\"\n", what, s);
        exit(1);
    }
    return v;
}

/* n messages of `size` bytes from rank 1 to rank 0 (each into its own buffer), then the
 * empty answer. */
static void round_trip(char *buf, long size, long n, int rank, MPI_Request *reqs)
{
    for (long k = 0; k < n; k++) {
        char *b = buf + (size_t)k * (size_t)size;
        if (rank == 0)
            MPI_Irecv(b, (int)size, MPI_CHAR, 1, 0, MPI_COMM_WORLD, &reqs[k]);
        else
            MPI_Isend(b, (int)size, MPI_CHAR, 0, 0, MPI_COMM_WORLD, &reqs[k]);
    }
    MPI_Waitall((int)n, reqs, MPI_STATUSES_IGNORE);
    if (rank == 0)
        MPI_Send(NULL, 0, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
    else
        MPI_Recv(NULL, 0, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2 || argc < 4) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 pingpong WINDOW VOLUME SIZE...\n");
        MPI_Finalize();
        return 1;
    }
    long window = parse(argv[1], "WINDOW"), volume = parse(argv[2], "VOLUME");
    /* Where the ranks run: the caller checks it asked for one host each. */
    char host[MPI_MAX_PROCESSOR_NAME] = {0}, hosts[2][MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(host, &len);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (rank == 0)
        printf("hosts %s %s\n", hosts[0], hosts[1]);
    MPI_Request *reqs = calloc((size_t)window, sizeof *reqs);
    for (int a = 3; a < argc; a++) {
        long size = parse(argv[a], "SIZE");
        long iters = volume / size;
        iters = iters < 20 ? 20 : iters > 20000 ? 20000 : iters;
        char *buf = malloc((size_t)size * (size_t)window);
        if (buf == NULL || reqs == NULL) {
            fprintf(stderr, "pingpong: no memory for %ld x %ld bytes\n", window, size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memset(buf, rank + 1, (size_t)size * (size_t)window);
        /* One untimed round sets connections up. */
        round_trip(buf, size, 1, rank, reqs);
        double start = MPI_Wtime();
        for (long i = 0; i < iters; i += window)
            round_trip(buf, size, iters - i < window ? iters - i : window, rank, reqs);
        double took = MPI_Wtime() - start;
        free(buf);
        /* Fresh buffers: message k of the run in bytes k * size of the region, wrapping. */
        long span_msgs = iters;
        const long most = 1L << 30;
        if (span_msgs * size > most)
            span_msgs = most / size;
        if (span_msgs < window)
            span_msgs = window;
        char *region = malloc((size_t)size * (size_t)span_msgs);
        if (region == NULL) {
            fprintf(stderr, "pingpong: no memory for %ld x %ld bytes\n", span_msgs, size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memset(region, rank + 1, (size_t)size * (size_t)span_msgs);
        MPI_Barrier(MPI_COMM_WORLD);
        double fresh_start = MPI_Wtime();
        for (long i = 0; i < iters; i += window) {
            long n = iters - i < window ? iters - i : window;
            long at = i % span_msgs;
            if (at + n > span_msgs)
                at = 0;
            round_trip(region + (size_t)at * (size_t)size, size, n, rank, reqs);
        }
        double fresh = MPI_Wtime() - fresh_start;
        if (rank == 0)
            printf("%ld %ld %.9g %.9g\n", size, iters, (double)size * (double)iters / took / 1e9,
                   (double)size * (double)iters / fresh / 1e9);
        fflush(stdout);
        free(region);
    }
    free(reqs);
    MPI_Finalize();
    return 0;
}
